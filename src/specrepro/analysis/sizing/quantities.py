"""Engine metric keys as quantities (experiment, dataset, configuration, batch size, statistic) and the engine jobs
and requests that measure them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...jobspec import experiment_configs, profiled_datasets, profiled_requests


# --- engine metric keys --------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantity:
    """One engine metric: ``engine.<exp>.<dataset>.<config>.<name>.<suffix>``.

    ``name``: ``speedup``, ``speedup_drop_pct``, ``breakdown.<phase>_pct``, ``draft_to_target_forward_pct``,
    ``throughput``, ... ; ``batch_sizes``: (B,) or (B0, B) for the drop; ``job``: ``bench`` or ``profile``.
    """

    key: str
    exp: str
    dataset: str
    config: str
    name: str
    batch_sizes: tuple[int, ...]

    @property
    def job(self) -> str:
        return "profile" if self.name.startswith("breakdown.") or self.name == "draft_to_target_forward_pct" else "bench"

    @property
    def method(self) -> str:
        return self.config.split("-k")[0]

    @property
    def k(self) -> int | None:
        return int(self.config.split("-k")[1]) if "-k" in self.config else None


def parse_engine_key(key: str, experiments: Iterable[str], datasets: Iterable[str]) -> Quantity | None:
    """The :class:`Quantity` of an ``engine.<exp>.<dataset>.<config>...`` key (names may hold dots: matched
    against the config's experiment and dataset names); None for other keys."""
    if not key or not key.startswith("engine."):
        return None
    rest = key[len("engine."):]
    exp = next((e for e in sorted(experiments, key=len, reverse=True) if rest.startswith(e + ".")), None)
    if exp is None:
        return None
    rest = rest[len(exp) + 1:]
    ds = next((d for d in sorted(datasets, key=len, reverse=True) if rest.startswith(d + ".")), None)
    if ds is None:
        return None
    config, _, tail = rest[len(ds) + 1:].partition(".")
    name, _, suffix = tail.rpartition(".")
    if not suffix.startswith("b") or not name:
        return None
    try:
        bs = tuple(int(b) for b in suffix[1:].split("_b"))
    except ValueError:
        return None
    return Quantity(key, exp, ds, config, name, bs)


def _exp_map(cfg: Mapping[str, Any]) -> dict[str, dict]:
    return {e["name"]: e for e in cfg.get("experiments", []) or []}


def job_points(cfg: Mapping[str, Any], q: Quantity) -> bool:
    """Whether the config's engine jobs measure quantity ``q`` (its configuration, dataset and batch sizes)."""
    exp = _exp_map(cfg).get(q.exp)
    if exp is None:
        return False
    jobs = experiment_configs(exp)
    job = jobs.get(q.config)
    if job is None:
        return False
    if q.job == "profile":
        prof = cfg.get("profiling") or {}
        return q.dataset in profiled_datasets(exp, job, prof) and set(q.batch_sizes) <= set(prof.get("batch_sizes", []))
    if q.dataset not in job["datasets"] or not set(q.batch_sizes) <= set(exp["batch_sizes"]):
        return False
    if q.name in ("speedup", "speedup_drop_pct") or q.name.startswith("rel_to_eagle"):
        base = jobs.get("none")
        if base is None or q.dataset not in base["datasets"]:
            return False
    if q.name == "speedup_drop_pct":
        return q.batch_sizes[0] == min(exp["batch_sizes"])
    return True


def requests_in(cfg: Mapping[str, Any], q: Quantity) -> int:
    """Requests the config runs for quantity ``q``: the experiment's (or profiling's) ``num_requests``, at most the
    dataset's ``num_samples`` (as ``specrepro plan`` and the bench job count them)."""
    ds = cfg["datasets"][q.dataset]
    if q.job == "profile":
        n = profiled_requests(_exp_map(cfg)[q.exp], cfg.get("profiling") or {})
    else:
        n = _exp_map(cfg)[q.exp].get("num_requests")
    return int(min(int(n or ds["num_samples"]), int(ds["num_samples"])))
