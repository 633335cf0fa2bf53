"""The profiled pass (paper Fig. 4) and the cost-fit sweep of one engine configuration.

The phases are measured inside vLLM's model runner by the instrumentation plugin
(:mod:`specrepro.engine.run.instrument`, switched on here through the environment before the ``LLM`` is
built), so the same code times vLLM 0.10.1.1, 0.11.1, 0.32 (CPU) and 0.34.0, with or without tensor
parallelism (rank 0 records).
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import tempfile
import time
import traceback
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ...core.errors import SpecReproError
from ...jobspec.args import BenchSpec, error_line, sampling_kwargs, sweep_sampling_kwargs
from .llm import apply_engine_env, open_llm
from .bench import _warmup, batch_prompts, plan_points
from .breakdown import phase_breakdown, step_problems, step_table
from ...jobspec.counters import counter_delta, read_counters
from .progress import Progress
from .instrument import StepLog, job_env, rpc_status

#: what a missing plugin looks like and how to fix it
NOT_LOADED = (
    "the specrepro vLLM plugin did not run in the engine's worker(s): vLLM finds it through the entry point "
    "'vllm.general_plugins' of src/specrepro_vllm_plugin-0.1.0.dist-info (on PYTHONPATH, as workflow/bin/specrepro "
    "sets it) or of an installed specrepro; VLLM_PLUGINS, when set, must name 'specrepro'"
)

#: columns of the per-step timings of the cost-fit sweep (:func:`steps_from_timings`)
STEP_COLUMNS = ("step", "phase", "role", "method", "batch_size", "prompt_len", "k", "kv_tokens",
                "batched_tokens", "seconds", "overhead_s", "clock")


# --- engine steps -> timings table --------------------------------------------------------------


def expected_steps(max_tokens: int, method: str = "none", k: int | None = None) -> int:
    """Engine steps of a run whose every request produces ``max_tokens`` tokens (see module doc)."""
    if max_tokens < 1:
        raise SpecReproError(f"max_tokens must be >= 1, got {max_tokens}")
    if method == "none":
        return max_tokens
    if method == "draft_model":
        if not k or k < 1:
            raise SpecReproError("method draft_model needs k >= 1")
        return 1 + math.ceil((max_tokens - 1) / (k + 1))
    raise SpecReproError(
        f"method {method!r}: step shapes depend on what is accepted; profile without SD ('none') or with a "
        "draft model identical to the target ('draft_model') to know every step's kv and n"
    )


def steps_from_timings(steps: pd.DataFrame, *, batch_size: int, prompt_len: int, max_tokens: int,
                       k: int | None = None, method: str = "none",
                       spec_metrics: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Per-step timings (columns :data:`STEP_COLUMNS`) of one ``generate`` of the cost-fit sweep, from
    its step table (:func:`specrepro.engine.run.breakdown.step_table`), shapes measured by the plugin and
    checked against the sweep's design (see the module docstring).

    ``spec_metrics`` (optional; the difference of ``llm.get_metrics()`` around the run): keys
    ``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens``; checked: every draft accepted.
    """
    B, P = int(batch_size), int(prompt_len)
    if B < 1 or P < 1:
        raise SpecReproError(f"batch_size and prompt_len must be >= 1, got {B}, {P}")
    want = expected_steps(max_tokens, method, k)
    where = f"(method {method}, B={B}, P={P}, max_tokens={max_tokens}, k={k})"
    if len(steps) != want:
        raise SpecReproError(
            f"{len(steps)} engine steps recorded, expected {want} {where}: the step shapes are not the sweep's "
            "(chunked prefill? rejected drafts? prefix-cache hits?)"
        )
    if method == "draft_model" and spec_metrics is not None:
        drafts = spec_metrics.get("num_draft_tokens", 0)
        acc = spec_metrics.get("num_accepted_tokens", 0)
        if drafts <= 0 or acc != drafts:
            raise SpecReproError(
                f"draft_model run accepted {acc} of {drafts} draft tokens: shapes assume every draft is accepted "
                "(use the target itself as the draft model)"
            )
    st = steps.sort_values("step").reset_index(drop=True)
    rows = []
    for j, s in enumerate(st.itertuples(index=False)):
        if j == 0:
            n, kv, inp, phase = B * P, 0, P, "prefill"
        elif method == "none":
            n, kv, inp, phase = B, B * (P + j), None, "decode"
        else:
            n, kv, inp, phase = B * (k + 1), B * (P + 1 + (k + 1) * (j - 1)), k + 1, "decode"
        got_kv = int(s.context_tokens) + int(s.num_reqs) - int(s.prefill_reqs)
        if (int(s.scheduled_tokens), got_kv, int(s.num_reqs)) != (n, kv, B):
            raise SpecReproError(
                f"step {j}: measured {int(s.num_reqs)} requests, {int(s.scheduled_tokens)} tokens scheduled, kv {got_kv}; "
                f"the sweep's design says {B}, {n}, {kv} {where}"
            )
        draft_s = float(s.drafting_s) if method == "draft_model" else 0.0
        common = dict(step=j, phase=phase, method=method, batch_size=B, prompt_len=P, k=k or 0, clock=s.clock)
        rows.append({**common, "role": "target", "kv_tokens": kv, "batched_tokens": n, "seconds": float(s.verification_s),
                     "overhead_s": float(s.step_s) - float(s.verification_s) - draft_s})
        if method == "draft_model":
            rows.append({**common, "role": "drafter", "kv_tokens": kv, "batched_tokens": inp, "seconds": draft_s,
                         "overhead_s": np.nan})
    out = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    out["k"] = out["k"].astype("int64")
    return out


def prompt_vocab(model_vocab: int, tokenizer_len: int) -> int:
    """Token ids a synthetic prompt may use: those of both the model and the tokenizer. Qwen3 and
    GLM-4.5 pad their embeddings past the tokenizer, and vLLM 0.10.1.1 rejects a prompt id above the
    tokenizer's largest ("Token id ... is out of vocabulary", v1/engine/processor.py)."""
    return min(int(model_vocab), int(tokenizer_len))


def profile_prompts(batch_size: int, prompt_len: int, vocab_size: int, offset: int = 0) -> list:
    """``batch_size`` token prompts of exactly ``prompt_len`` ids, all different (no prefix-cache
    hits between them); ids avoid 0-3 (special tokens of most tokenizers)."""
    from vllm.inputs import TokensPrompt

    span = max(vocab_size - 4, 1)
    return [TokensPrompt(prompt_token_ids=[4 + (offset + 7919 * b + 31 * i + b * i) % span for i in range(prompt_len)])
            for b in range(batch_size)]


def profile_sweep(llm, steplog, *, batch_sizes: Sequence[int], prompt_lens: Sequence[int], max_tokens: int,
                  method: str = "none", k: int | None = None, warmup: bool = True) -> pd.DataFrame:
    """One ``generate`` per (B, P) on a built ``LLM`` whose plugin records timings into ``steplog``
    (:class:`specrepro.engine.run.instrument.StepLog`); stacks :func:`steps_from_timings`.

    The LLM needs ``max_num_batched_tokens >= max(B) * max(P)``; for ``draft_model`` the draft must be
    the target.
    """
    from vllm import SamplingParams

    vocab = prompt_vocab(llm.llm_engine.vllm_config.model_config.get_vocab_size(), len(llm.get_tokenizer()))
    sp = SamplingParams(**sweep_sampling_kwargs(max_tokens))
    if warmup:
        llm.generate(profile_prompts(max(batch_sizes), max(prompt_lens), vocab, offset=99), sp, use_tqdm=False)
    steplog.new()
    tables = []
    for i, (B, P) in enumerate(itertools.product(batch_sizes, prompt_lens)):
        before = read_counters(llm.get_metrics()) if method != "none" else None
        llm.generate(profile_prompts(B, P, vocab, offset=1000 * (i + 1)), sp, use_tqdm=False)
        metrics = counter_delta(before, read_counters(llm.get_metrics())) if before is not None else None
        tables.append(steps_from_timings(step_table(steplog.new()), batch_size=B, prompt_len=P, max_tokens=max_tokens,
                                         k=k, method=method, spec_metrics=metrics))
    return pd.concat(tables, ignore_index=True)



def open_instrumented_llm(spec: BenchSpec, model_dir: str, drafter_dir: str | None, flags: str,
                          record_dir: str | None = None, cost_sweep: Mapping[str, Any] | None = None,
                          log=None, record: dict | None = None):
    """``(llm, steplog)``: the configuration's ``LLM`` (:func:`open_llm`: its keywords go to ``log`` and
    ``record``) with the plugin on (``flags``), checked in every worker."""
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
    apply_engine_env(spec)  # before vLLM (and torch) load

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
        cost = profile_sweep(llm, steplog, batch_sizes=cost_sweep["batch_sizes"], prompt_lens=cost_sweep["prompt_lens"],
                             max_tokens=int(cost_sweep["max_tokens"]), method=spec.method, k=spec.k)
        cost.insert(0, "exp", spec.exp)
    steps = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    if len(steps):
        for i, (k, v) in enumerate(keys.items()):
            steps.insert(i, k, [v] * len(steps))
    record.update(points=len(rows), elapsed_s=time.perf_counter() - t_job)
    return steps, pd.DataFrame(rows), cost
