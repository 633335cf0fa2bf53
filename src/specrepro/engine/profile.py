"""The profiled pass (paper Fig. 4) and the cost-fit sweep of one engine configuration."""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any, Mapping

import pandas as pd

from ..io import SpecReproError
from .args import BenchSpec, error_line, open_llm, sampling_kwargs
from .bench import _warmup, batch_prompts, plan_points
from .progress import Progress


def run_profile(
    spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], *, model_dir: str, drafter_dir: str | None = None,
    cost_sweep: Mapping[str, Any] | None = None, log=sys.stderr, record: dict | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Profile every (dataset, request, B) point of ``spec`` with vLLM's phase scopes.

    Returns (events of each batch size's first point, one breakdown row per point, cost-fit steps).
    The steps come from a separate sweep of synthetic prompts with known step shapes (``cost_sweep``:
    batch_sizes, prompt_lens, max_tokens), only for configurations whose shapes are known (no SD, or a
    draft model identical to the target); otherwise the steps table is empty.

    ``record`` gets the job's ``status`` (``ok``, or ``failed`` when the engine did not start: then the
    three tables are empty and ``error`` holds vLLM's error line), ``llm_kwargs``, ``points``, ``elapsed_s``.
    """
    from .breakdown import SCOPE_ENV, phase_breakdown, profile_generate

    t_job = time.perf_counter()
    record = {} if record is None else record
    record.update(status="ok", error=None, image=spec.image, points=0, llm_kwargs=None)
    os.environ[SCOPE_ENV] = "1"  # before the first LLM(): vLLM reads it when it builds the model runner
    kw: dict = {}
    try:
        llm = open_llm(spec, model_dir, drafter_dir, cost_sweep=cost_sweep, log=log, record=kw)
        if spec.engine.get("warmup", True):
            _warmup(llm, spec, prompts)
    except SpecReproError:
        raise
    except Exception as exc:  # noqa: BLE001 - an engine that cannot start is this job's result
        traceback.print_exc(file=log)
        record.update(status="failed", error=error_line(exc), llm_kwargs=kw or None,
                      elapsed_s=time.perf_counter() - t_job)
        print(f"{spec.exp} {spec.label}: the engine did not start: {record['error']}", file=log)
        return pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    record["llm_kwargs"] = kw
    from vllm import SamplingParams, TokensPrompt

    events, rows = [], []
    points = plan_points(spec, prompts)
    progress = Progress(f"{spec.exp} {spec.label} (profiled)", len(points), stream=log)
    for ds, r, b in points:
        table = prompts[ds]
        sp = SamplingParams(**sampling_kwargs(spec, ds))
        ids = batch_prompts(spec, table, r, b)
        _, ev = profile_generate(llm, [TokensPrompt(prompt_token_ids=p) for p in ids], sp)
        bd = phase_breakdown(ev.assign(run=0)).drop(columns="run").iloc[0].to_dict()
        rows.append({"exp": spec.exp, "model": spec.model, "method": spec.method, "k": spec.k, "config": spec.label,
                     "dataset": ds, "request_index": r, "batch_size": b, **bd})
        if r == 0:
            events.append(ev.assign(dataset=ds, request_index=r, batch_size=b))
        progress.step(f"{ds} request {r} B={b}, verification {bd['verification_share']:.1%}")
    steps = pd.DataFrame()
    if cost_sweep:
        from .costfit import profile_sweep

        steps = profile_sweep(llm, batch_sizes=cost_sweep["batch_sizes"], prompt_lens=cost_sweep["prompt_lens"],
                              max_tokens=int(cost_sweep["max_tokens"]), method=spec.method, k=spec.k)
        steps.insert(0, "exp", spec.exp)
    ev = pd.concat(events, ignore_index=True) if events else pd.DataFrame()
    record.update(points=len(rows), elapsed_s=time.perf_counter() - t_job)
    return ev, pd.DataFrame(rows), steps
