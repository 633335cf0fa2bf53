"""The bill before the run: every engine job of a config with its estimated device time.

Estimate of one measured point (B copies of a request): the target's no-SD time from a cost model,
one prefill step T(0, B·P) plus L decode steps T(B·(P+j), B) + overhead, P = prompt tokens and
L = expected output tokens (``datasets.<d>.expected_output_tokens``, else ``max_output_tokens``:
an upper bound). Speculative configurations are charged the same (no speedup assumed), so the plan
errs long. A trace job (one method's k = 20 engine, :func:`trace_seconds`) is charged every step's
verification of k + 1 tokens per request and, for model drafters, k EAGLE-head drafts. Each job is charged ``run.engine_start_s`` seconds of engine start (a stated assumption; 0 if absent). The cost model's hardware and model are scaled to other targets by weight bytes per GPU
(``size_gb / tensor_parallel_size`` against the cost model's own target), a first-order rule:
decoding is memory-bound, its step time grows with the bytes each GPU reads.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from .core.costmodel import load_cost_model
from .jobspec import experiment_configs, profiled_datasets, profiled_requests
from .jobspec.args import TRACE_K, trace_label
from .jobspec.draftjobs import draft_jobs
from .jobspec.jobs import trace_methods, trace_num_requests

#: prompt length assumed where a dataset gives none (tokens)
DEFAULT_PROMPT_TOKENS = 512
#: weights of the built-in cost model's target (Llama-3.1-8B-Instruct, bf16), GB
COST_MODEL_TARGET_GB = 16.1


def point_seconds(cm, batch_size: int, prompt_tokens: float, output_tokens: float, scale: float = 1.0) -> float:
    """No-SD time of one point under cost model ``cm`` (closed form of the per-step sum)."""
    b, p, n = batch_size, float(prompt_tokens), int(round(output_tokens))
    prefill = cm.target(0, b * p)
    # sum_{j=1..n} c_kv*B*(p+j) + c_compute*B + c_fixed
    decode = cm.c_kv * b * (n * p + n * (n + 1) / 2) + n * (cm.c_compute * b + cm.c_fixed)
    return scale * (prefill + decode) + (n + 1) * cm.overhead


#: sequences an engine runs at once (vLLM's default max_num_seqs): the trace engines' batch
TRACE_MAX_SEQS = 256


def trace_seconds(cm, n_requests: int, prompt_tokens: float, output_tokens: float, k: int = TRACE_K,
                  scale: float = 1.0, drafter: bool = True, cap: float | None = None) -> float:
    """Time of one dataset of a trace engine: all requests in waves of :data:`TRACE_MAX_SEQS`, one token
    kept per step, so ``L`` steps a wave, each verifying ``k + 1`` tokens per request and (model
    drafters, charged as EAGLE heads) drafting ``k`` tokens; plus, with ``cap > L``, one request running
    on alone to the cap (the longest output sets the job's end)."""

    def steps(b: int, p: float, first: int, last: int) -> float:
        """Steps ``first..last`` of ``b`` requests with ``p`` prompt tokens (closed-form sums)."""
        m = last - first + 1
        if m <= 0:
            return 0.0
        kv = b * (m * p + (first + last) * m / 2)
        t = cm.c_kv * kv + m * (cm.c_compute * b * (k + 1) + cm.c_fixed)
        d = k * (cm.d_kv * kv + m * (cm.d_spec + cm.d_fixed + b * cm.d_tok)) if drafter else 0.0
        return scale * (t + d) + m * cm.overhead

    waves, b = -(-int(n_requests) // TRACE_MAX_SEQS), min(int(n_requests), TRACE_MAX_SEQS)
    p, n = float(prompt_tokens), int(round(output_tokens))
    per_wave = scale * cm.target(0, b * p) + cm.overhead + steps(b, p, 1, n)
    tail = steps(1, p, n + 1, int(cap)) if cap is not None else 0.0
    return waves * per_wave + tail


def plan_jobs(cfg: Mapping[str, Any], cost_model: str = "llama3.1-8b-h100") -> pd.DataFrame:
    """One row per engine job (bench, profile, draft and trace) with points, GPUs and estimated device hours."""
    cm = load_cost_model(cost_model)
    start = float((cfg.get("run") or {}).get("engine_start_s") or 0)
    rows = []
    prof = cfg.get("profiling", {})
    for exp in cfg.get("experiments", []):
        model = cfg["models"][exp["model"]]
        gpus = int(model.get("tensor_parallel_size", 1))
        size = (model.get("source", {}).get("hf") or {}).get("size_gb")
        scale = (size / gpus) / COST_MODEL_TARGET_GB if size else 1.0
        for label, job in experiment_configs(exp).items():
            for kind, bs, nreq, dss in (
                ("bench", exp["batch_sizes"], exp.get("num_requests"), job["datasets"]),
                ("profile", prof.get("batch_sizes", []), profiled_requests(exp, prof), profiled_datasets(exp, job, prof)),
            ):
                secs, points = 0.0, 0
                for d in dss:
                    dcfg = cfg["datasets"][d]
                    n = min(int(nreq or dcfg["num_samples"]), int(dcfg["num_samples"]))
                    cap = int(exp.get("max_output_tokens") or dcfg["max_output_tokens"])
                    out = min(float(dcfg.get("expected_output_tokens") or cap), cap)
                    p = float(dcfg.get("expected_prompt_tokens") or DEFAULT_PROMPT_TOKENS)
                    secs += n * sum(point_seconds(cm, int(b), p, out, scale) for b in bs)
                    points += n * len(bs)
                if points:
                    rows.append({"exp": exp["name"], "job": kind, "config": label, "model": exp["model"], "gpus": gpus,
                                 "points": points, "est_hours": secs / 3600, "est_gpu_hours": secs * gpus / 3600})
        # draft jobs (experiments[].drafts): one engine each, every plan (a controlled job: every profile) over
        # its points, charged as no SD like the other SD jobs
        for label, job in draft_jobs(exp).items():
            plans = max(len(job["profiles"]), 2) if job["mode"] == "controlled" else 1
            secs, points = 0.0, 0
            for d in job["datasets"]:
                dcfg = cfg["datasets"][d]
                n = min(int(exp.get("num_requests") or dcfg["num_samples"]), int(dcfg["num_samples"]))
                cap = int(exp.get("max_output_tokens") or dcfg["max_output_tokens"])
                out = min(float(dcfg.get("expected_output_tokens") or cap), cap)
                p = float(dcfg.get("expected_prompt_tokens") or DEFAULT_PROMPT_TOKENS)
                secs += plans * n * sum(point_seconds(cm, int(b), p, out, scale) for b in job["batch_sizes"])
                points += plans * n * len(job["batch_sizes"])
            if points:
                rows.append({"exp": exp["name"], "job": "draft", "config": label, "model": exp["model"], "gpus": gpus,
                             "points": points, "est_hours": secs / 3600, "est_gpu_hours": secs * gpus / 3600})
        none_ds = experiment_configs(exp).get("none", {}).get("datasets", [])
        for method in trace_methods(cfg, exp["name"]):
            secs, points = 0.0, 0
            for d in none_ds:
                dcfg = cfg["datasets"][d]
                n = min(trace_num_requests(exp), int(dcfg["num_samples"]))
                cap = int(exp.get("max_output_tokens") or dcfg["max_output_tokens"])
                out = min(float(dcfg.get("expected_output_tokens") or cap), cap)
                p = float(dcfg.get("expected_prompt_tokens") or DEFAULT_PROMPT_TOKENS)
                secs += trace_seconds(cm, n, p, out, scale=scale, drafter=method != "ngram", cap=cap)
                points += n
            if points:
                rows.append({"exp": exp["name"], "job": "trace", "config": trace_label(method), "model": exp["model"],
                             "gpus": gpus, "points": points, "est_hours": secs / 3600, "est_gpu_hours": secs * gpus / 3600})
    for r in rows:  # the engine start, once per job (each job starts its own engine)
        r["est_hours"] += start / 3600
        r["est_gpu_hours"] += start * r["gpus"] / 3600
    return pd.DataFrame(rows, columns=["exp", "job", "config", "model", "gpus", "points", "est_hours", "est_gpu_hours"])


def job_minutes(table: pd.DataFrame, exp: str, config: str, job: str = "bench") -> float | None:
    m = table[(table["exp"] == exp) & (table["config"] == config) & (table["job"] == job)]
    return float(m["est_hours"].iloc[0] * 60) if len(m) else None


def format_plan(table: pd.DataFrame, engine_start_s: float = 0) -> str:
    """The plan as aligned text, with the total (``engine_start_s``: the per-job engine start it includes)."""
    if table.empty:
        return "no engine jobs in this config"
    lines = [f"{'experiment':<22} {'job':<8} {'config':<16} {'GPUs':>4} {'points':>7} {'est. GPU-h':>10}"]
    for r in table.itertuples(index=False):
        lines.append(f"{r.exp:<22} {r.job:<8} {r.config:<16} {r.gpus:>4} {r.points:>7} {r.est_gpu_hours:>10.2f}")
    lines.append(f"{'total':<22} {'':<8} {'':<16} {'':>4} {int(table['points'].sum()):>7} "
                 f"{table['est_gpu_hours'].sum():>10.2f}")
    lines.append("(estimate: cost-model no-SD time, every SD job charged as no-SD; scaled by weight bytes per GPU;"
                 " output lengths = datasets.<d>.expected_output_tokens, else the output cap; trace jobs: k = 20"
                 " drafts verified per kept token, plus the longest output's tail to the cap; "
                 + (f"each job's engine start charged {engine_start_s:g} s, run.engine_start_s)" if engine_start_s
                    else "engine start not charged)"))
    return "\n".join(lines)
