"""Engine runs on real vLLM: one ``LLM`` per (model, method, k), a sweep of measured points over it.

A point = one request at one batch size: the request's prompt replicated B times in one
``LLM.generate`` call (the paper's method; ``batching="distinct"`` takes B different requests),
timed around the call. Speculative-decoding statistics are deltas of vLLM's own counters
(``llm.get_metrics()``) over the call. Finished points are appended to a checkpoint (one JSON line
each, fsynced) so a killed sweep resumes at the first unfinished point; the final table is written
atomically. A point that raises is recorded as failed with its error and the sweep goes on.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import pandas as pd

from ...core.hub import model_revision
from ...core.io import SpecReproError, read_json, write_json, write_parquet
from ...core.prompts import read_prompt_tables
from ...jobspec.args import BenchSpec, error_line, sampling_kwargs, warmup_sampling_kwargs
from .llm import open_llm, vllm_reported_memory
from ...jobspec.schedule import schedule_k
from .progress import Progress
from ...jobspec.counters import counter_delta, counter_problems, read_counters
from ...core.provenance import cpu_model, git_state, package_versions

KEY = ("dataset", "request_index", "batch_size")


def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    except Exception:  # noqa: BLE001 - no torch, no device
        pass

    return f"CPU: {cpu_model()}"


# --- points and the checkpoint -----------------------------------------------------------------


def plan_points(spec: BenchSpec, prompts: Mapping[str, pd.DataFrame]) -> list[tuple[str, int, int]]:
    """Every (dataset, request_index, batch_size) of the sweep, in run order."""
    out = []
    for ds in spec.datasets:
        n = min(spec.num_requests, len(prompts[ds]))
        for r in range(n):
            for b in spec.batch_sizes:
                out.append((ds, r, int(b)))
    return out


def read_checkpoint(path: Path) -> list[dict]:
    """Finished points of an interrupted sweep. A torn last line (killed mid-write) is cut off."""
    if not path.exists():
        return []
    rows, good = [], 0
    with open(path, "rb") as f:
        data = f.read()
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good += len(line)
    if good != len(data):
        with open(path, "r+b") as f:
            f.truncate(good)
    return rows


def _append(path: Path, row: Mapping[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def batch_prompts(spec: BenchSpec, table: pd.DataFrame, r: int, b: int) -> list[list[int]]:
    if spec.batching == "distinct":
        n = len(table)
        return [list(table.iloc[(r + i) % n]["prompt_token_ids"]) for i in range(b)]
    return [list(table.iloc[r]["prompt_token_ids"])] * b


def run_point(llm, spec: BenchSpec, table: pd.DataFrame, ds: str, r: int, b: int) -> dict:
    from vllm import SamplingParams, TokensPrompt

    sp = SamplingParams(**sampling_kwargs(spec, ds))
    prompts = batch_prompts(spec, table, r, b)
    before = read_counters(llm.get_metrics())
    t0 = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
    wall = time.perf_counter() - t0
    delta = counter_delta(before, read_counters(llm.get_metrics()))
    gen = [list(o.outputs[0].token_ids) for o in outs]
    n_out = sum(len(g) for g in gen)
    k = spec.k
    if spec.k_by_batch_size:  # the k vLLM's schedule gives a batch of b requests
        k = schedule_k(spec.k_by_batch_size, b, spec.k)
    problems = counter_problems(delta, spec.method, k)
    return {
        "status": "ok", "error": "; ".join(problems) or None, "wall_s": wall,
        "prompt_tokens": sum(len(p) for p in prompts), "output_tokens": n_out, "throughput": n_out / wall,
        "output_token_ids": gen[0], "output_text": outs[0].outputs[0].text,
        "finish_reason": outs[0].outputs[0].finish_reason, "distinct_outputs": len({tuple(g) for g in gen}),
        **{k: delta[k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos",
                                 "acceptance_length", "acceptance_rate", "acceptance_rate_per_pos")},
    }


def _reported_memory(llm, log) -> dict | None:
    """What vLLM reports about weights and KV cache at load (memory table's cross-check); None if unreadable."""
    try:
        return vllm_reported_memory(llm)
    except Exception as exc:  # noqa: BLE001 - a cross-check, never a reason to lose the sweep
        print(f"memory cross-check unavailable: {type(exc).__name__}: {exc}", file=log)
        return None


def _warmup(llm, spec: BenchSpec, prompts: Mapping[str, pd.DataFrame]) -> None:
    from vllm import SamplingParams, TokensPrompt

    first = next(iter(spec.datasets))
    ids = list(prompts[first].iloc[0]["prompt_token_ids"])
    llm.generate([TokensPrompt(prompt_token_ids=ids)] * min(2, max(spec.batch_sizes)),
                 SamplingParams(**warmup_sampling_kwargs()), use_tqdm=False)


def run_points(point_fn, engine, spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], todo, done: dict,
               base: Mapping[str, Any], start_error: str | None, ckpt: Path, log, reference=None) -> None:
    """Run the ``todo`` points with ``point_fn(engine, spec, table, ds, r, b)`` into ``done`` (vLLM and SGLang
    sweeps alike): each finished point is appended to the checkpoint ``ckpt``; an engine error is that
    point's result; with ``start_error`` every point is recorded as failed without running. ``reference``: a
    :class:`specrepro.engine.run.reference.ReferenceEngine` that times each point's no-SD reference beside it."""
    progress = Progress(f"{spec.exp} {spec.label}", len(done) + len(todo), done=len(done), stream=log)
    for i, (ds, r, b) in enumerate(todo):
        table = prompts[ds]
        row = {**base, "dataset": ds, "request_index": r, "request_id": str(table.iloc[r]["request_id"]),
               "batch_size": b, "pid": os.getpid()}
        if start_error:
            row.update(status="failed", error=f"engine did not start: {start_error}")
            done[(ds, r, b)] = row
            continue
        try:
            row.update(timed_point(lambda: point_fn(engine, spec, table, ds, r, b), reference, i, ds, r, b))
        except Exception as exc:  # noqa: BLE001 - an engine error is a result of this point
            row.update(status="failed", error=f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
            print(f"{spec.exp} {spec.label} {ds} request {r} B={b}: failed: {row['error']}", file=log)
        _append(ckpt, row)
        done[(ds, r, b)] = row
        progress.step(f"{ds} request {r} B={b}")


def sweep_inputs(a, engine: str, **extra: Any) -> tuple[BenchSpec, dict, dict, dict | None, dict[str, Any]]:
    """What a sweep verb (``bench`` on vLLM, ``sglang-bench``) reads from its arguments (``sweep_arguments``): the
    spec, a prompt table for each of its datasets, the target and drafter manifests, and the points' provenance
    (``extra`` after the engine and torch versions)."""
    spec = BenchSpec.from_json(a.spec)
    prompts = read_prompt_tables(a.prompts)
    missing = [d for d in spec.datasets if d not in prompts]
    if missing:
        raise SpecReproError(f"no prompt table given for dataset(s) {', '.join(missing)}")
    target = read_json(a.target_manifest)
    drafter = read_json(a.drafter_manifest) if a.drafter_manifest else None
    versions = package_versions((engine, f"{engine}-cpu", "torch"))
    prov = {
        "engine_version": versions.get(engine) or versions.get(f"{engine}-cpu", "unknown"),
        "torch_version": versions.get("torch", "unknown"), **extra,
        "model_revision": model_revision(target), "drafter_revision": model_revision(drafter) if drafter else None,
        "config_hash": a.config_hash, "git_commit": str(git_state(a.repo)["commit"]),
    }
    return spec, prompts, target, drafter, prov


def resume_sweep(spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], output: str | os.PathLike,
                 retry_failed: bool, log) -> tuple[Path, Path, dict, list]:
    """Where a sweep (vLLM or SGLang) stands: its output path, its checkpoint (``<output>.partial.jsonl``), the
    points the checkpoint holds (only those that ran ok with ``retry_failed``) and the points still to run."""
    output = Path(output)
    ckpt = output.with_name(output.name + ".partial.jsonl")
    output.parent.mkdir(parents=True, exist_ok=True)
    done = {tuple(r[k] for k in KEY): r for r in read_checkpoint(ckpt)}
    if retry_failed:
        done = {k: r for k, r in done.items() if r["status"] == "ok"}
    todo = [p for p in plan_points(spec, prompts) if p not in done]
    if done:
        print(f"{spec.exp} {spec.label}: resuming, {len(done)} points done, {len(todo)} to run", file=log)
    return output, ckpt, done, todo


def run_sweep(
    spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], output: str | os.PathLike, *, model_dir: str,
    drafter_dir: str | None = None, provenance: Mapping[str, Any] | None = None, retry_failed: bool = False,
    llm=None, log=sys.stderr, reference: Callable[[], Any] | None = None,
) -> pd.DataFrame:
    """Run (or resume) the sweep and write ``output`` (Parquet, one row per point) and its record (``.json``).

    An engine that does not start (vLLM raises in ``LLM()`` or the warm-up: an unsupported method, out of
    memory at load) is a result too: every point is written as failed with vLLM's error line, the record
    says ``status: failed``, and the job ends normally so the run's other jobs and the report go on.
    ``reference``: opens the same-window no-SD reference (:mod:`specrepro.engine.run.reference`) once the engine
    is up; one that does not start is recorded (``reference_error``) and the sweep runs without it.
    """
    t_job = time.perf_counter()
    output, ckpt, done, todo = resume_sweep(spec, prompts, output, retry_failed, log)
    base = {"exp": spec.exp, "model": spec.model, "method": spec.method, "k": spec.k, "config": spec.label,
            "batching": spec.batching, **dict(provenance or {})}
    t_load, vllm_memory, start_error, llm_kwargs = None, None, None, {}
    if todo and llm is None:
        t0 = time.perf_counter()
        try:
            llm = open_llm(spec, model_dir, drafter_dir, log=log, record=llm_kwargs)
            t_load = time.perf_counter() - t0
            vllm_memory = _reported_memory(llm, log)
            if spec.engine.get("warmup", True):
                _warmup(llm, spec, prompts)
        except SpecReproError:
            raise
        except Exception as exc:  # noqa: BLE001 - an engine that cannot start is this job's result
            start_error = error_line(exc)
            traceback.print_exc(file=log)
            print(f"{spec.exp} {spec.label}: the engine did not start: {start_error}", file=log)
            llm = None
    ref, ref_error = open_reference(reference, llm is not None and bool(todo), log)
    try:
        run_points(run_point, llm, spec, prompts, todo, done, base, start_error, ckpt, log, reference=ref)
    finally:
        if ref is not None:
            ref.close()
    df = points_table(done.values(), spec)
    write_parquet(output, df)
    meta = {**base, "load_s": t_load, "points": len(df), "failed": int((df["status"] != "ok").sum()),
            "vllm_memory": vllm_memory, "status": "failed" if start_error else "ok", "error": start_error,
            "image": spec.image, "llm_kwargs": llm_kwargs or None, "elapsed_s": time.perf_counter() - t_job,
            "points_run": len(todo), **({"reference": ref is not None, "reference_error": ref_error}
                                         if reference is not None else {})}
    write_json(output.with_suffix(".json"), meta)
    if not start_error:  # a failed start keeps the finished points of earlier runs for a forced rerun
        ckpt.unlink(missing_ok=True)
    if llm is not None:
        del llm
        gc.collect()
    return df


def timed_point(point: Callable[[], dict], reference, index: int, ds: str, r: int, b: int) -> dict:
    """``point()``'s fields, timed beside its same-window reference where the sweep has one
    (:meth:`specrepro.engine.run.reference.ReferenceEngine.paired`)."""
    return point() if reference is None else reference.paired(point, index, ds, r, b)


def open_reference(factory: Callable[[], Any] | None, wanted: bool, log) -> tuple[Any, str | None]:
    """The sweep's same-window reference from ``factory`` where ``wanted`` (an engine and points to run), or
    (None, the reason it did not start)."""
    if factory is None or not wanted:
        return None, None
    try:
        return factory(), None
    except SpecReproError as exc:
        print(f"{exc}; the sweep runs without it (the closed loop divides by the no-SD job)", file=log, flush=True)
        return None, str(exc)


POINT_COLUMNS = (
    "exp", "model", "method", "k", "config", "batching", "dataset", "request_index", "request_id", "batch_size",
    "status", "error", "wall_s", "prompt_tokens", "output_tokens", "throughput", "num_drafts", "num_draft_tokens",
    "num_accepted_tokens", "accepted_per_pos", "acceptance_length", "acceptance_rate", "acceptance_rate_per_pos",
    "finish_reason", "distinct_outputs", "output_token_ids", "output_text",
)


def points_table(rows: Iterable[Mapping[str, Any]], spec: BenchSpec) -> pd.DataFrame:
    """Tidy, sorted table of points (dataset in config order); provenance columns after the point columns."""
    df = pd.DataFrame(list(rows))
    for c in POINT_COLUMNS:
        if c not in df:
            df[c] = None
    order = {d: i for i, d in enumerate(spec.datasets)}
    df = df.assign(_o=df["dataset"].map(order)).sort_values(["_o", "request_index", "batch_size"]).drop(columns="_o")
    extra = sorted(c for c in df.columns if c not in POINT_COLUMNS and c != "pid")
    df["k"] = df["k"].astype("Int64")
    return df[list(POINT_COLUMNS) + extra].reset_index(drop=True)
