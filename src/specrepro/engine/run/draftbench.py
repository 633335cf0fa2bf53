"""``specrepro draft-bench``: one draft job's engine (oracle, controlled or hybrid drafts; :mod:`specrepro.jobspec.drafts`)
measured like a bench sweep, with the hook's per-step records.

The job is refused before vLLM starts, with one line, where the hook cannot run (async scheduling, an engine
without the hook: :func:`specrepro.jobspec.drafts.refusal`). Otherwise one ``vllm.LLM`` runs the engine's method
with the plugin's draft hook (``$SPECREPRO_DRAFT``) and its ``accept`` records; each plan of the job (a controlled
job: one per acceptance profile) is set in the engine in turn and runs every (dataset, request, batch size)
point. Outputs: the points (as a bench's, plus ``profile``, ``share_ngram``, ``share_drafter``,
``share_reference``, ``departed_requests``, ``counters_agree``, ``lossless``; oracle jobs: ``verified_steps`` and
``trace_mismatches``, the steps whose accepted tokens differ from the keep-one traces) and ``<output stem>.steps.parquet`` (one row per
request and verified step: :func:`specrepro.engine.results.drafts.draft_steps`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from ...core.costmodel import load_cost_model
from ...core.errors import SpecReproError
from ...core.io import JsonlTail, write_json, write_parquet
from ...jobspec.args import BenchSpec
from ...jobspec.drafts import DRAFT_FILE, PLAN_ENV, draft_plans, prompt_key, refusal
from ...jobspec.hooks import DIR_ENV, MODE_ENV, STEP_FILE
from .draftrecords import draft_steps, draft_summary, trace_mismatches
from . import drafts as hook
from .bench import _warmup, open_reference, plan_points, run_point, timed_point
from .llm import open_llm


def reference_requests(trace_files: Sequence[str | os.PathLike]) -> list[dict]:
    """Per request: prompt, reference output (the no-SD greedy output the trace engine reproduced) and the
    ``acc_len`` of every traced method, merged over the methods' trace files."""
    by_key: dict[tuple, dict] = {}
    for path in trace_files:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            key = (tuple(rec["prompt_token_ids"]),)
            r = by_key.setdefault(key, {"prompt_token_ids": list(rec["prompt_token_ids"]),
                                        "output_token_ids": list(rec["generated_token_ids"]), "acc": {}})
            if list(rec["generated_token_ids"]) != r["output_token_ids"]:
                continue  # two traces disagree on the output: keep the first (the planner counts departures)
            for k, v in rec.items():
                if k.startswith("acc_") and isinstance(v, Mapping) and "acc_len" in v:
                    r["acc"][k[4:]] = list(v["acc_len"])
    return list(by_key.values())


def run_draft_sweep(spec_blob: str | Mapping[str, Any], prompts: Mapping[str, pd.DataFrame], output: str | os.PathLike, *,
                    model_dir: str, drafter_dir: str | None, traces: Sequence[str] = (), cost_model: str | None = None,
                    vllm_version: str | None = None, provenance: Mapping[str, Any] | None = None,
                    none_points: str | None = None, log=sys.stderr, reference=None) -> pd.DataFrame:
    """Run every plan of the draft job in ``spec_blob`` (a :func:`specrepro.jobspec.drafts.draft_bench_spec`) over
    its points; ``traces``: the keep-one trace files it reads, ``cost_model``: the run's fitted model (the adaptive
    hybrid), ``none_points``: the no-SD bench points each output is compared with (column ``lossless``); ``reference``: opens
    the same-window no-SD reference (:func:`specrepro.engine.run.bench.run_sweep`)."""
    d = json.loads(spec_blob) if isinstance(spec_blob, str) else dict(spec_blob)
    job = d.pop("draft")
    spec = BenchSpec(**d)
    label = job["label"]
    reason = refusal(label, spec.engine, vllm_version)
    if reason:
        raise SpecReproError(f"{spec.exp} {label}: refused: {reason}")
    t_job = time.perf_counter()
    cm = load_cost_model(cost_model, drafter=job["drafter"]) if cost_model else None
    plans = draft_plans(job, reference_requests(traces), spec.engine.get("ngram"), cm)
    output = Path(output)
    rec_dir = output.with_name(output.stem + ".records")
    rec_dir.mkdir(parents=True, exist_ok=True)
    for f in (DRAFT_FILE, STEP_FILE):
        (rec_dir / f).unlink(missing_ok=True)
    first = next(iter(plans.values()))
    (rec_dir / "plan.json").write_text(json.dumps(first))
    # SPECREPRO_DRAFT_TIMING=1 adds the profiler's step timings to the records (a diagnostic: where a draft job's
    # wall time goes against the cost model; the benchmark's own numbers come from runs without it)
    flags = "accept,timing" if os.environ.get("SPECREPRO_DRAFT_TIMING") == "1" else "accept"
    os.environ.update({MODE_ENV: flags, DIR_ENV: str(rec_dir), PLAN_ENV: str(rec_dir / "plan.json")})
    t0 = time.perf_counter()
    llm = open_llm(spec, model_dir, drafter_dir, log=log)
    t_load = time.perf_counter() - t0
    if spec.engine.get("warmup", True):
        _warmup(llm, spec, prompts)
    base = base_fields(spec, job, label, provenance)
    ref, ref_error = open_reference(reference, True, log)
    try:
        rows, step_tables = _run_plans(llm, spec, prompts, plans, job, base, rec_dir, none_points, ref, log)
    finally:
        if ref is not None:
            ref.close()
    df = pd.DataFrame(rows)
    write_parquet(output, df)
    steps = pd.concat(step_tables, ignore_index=True) if step_tables else pd.DataFrame()
    write_parquet(output.with_name(output.stem + ".steps.parquet"), steps)
    write_json(output.with_suffix(".json"), {
        **base, "profiles": list(plans), "points": len(df), "load_s": t_load,
        "elapsed_s": time.perf_counter() - t_job, "departed_requests": int(df["departed_requests"].sum()),
        "counters_agree": bool(df["counters_agree"].all()), "drafter_charge": "full",
        "lossless": None if df["lossless"].isna().all() else bool(df["lossless"].fillna(False).all()),
        **({"reference": ref is not None, "reference_error": ref_error} if reference is not None else {})})
    return df


def base_fields(spec: BenchSpec, job: Mapping[str, Any], label: str, provenance: Mapping[str, Any] | None) -> dict:
    """The columns every point of a draft job shares."""
    return {"exp": spec.exp, "model": spec.model, "method": spec.method, "k": spec.k, "config": label,
            "mode": job["mode"], **dict(provenance or {})}


def _run_plans(llm, spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], plans: Mapping[str, Any],
               job: Mapping[str, Any], base: Mapping[str, Any], rec_dir: Path, none_points: str | None, reference,
               log) -> tuple[list[dict], list[pd.DataFrame]]:
    """Every plan's points (rows) and per-step records (tables), each plan set in the engine's hook in turn."""
    label = base["config"]
    drafts_tail, steps_tail = JsonlTail(rec_dir / DRAFT_FILE), JsonlTail(rec_dir / STEP_FILE)
    drafts_tail.new(), steps_tail.new()
    rows, step_tables = [], []
    ref_out = {}
    if none_points:
        nd = pd.read_parquet(none_points)
        ref_out = {(str(a), int(b), int(c)): list(o) for a, b, c, o in
                   zip(nd["dataset"], nd["request_index"], nd["batch_size"], nd["output_token_ids"])}
    i = 0
    for name, plan in plans.items():
        hook.set_plan(plan)
        for ds, r, b in plan_points(spec, prompts):
            table = prompts[ds]
            row = {**base, "profile": name, "dataset": ds, "request_index": r,
                   "request_id": str(table.iloc[r]["request_id"]), "batch_size": b}
            row.update(timed_point(lambda: run_point(llm, spec, table, ds, r, b), reference, i, ds, r, b))
            i += 1
            want = ref_out.get((ds, r, b))
            row["lossless"] = None if want is None else bool(list(row["output_token_ids"]) == want
                                                              and row["distinct_outputs"] == 1)
            st = draft_steps(drafts_tail.new(), steps_tail.new())
            summ = draft_summary(st, row)
            row.update({k: summ[k] for k in ("share_ngram", "share_drafter", "share_reference", "departed_requests",
                                             "counters_agree")})
            if job["mode"] == "oracle":  # the oracle accepts exactly what the traces say (departures aside)
                ref = plan["requests"].get(prompt_key(table.iloc[r]["prompt_token_ids"])) or {}
                methods = ["ngram", job["drafter"]] if job["of"] == "combine" else [job["of"]]
                acc = {m: (ref.get("acc") or {}).get(m) for m in methods}
                if all(a is not None for a in acc.values()):
                    row["verified_steps"], row["trace_mismatches"] = trace_mismatches(st, acc)
            rows.append(row)
            step_tables.append(st.assign(profile=name, dataset=ds, request_index=r, batch_size=b))
            print(f"{spec.exp} {label} {name} {ds} request {r} B={b}: {row['wall_s']:.2f} s, "
                  f"departed {summ['departed_requests']}, counters agree {summ['counters_agree']}", file=log)
    return rows, step_tables
