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
from typing import Any, Mapping

import pandas as pd

from ..io import SpecReproError
from .args import BenchSpec, apply_engine_env, engine_kwargs, import_vllm
from .bench import _warmup, batch_prompts, plan_points

#: what a missing plugin looks like and how to fix it
NOT_LOADED = (
    "the specrepro vLLM plugin did not run in the engine's worker(s): vLLM finds it through the entry point "
    "'vllm.general_plugins' of src/specrepro_vllm_plugin-0.1.0.dist-info (on PYTHONPATH, as workflow/bin/specrepro "
    "sets it) or of an installed specrepro; VLLM_PLUGINS, when set, must name 'specrepro'"
)


def open_instrumented_llm(spec: BenchSpec, kw: Mapping[str, Any], flags: str, record_dir: str | None = None):
    """``(llm, steplog)``: the configuration's ``LLM`` with the plugin on (``flags``), checked in every worker."""
    from .instrument import StepLog, job_env, rpc_status

    record_dir = record_dir or tempfile.mkdtemp(prefix="specrepro-steps-")
    # before the first LLM(): vLLM loads its plugins (and spawns workers, which inherit this) while building it
    os.environ.update(job_env(flags, record_dir))
    apply_engine_env(spec)
    LLM = import_vllm().LLM
    llm = LLM(**kw)
    status = llm.collective_rpc(rpc_status)
    if not status or not all(s.get("installed") for s in status):
        raise SpecReproError(f"{NOT_LOADED} (worker status: {status})")
    return llm, StepLog(record_dir)


def run_profile(
    spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], *, model_dir: str, drafter_dir: str | None = None,
    cost_sweep: Mapping[str, Any] | None = None, record_dir: str | None = None, log=sys.stderr,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Time every (dataset, request, B) point of ``spec`` step by step.

    Returns (the step table of every point, one breakdown row per point, cost-fit steps). The cost-fit
    steps come from a separate sweep of synthetic prompts with known step shapes (``cost_sweep``:
    batch_sizes, prompt_lens, max_tokens), only for configurations whose shapes are known (no SD, or a
    draft model identical to the target); otherwise that table is empty.
    """
    apply_engine_env(spec)  # before vLLM (and torch) load
    from vllm import SamplingParams, TokensPrompt

    from .breakdown import phase_breakdown, step_problems, step_table

    kw = engine_kwargs(spec, model_dir, drafter_dir)
    if cost_sweep:
        kw["max_num_batched_tokens"] = max(
            int(max(cost_sweep["batch_sizes"]) * max(cost_sweep["prompt_lens"])), kw.get("max_num_batched_tokens", 0) or 0,
            8192)
    llm, steplog = open_instrumented_llm(spec, kw, "timing", record_dir)
    if spec.engine.get("warmup", True):
        _warmup(llm, spec, prompts)
    steplog.new()
    keys = {"exp": spec.exp, "model": spec.model, "method": spec.method, "k": spec.k, "config": spec.label}
    tables, rows = [], []
    for ds, r, b in plan_points(spec, prompts):
        sp = SamplingParams(temperature=float(spec.engine.get("temperature", 0)), max_tokens=int(spec.datasets[ds]),
                            seed=int(spec.engine.get("seed", 42)))
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
        print(f"{spec.exp} {spec.label} {ds} request {r} B={b}: {len(steps)} steps, verification "
              f"{bd['verification_share']:.1%}, drafting {bd['drafting_share']:.1%}", file=log)
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
    return steps, pd.DataFrame(rows), cost
