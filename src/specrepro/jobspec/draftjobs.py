"""Draft jobs of a config (``experiments[].drafts``) and why one cannot run: names, engines, traces, specs (no
numpy: the config check imports it; the planner is :mod:`specrepro.jobspec.drafts`)."""

from __future__ import annotations

from typing import Any, Mapping

from .hooks import DRAFT_HOOKS


def refusal(mode: str, engine: Mapping[str, Any], vllm_version: str | None) -> str | None:
    """Why a job of a draft-substitution ``mode`` cannot run (one line), or None: it needs synchronous
    scheduling (drafts are taken per step and per request) and an engine whose hook table has the hook."""
    if engine.get("async_scheduling", vllm_version is not None and vllm_version.startswith("0.34")):
        return (f"{mode}: needs synchronous scheduling (engine.async_scheduling: false): under async scheduling "
                "vLLM schedules the next step's drafts on the device before the plugin can replace them")
    if vllm_version is not None and not any(vllm_version.startswith(p) for p in DRAFT_HOOKS):
        return (f"{mode}: vLLM {vllm_version} has no draft-substitution hook in specrepro's hook tables "
                f"(supported: {', '.join(p + 'x' for p in DRAFT_HOOKS)})")
    return None


DRAFT_OUTPUT = "results/engine/{exp}/drafts/{config}.parquet"


def draft_label(entry: Mapping[str, Any], k: int) -> str:
    """``oracle-<of>-k<k>``, ``controlled-<drafter>-k<k>``, ``hybrid-<policy>-<drafter>-k<k>``."""
    if entry["mode"] == "oracle":
        return f"oracle-{entry['of']}-k{k}"
    if entry["mode"] == "controlled":
        return f"controlled-{entry['drafter']}-k{k}"
    return f"hybrid-{entry['policy']}-{entry['drafter']}-k{k}"


def engine_method(entry: Mapping[str, Any]) -> str:
    """The speculative method the engine of a draft job runs (its drafting cost is paid): the oracle's method,
    else the model drafter."""
    if entry["mode"] == "oracle" and entry["of"] != "combine":
        return entry["of"]
    return entry["drafter"]


def trace_inputs(entry: Mapping[str, Any]) -> list[str]:
    """Methods whose keep-one traces (and reference outputs) a draft job reads: none for the hybrid."""
    if entry["mode"] == "hybrid":
        return []
    if entry["mode"] == "oracle":
        return ["ngram", entry["drafter"]] if entry["of"] == "combine" else [entry["of"]]
    traced = [p["trace"] for p in entry.get("profiles") or [] if isinstance(p, Mapping) and "trace" in p]
    return list(dict.fromkeys(traced or [entry["drafter"]]))


def draft_jobs(exp: Mapping[str, Any]) -> dict[str, dict]:
    """{label: job} of an experiment's ``drafts`` entries (one engine each: mode, of, policy, drafter, k, profiles,
    datasets, batch_sizes, the engine's ``method``, the ``traces`` it reads)."""
    out = {}
    for e in exp.get("drafts") or []:
        ks = e["k"] if isinstance(e["k"], list) else [e["k"]]
        for k in ks:
            job = {"mode": e["mode"], "of": e.get("of"), "policy": e.get("policy"), "drafter": e.get("drafter"),
                   "k": int(k), "profiles": list(e.get("profiles") or []),
                   "datasets": [d for d in exp["datasets"] if d in (e.get("datasets") or exp["datasets"])],
                   "batch_sizes": list(e.get("batch_sizes") or exp["batch_sizes"]),
                   "method": engine_method(e), "traces": trace_inputs(e)}
            out[draft_label(e, int(k))] = job
    return out
