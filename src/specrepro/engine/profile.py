"""The profiled pass (paper Fig. 4) and the cost-fit sweep of one engine configuration.

The phases are measured inside vLLM's model runner by the instrumentation plugin
(:mod:`specrepro.engine.instrument`, switched on here through the environment before the ``LLM`` is
built), so the same code times vLLM 0.10.1.1, 0.11.1, 0.32 (CPU) and 0.34.0, with or without tensor
parallelism (rank 0 records).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from typing import Any, Mapping

import pandas as pd

from ..core.errors import SpecReproError
from .args import BenchSpec, error_line, open_llm, sampling_kwargs
from .bench import _warmup, batch_prompts, plan_points
from .progress import Progress

#: what a missing plugin looks like and how to fix it
NOT_LOADED = (
    "the specrepro vLLM plugin did not run in the engine's worker(s): vLLM finds it through the entry point "
    "'vllm.general_plugins' of src/specrepro_vllm_plugin-0.1.0.dist-info (on PYTHONPATH, as workflow/bin/specrepro "
    "sets it) or of an installed specrepro; VLLM_PLUGINS, when set, must name 'specrepro'"
)


def open_instrumented_llm(spec: BenchSpec, model_dir: str, drafter_dir: str | None, flags: str,
                          record_dir: str | None = None, cost_sweep: Mapping[str, Any] | None = None,
                          log=None, record: dict | None = None):
    """``(llm, steplog)``: the configuration's ``LLM`` (:func:`open_llm`: its keywords go to ``log`` and
    ``record``) with the plugin on (``flags``), checked in every worker."""
    from .instrument import StepLog, job_env, rpc_status

    record_dir = record_dir or tempfile.mkdtemp(prefix="specrepro-steps-")
    # before the first LLM(): vLLM loads its plugins (and spawns workers, which inherit this) while building it
    os.environ.update(job_env(flags, record_dir))
    llm = open_llm(spec, model_dir, drafter_dir, cost_sweep=cost_sweep, log=log, record=record)
    status = llm.collective_rpc(rpc_status)
    if not status or not all(s.get("installed") for s in status):
        raise SpecReproError(f"{NOT_LOADED} (worker status: {status})")
    return llm, StepLog(record_dir)


def run_profile(
    spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], *, model_dir: str, drafter_dir: str | None = None,
    cost_sweep: Mapping[str, Any] | None = None, record_dir: str | None = None, log=sys.stderr,
    record: dict | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Time every (dataset, request, B) point of ``spec`` step by step.

    Returns (the step table of every point, one breakdown row per point, cost-fit steps). The cost-fit
    steps come from a separate sweep of synthetic prompts with known step shapes (``cost_sweep``:
    batch_sizes, prompt_lens, max_tokens), only for configurations whose shapes are known (no SD, or a
    draft model identical to the target); otherwise that table is empty.

    ``record`` gets the job's ``status`` (``ok``, or ``failed`` when the engine did not start: then the
    three tables are empty and ``error`` holds vLLM's error line), ``llm_kwargs``, ``points``, ``elapsed_s``.
    """
    from .args import apply_engine_env

    apply_engine_env(spec)  # before vLLM (and torch) load
    from .breakdown import phase_breakdown, step_problems, step_table

    t_job = time.perf_counter()
    record = {} if record is None else record
    record.update(status="ok", error=None, image=spec.image, points=0, llm_kwargs=None)
    kw: dict = {}
    try:
        llm, steplog = open_instrumented_llm(spec, model_dir, drafter_dir, "timing", record_dir,
                                             cost_sweep=cost_sweep, log=log, record=kw)
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

    steplog.new()
    keys = {"exp": spec.exp, "model": spec.model, "method": spec.method, "k": spec.k, "config": spec.label}
    tables, rows = [], []
    points = plan_points(spec, prompts)
    progress = Progress(f"{spec.exp} {spec.label} (profiled)", len(points), stream=log)
    for ds, r, b in points:
        sp = SamplingParams(**sampling_kwargs(spec, ds))
        ids = batch_prompts(spec, prompts[ds], r, b)
        t0 = time.perf_counter()
        llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], sp, use_tqdm=False)
        wall = time.perf_counter() - t0
        records = steplog.new()
        if not records:
            raise SpecReproError(f"{spec.exp} {spec.label} {ds} request {r} B={b}: no engine step recorded; {NOT_LOADED}")
        steps = step_table(records, dataset=ds, request_index=r, batch_size=b)
        problems = step_problems(steps, spec.method)
        if problems:
            raise SpecReproError(f"{spec.exp} {spec.label} {ds} request {r} B={b}: {'; '.join(problems)}")
        bd = phase_breakdown(steps, by=(), wall_s={(): wall}).iloc[0].to_dict()
        rows.append({**keys, "dataset": ds, "request_index": r, "batch_size": b, **bd})
        tables.append(steps)
        progress.step(f"{ds} request {r} B={b}: {len(steps)} steps, verification {bd['verification_share']:.1%}, "
                      f"drafting {bd['drafting_share']:.1%}")
    cost = pd.DataFrame()
    if cost_sweep:
        from .costfit import profile_sweep

        cost = profile_sweep(llm, steplog, batch_sizes=cost_sweep["batch_sizes"], prompt_lens=cost_sweep["prompt_lens"],
                             max_tokens=int(cost_sweep["max_tokens"]), method=spec.method, k=spec.k)
        cost.insert(0, "exp", spec.exp)
    steps = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    if len(steps):
        for i, (k, v) in enumerate(keys.items()):
            steps.insert(i, k, [v] * len(steps))
    record.update(points=len(rows), elapsed_s=time.perf_counter() - t_job)
    return steps, pd.DataFrame(rows), cost
