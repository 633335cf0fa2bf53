"""Engine runs on SGLang 0.5.9 (the engine of the paper's Fig. 2) through its offline engine API.

One ``sglang.Engine`` per configuration (experiment x method x k x tree), reused for every dataset and
batch size. A point is measured as the vLLM bench (:mod:`specrepro.engine.run.bench`) measures it: B copies
of one request's prompt (token ids) in one ``Engine.generate`` call, greedy, timed around the call,
after a warm-up call; finished points go to the same checkpoint (``<points>.partial.jsonl``), a failed
point is recorded with its error and the sweep goes on, and the table has the same columns
(:data:`specrepro.engine.run.bench.POINT_COLUMNS`) plus ``engine`` and ``sglang_accept_length``.

The SD statistics are SGLang's own, from the meta info of every finished request
(``srt/managers/tokenizer_manager.py``, ``_calculate_spec_decoding_metrics``), summed over the B
copies: ``spec_verify_ct`` (verification steps = drafts), ``spec_accept_token_num`` (accepted draft
tokens), ``spec_draft_token_num`` (= steps x k, k = speculative_num_draft_tokens - 1, see
:mod:`specrepro.jobspec.trees`) and ``spec_accept_histogram`` (steps that accepted n draft tokens, from
which the accepted count at tree depth j is the number of steps that accepted at least j). So, as for
vLLM, acceptance length = 1 + accepted / drafts and acceptance rate = accepted / draft tokens, which
is the paper's (accepted length - 1) / k. SGLang's own ``spec_accept_length`` (completion tokens /
verification steps, which also counts the token of the prefill) is kept as ``sglang_accept_length``.

Settings beyond vLLM's (config ``sglang``): the attention backend of no SD, chains and trees (the
paper: FlashAttention-3 for chains, FlashInfer for trees), and ``max_running_requests``, which SGLang
resets to 48 under speculative decoding unless it is given (``server_args.py``): the bench sets it to
the largest batch size, so every copy of a batch runs at once, with and without SD. SGLang's overlap
scheduler (CPU scheduling of the next batch while the GPU runs this one) stays on for no SD and is off
under EAGLE/EAGLE-3 (SGLang 0.5.9 turns it off there unless ``SGLANG_ENABLE_SPEC_V2``, which allows only
topk 1, so no tree): the bench passes ``disable_overlap_schedule`` as SGLang would set it, so the speedups
are those of SGLang's defaults (the paper does not say it changed them); the source check reads the line
that forces it. Prefix (radix)
caching is off unless ``engine.enable_prefix_caching``, as in the vLLM runs; ``allow_auto_truncate``
stops a request at the context length as vLLM does instead of rejecting it.

An engine that does not start is recorded as the vLLM bench records it (every point failed with the
error line, ``status: failed`` in the ``.json``, exit 0). SGLang starts its schedulers in child
processes; one that fails while loading sends SIGQUIT to this process, whose default handler in SGLang
kills the whole process tree, this job included. The bench therefore passes its own handler
(``custom_sigquit_handler``, a ServerArgs field; a callable, so not in the printed keywords), which
raises :class:`SchedulerFailed` in the waiting main thread; the remaining children are then killed.

SGLang's EAGLE drafters are classes ``LlamaForCausalLMEagle`` (EAGLE) and ``LlamaForCausalLMEagle3``
(EAGLE-3) picked by the ``architectures`` of the drafter's ``config.json``; a checkpoint that names
another class (EAGLE heads published as ``LlamaForCausalLM``) is served from a folder of links to its
files with that one field changed, recorded in the points (``drafter_architecture``).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from ...core.io import SpecReproError, write_json, write_parquet
from ...jobspec.args import BenchSpec, error_line, experiment_configs
from .bench import batch_prompts, points_table, resume_sweep, run_points, sweep_inputs
from ...jobspec.counters import counter_problems
from ...jobspec.jobs import bench_spec
from ...jobspec.sglang import (  # noqa: F401 - re-exported (the sweep's keywords are built there)
    DEFAULTS, DRAFTER_ARCH, SGLANG_VERSION, engine_env, engine_kwargs, sampling_params, settings, shape,
    warmup_sampling_params,
)
from ...jobspec.trees import TreeShape, sglang_spec_args


def job_spec(cfg: Mapping[str, Any], exp_name: str, label: str) -> BenchSpec:
    """The :class:`BenchSpec` of one engine job of a (validated) config: the workflow's ``--spec``
    (:func:`specrepro.jobspec.jobs.bench_spec`, as for the vLLM jobs)."""
    exps = {e["name"]: e for e in cfg.get("experiments", [])}
    if exp_name not in exps or label not in experiment_configs(exps[exp_name]):
        raise SpecReproError(f"no engine job {exp_name}/{label} in this config")
    return BenchSpec.from_json(bench_spec(cfg, exp_name, label))


# --- SGLang's per-request meta info -> the point's counters ----------------------------------------


def request_counters(metas: Sequence[Mapping[str, Any]], depth: int) -> dict:
    """Sums over the requests of one call, shaped like :func:`specrepro.jobspec.counters.counter_delta`.

    ``depth``: the most draft tokens one step can accept (speculative_num_steps), the length of
    ``accepted_per_pos``. A request that never reached a verification step has no ``spec_*`` keys.
    """
    drafts = sum(int(m.get("spec_verify_ct", 0) or 0) for m in metas)
    drafted = sum(int(m.get("spec_draft_token_num", 0) or 0) for m in metas)
    acc = sum(int(m.get("spec_accept_token_num", 0) or 0) for m in metas)
    hist: list[int] = []
    for m in metas:
        h = [int(x) for x in (m.get("spec_accept_histogram") or [])]
        hist.extend([0] * (len(h) - len(hist)))
        for i, x in enumerate(h):
            hist[i] += x
    # steps that accepted at least j draft tokens, j = 1 .. depth (none without a histogram)
    per_pos = [sum(hist[j:]) for j in range(1, max(depth, len(hist) - 1) + 1)] if hist else []
    completion = sum(int(m.get("completion_tokens", 0) or 0) for m in metas)
    return {
        "num_drafts": drafts, "num_draft_tokens": drafted, "num_accepted_tokens": acc, "accepted_per_pos": per_pos,
        "acceptance_length": 1 + acc / drafts if drafts else None,
        "acceptance_rate": acc / drafted if drafted else None,
        "acceptance_rate_per_pos": [x / drafts for x in per_pos] if drafts else [],
        "histogram_steps": sum(hist), "sglang_accept_length": completion / drafts if drafts else None,
    }


def counters_problems(d: Mapping[str, Any], spec: BenchSpec) -> list[str]:
    """:func:`counter_problems` plus SGLang's own identities: draft tokens = k x steps, histogram = steps."""
    out = counter_problems(d, spec.method, spec.k)
    if spec.method == "none":
        return out
    if d["num_draft_tokens"] != int(spec.k) * d["num_drafts"]:
        out.append(f"draft tokens {d['num_draft_tokens']} != k x verification steps = {int(spec.k) * d['num_drafts']}")
    if d["histogram_steps"] and d["histogram_steps"] != d["num_drafts"]:
        out.append(f"acceptance histogram counts {d['histogram_steps']} steps, spec_verify_ct {d['num_drafts']}")
    return out


def finish_reason(meta: Mapping[str, Any]) -> str | None:
    """SGLang's ``{"type": "length", ...}`` as vLLM's "length" / "stop"."""
    fr = meta.get("finish_reason")
    return fr.get("type") if isinstance(fr, Mapping) else (None if fr is None else str(fr))


def point_from_outputs(spec: BenchSpec, outs: Sequence[Mapping[str, Any]], prompts: Sequence[Sequence[int]],
                       wall: float) -> dict:
    """The measured columns of one point from ``Engine.generate``'s outputs (one dict per copy)."""
    gen = [list(o["output_ids"]) for o in outs]
    metas = [o.get("meta_info") or {} for o in outs]
    n_out = sum(len(g) for g in gen)
    depth = sglang_spec_args(int(spec.k), spec.tree)["speculative_num_steps"] if spec.method != "none" else 0
    d = request_counters(metas, depth)
    problems = counters_problems(d, spec)
    return {
        "status": "ok", "error": "; ".join(problems) or None, "wall_s": wall,
        "prompt_tokens": sum(len(p) for p in prompts), "output_tokens": n_out, "throughput": n_out / wall,
        "output_token_ids": gen[0], "output_text": outs[0].get("text"), "finish_reason": finish_reason(metas[0]),
        "distinct_outputs": len({tuple(g) for g in gen}),
        **{k: d[k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos",
                             "acceptance_length", "acceptance_rate", "acceptance_rate_per_pos",
                             "sglang_accept_length")},
    }


# --- the drafter as SGLang loads it ---------------------------------------------------------------


def drafter_view(drafter_dir: str, method: str, workdir: str | os.PathLike) -> tuple[str, str | None]:
    """The drafter folder SGLang should load, and the architecture written into it (None: unchanged).

    A checkpoint whose ``config.json`` names another class than SGLang's drafter class of ``method``
    is given as a folder of links to its files with a rewritten ``config.json``.
    """
    want = DRAFTER_ARCH[method]
    cfg_path = Path(drafter_dir) / "config.json"
    cfg = json.loads(cfg_path.read_text())
    if (cfg.get("architectures") or [None])[0] == want:
        return drafter_dir, None
    view = Path(workdir)
    view.mkdir(parents=True, exist_ok=True)
    for f in Path(drafter_dir).iterdir():
        link = view / f.name
        if f.name != "config.json" and not link.exists():
            link.symlink_to(f.resolve())
    (view / "config.json").write_text(json.dumps({**cfg, "architectures": [want]}, indent=2, sort_keys=True))
    return str(view), want


# --- the sweep ------------------------------------------------------------------------------


def import_sglang():
    """``sglang``, or one line saying where it runs."""
    try:
        import sglang
    except ImportError as exc:
        raise SpecReproError(
            f"SGLang is not importable here ({exc}): SGLang jobs run only on NVIDIA GPUs, in the sglang image "
            "(snakemake --use-apptainer builds containers/sglang.def)"
        ) from None
    return sglang


class SchedulerFailed(RuntimeError):
    """An SGLang scheduler process failed while the engine started (it sent SIGQUIT; its traceback is in the log)."""


def _scheduler_failed(signum, frame):
    raise SchedulerFailed("an SGLang scheduler process failed while the engine started (its traceback is in the "
                          "job's log above this line)")


def open_engine(spec: BenchSpec, sg: Mapping[str, Any] | None, model_dir: str, drafter_dir: str | None, *,
                log=None, record: dict | None = None, engine_class=None):
    """The one ``sglang.Engine`` of this configuration.

    The keywords go to ``log`` as one ``engine-args: {json}`` line and into ``record`` before SGLang sees
    them; ``custom_sigquit_handler`` (see the module docstring) is added to them. ``engine_class``: a
    stand-in for ``sglang.Engine`` (tests)."""
    os.environ.update(engine_env(spec))
    kw = engine_kwargs(spec, sg, model_dir, drafter_dir)
    if record is not None:
        record.update(json.loads(json.dumps(kw)))
    if log is not None:
        print(f"engine-args: {json.dumps(kw, sort_keys=True)}", file=log, flush=True)
    cls = engine_class or import_sglang().Engine
    return cls(**kw, custom_sigquit_handler=_scheduler_failed)


def _kill_children() -> None:
    """End the engine's child processes left after a failed start (SGLang's own Engine.shutdown does this)."""
    try:
        import psutil
    except ImportError:
        return
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def run_point(engine, spec: BenchSpec, table: pd.DataFrame, ds: str, r: int, b: int) -> dict:
    prompts = batch_prompts(spec, table, r, b)
    sp = sampling_params(spec, spec.datasets[ds])
    t0 = time.perf_counter()
    outs = engine.generate(input_ids=[list(p) for p in prompts], sampling_params=sp)
    wall = time.perf_counter() - t0
    return point_from_outputs(spec, outs, prompts, wall)


def _warmup(engine, spec: BenchSpec, prompts: Mapping[str, pd.DataFrame]) -> None:
    first = next(iter(spec.datasets))
    ids = list(prompts[first].iloc[0]["prompt_token_ids"])
    engine.generate(input_ids=[ids] * min(2, max(spec.batch_sizes)), sampling_params=warmup_sampling_params())


def gpu_name() -> str:
    """``"4x NVIDIA H100 80GB HBM3"`` from nvidia-smi (torch in this process would hold a CUDA context)."""
    import subprocess

    try:
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=60).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [n.strip() for n in names if n.strip()]
    if visible:
        idx = [int(x) for x in visible.split(",") if x.strip().isdigit()]
        names = [names[i] for i in idx if i < len(names)] or names
    return f"{len(names)}x {names[0]}" if names else "unknown"


def run_sweep(
    spec: BenchSpec, sg: Mapping[str, Any] | None, prompts: Mapping[str, pd.DataFrame], output: str | os.PathLike, *,
    model_dir: str, drafter_dir: str | None = None, provenance: Mapping[str, Any] | None = None,
    retry_failed: bool = False, engine=None, engine_class=None, log=sys.stderr,
) -> pd.DataFrame:
    """Run (or resume) the sweep on SGLang and write ``output`` (Parquet, one row per point) and its ``.json``.

    An engine that does not start (SGLang raises in ``Engine()`` or the warm-up, or a scheduler process
    fails while loading) is recorded as :func:`specrepro.engine.run.bench.run_sweep` records it for vLLM."""
    t_job = time.perf_counter()
    output, ckpt, done, todo = resume_sweep(spec, prompts, output, retry_failed, log)
    scratch = tempfile.TemporaryDirectory(prefix="specrepro-drafter-")  # a drafter view lives as long as the sweep
    arch = None
    if drafter_dir and spec.method in DRAFTER_ARCH:
        drafter_dir, arch = drafter_view(drafter_dir, spec.method, Path(scratch.name) / "drafter")
    base = {"exp": spec.exp, "model": spec.model, "method": spec.method, "k": spec.k, "config": spec.label,
            "batching": spec.batching, "engine": "sglang", "drafter_architecture": arch, **dict(provenance or {})}
    t_load, start_error, kwargs = None, None, {}
    own = engine is None
    if todo and engine is None:
        t0 = time.perf_counter()
        handler = signal.getsignal(signal.SIGQUIT)
        try:
            engine = open_engine(spec, sg, model_dir, drafter_dir, log=log, record=kwargs, engine_class=engine_class)
            t_load = time.perf_counter() - t0
            if spec.engine.get("warmup", True):
                _warmup(engine, spec, prompts)
        except SpecReproError:
            raise
        except Exception as exc:  # noqa: BLE001 - an engine that cannot start is this job's result
            start_error = error_line(exc)
            traceback.print_exc(file=log)
            print(f"{spec.exp} {spec.label}: the engine did not start: {start_error}", file=log)
            signal.signal(signal.SIGQUIT, handler)
            if engine is not None:
                engine.shutdown()
            engine = None
            _kill_children()
    if todo and "device" not in base:
        base["device"] = gpu_name()
    try:
        run_points(run_point, engine, spec, prompts, todo, done, base, start_error, ckpt, log)
    finally:
        if own and engine is not None:
            engine.shutdown()
        scratch.cleanup()
    df = points_table(done.values(), spec)
    write_parquet(output, df)
    meta = {**base, "load_s": t_load, "points": len(df), "failed": int((df["status"] != "ok").sum()),
            "vllm_memory": None, "status": "failed" if start_error else "ok", "error": start_error,
            "image": spec.image, "sglang_kwargs": kwargs or engine_kwargs(spec, sg, model_dir, drafter_dir),
            "llm_kwargs": None, "elapsed_s": time.perf_counter() - t_job, "points_run": len(todo)}
    write_json(output.with_suffix(".json"), meta)
    if not start_error:  # a failed start keeps the finished points of earlier runs for a forced rerun
        ckpt.unlink(missing_ok=True)
    gc.collect()
    return df


# --- the CLI verb -------------------------------------------------------------------------------


def run_sglang_bench(a) -> None:
    spec, prompts, target, drafter, prov = sweep_inputs(a, "sglang")
    df = run_sweep(spec, json.loads(a.sglang), prompts, a.output, model_dir=target["path"],
                   drafter_dir=drafter["path"] if drafter else None, provenance=prov, retry_failed=a.retry_failed)
    bad = int((df["status"] != "ok").sum())
    print(f"{a.output}: {len(df)} points ({bad} failed)", file=sys.stderr)


__all__ = ["SGLANG_VERSION", "engine_kwargs", "sampling_params", "warmup_sampling_params", "point_from_outputs",
           "request_counters", "run_sweep", "SchedulerFailed", "TreeShape"]
