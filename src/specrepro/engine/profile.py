"""The profiled pass (paper Fig. 4) and the cost-fit sweep of one engine configuration."""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping

import pandas as pd

from .args import BenchSpec, apply_engine_env, engine_kwargs, import_vllm
from .bench import _warmup, batch_prompts, plan_points


def run_profile(
    spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], *, model_dir: str, drafter_dir: str | None = None,
    cost_sweep: Mapping[str, Any] | None = None, log=sys.stderr,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Profile every (dataset, request, B) point of ``spec`` with vLLM's phase scopes.

    Returns (events of each batch size's first point, one breakdown row per point, cost-fit steps).
    The steps come from a separate sweep of synthetic prompts with known step shapes (``cost_sweep``:
    batch_sizes, prompt_lens, max_tokens), only for configurations whose shapes are known (no SD, or a
    draft model identical to the target); otherwise the steps table is empty.
    """
    from .breakdown import SCOPE_ENV, phase_breakdown, profile_generate

    os.environ[SCOPE_ENV] = "1"  # before the first LLM(): vLLM reads it when it builds the model runner
    apply_engine_env(spec)
    import_vllm()
    from vllm import LLM, SamplingParams, TokensPrompt

    kw = engine_kwargs(spec, model_dir, drafter_dir)
    if cost_sweep:
        kw["max_num_batched_tokens"] = max(
            int(max(cost_sweep["batch_sizes"]) * max(cost_sweep["prompt_lens"])), kw.get("max_num_batched_tokens", 0) or 0,
            8192)
    llm = LLM(**kw)
    if spec.engine.get("warmup", True):
        _warmup(llm, spec, prompts)
    events, rows = [], []
    for ds, r, b in plan_points(spec, prompts):
        table = prompts[ds]
        sp = SamplingParams(temperature=float(spec.engine.get("temperature", 0)), max_tokens=int(spec.datasets[ds]))
        ids = batch_prompts(spec, table, r, b)
        _, ev = profile_generate(llm, [TokensPrompt(prompt_token_ids=p) for p in ids], sp)
        bd = phase_breakdown(ev.assign(run=0)).drop(columns="run").iloc[0].to_dict()
        rows.append({"exp": spec.exp, "model": spec.model, "method": spec.method, "k": spec.k, "config": spec.label,
                     "dataset": ds, "request_index": r, "batch_size": b, **bd})
        if r == 0:
            events.append(ev.assign(dataset=ds, request_index=r, batch_size=b))
        print(f"{spec.exp} {spec.label} {ds} request {r} B={b}: verification {bd['verification_share']:.1%}", file=log)
    steps = pd.DataFrame()
    if cost_sweep:
        from .costfit import profile_sweep

        steps = profile_sweep(llm, batch_sizes=cost_sweep["batch_sizes"], prompt_lens=cost_sweep["prompt_lens"],
                              max_tokens=int(cost_sweep["max_tokens"]), method=spec.method, k=spec.k)
        steps.insert(0, "exp", spec.exp)
    ev = pd.concat(events, ignore_index=True) if events else pd.DataFrame()
    return ev, pd.DataFrame(rows), steps
