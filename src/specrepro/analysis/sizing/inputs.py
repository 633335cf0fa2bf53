"""The inputs of sizing: a config file (validated), the released trace files of its trace set, and the simulator
proxy built on them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...config import checked_config
from ...core.costmodel import load_cost_model
from ...core.errors import SpecReproError
from ...core.io import read_json, sha256_file
from ...sim.simulator import NGRAM_MATCH_PROB, PAPER_DRAW
from .variance import TraceProxy


# --- inputs: configs, released traces ---------------------------------------------------------------

REPO = Path(__file__).resolve().parents[4]
#: the full grid every plan is compared with
FULL_CONFIG = REPO / "config" / "paper.yaml"


def load_config(path: str | Path) -> dict:
    """A run config: the resolved JSON the workflow writes (``results/run_config.json``), or a config YAML checked
    and completed as the workflow does (schema defaults, cross-reference checks)."""
    path = Path(path)
    if path.suffix == ".json":
        return read_json(path)
    import yaml

    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecReproError(f"{path}: config not found") from None
    if not isinstance(cfg, dict):
        raise SpecReproError(f"{path}: not a config (expected a mapping)")
    return checked_config(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")


def released_trace_files(cfg: Mapping[str, Any], given: Sequence[str | Path] = (), root: str | Path = ".") -> dict[str, Path]:
    """The released trace file of every dataset of ``cfg['released_traces']``, SHA-256 checked.

    Looked for in ``given`` (files or folders), else in the config's ``traces_dir`` (relative to the repository),
    else in ``<root>/resources/traces/<trace set>/`` (the workflow's verified copies); a folder may hold
    ``<dataset>.jsonl`` or the released name (``combined_<dataset>.jsonl``). Empty where none is found.
    """
    rt = cfg.get("released_traces") or {}
    files = rt.get("files") or {}
    pattern = rt.get("filename", "combined_{dataset}.jsonl")
    if given:
        places = [Path(p) for p in given]
    else:
        places = []
        if cfg.get("traces_dir"):
            td = Path(cfg["traces_dir"]).expanduser()
            places.append(td if td.is_absolute() else REPO / td)
        places.append(Path(root) / "resources" / "traces" / str(rt.get("name", "")))
    out: dict[str, Path] = {}
    for ds, meta in files.items():
        cands = []
        for p in places:
            if p.is_dir():
                cands += [p / f"{ds}.jsonl", p / pattern.format(dataset=ds)]
            elif p.name in (f"{ds}.jsonl", pattern.format(dataset=ds)):
                cands.append(p)
        found = next((c for c in cands if c.is_file()), None)
        if found is None:
            continue
        want = (meta or {}).get("sha256")
        if want and sha256_file(found) != want:
            raise SpecReproError(f"{found}: SHA-256 differs from released_traces.files.{ds}.sha256 in the config "
                                 "(not the released trace)")
        out[ds] = found
    return out


def trace_proxy(cfg: Mapping[str, Any], files: Mapping[str, Path]) -> TraceProxy | None:
    """The :class:`TraceProxy` of a config's released traces, simulator cost model and match probabilities."""
    if not files:
        return None

    sim = cfg.get("simulator") or {}
    name = sim.get("cost_model", "llama3.1-8b-h100")
    try:
        cost = load_cost_model(name)
    except SpecReproError:
        cost = load_cost_model(str(REPO / name))
    probs = {**NGRAM_MATCH_PROB, **(sim.get("ngram_match_prob") or {})}
    label = f"released traces ({(cfg.get('released_traces') or {}).get('name', '')})"
    return TraceProxy(files, cost, probs, PAPER_DRAW["num_requests"], PAPER_DRAW["seed"], label)
