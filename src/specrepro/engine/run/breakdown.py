"""Time breakdown of engine steps (paper Fig. 4) from the plugin's step records.

The records come from :mod:`specrepro.engine.run.instrument` (``SPECREPRO_INSTRUMENT=timing``), measured
inside vLLM's model runner on rank 0, one per executed engine step:

* ``verification_s``  the target model's forward (without the LM head: what the paper timed,
  synchronised, around the target forward);
* ``sampling_s``      the sampler and the rejection sampler;
* ``drafting_s``      the proposer (all k drafts of the step: a draft model's k forwards, EAGLE's
  head, the n-gram lookup);
* ``step_s``          from the start of ``execute_model`` to the end of ``sample_tokens``;
* ``overhead_s``      step time minus the three phases: input preparation, the LM head, bookkeeping,
  building the step's output.

Scheduling and output processing in the engine core happen between two steps and are not part of a
step; :func:`phase_breakdown` reports them per run as ``engine_s`` when the caller passes the
measured wall time of the ``generate`` call (``wall_s``).

On a GPU every phase boundary is synchronised with the device (``clock == "cuda-sync"``); on the CPU
backend the clock is wall time (``"cpu"``). Phases never overlap (a phase started inside another one
belongs to the outer one), so ``overhead_s >= 0`` by construction; :func:`step_problems` checks it,
and that every step ran the target forward once.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ...core.errors import SpecReproError

BREAKDOWN_PHASES = ("drafting", "verification", "sampling", "overhead")
#: the step-table columns (plus any point keys the caller adds in front)
STEP_TABLE_COLUMNS = (
    "step", "clock", "step_s", "drafting_s", "verification_s", "sampling_s", "overhead_s",
    "n_drafting", "n_verification", "n_sampling", "num_reqs", "scheduled_tokens", "draft_tokens",
    "context_tokens", "prefill_reqs",
)
#: how far (seconds) the phases may exceed the step through clock reads alone (perf_counter granularity)
CLOCK_SLACK_S = 1e-6


def step_table(records: Iterable[Mapping], **keys) -> pd.DataFrame:
    """The plugin's step records as a table (columns ``keys`` then :data:`STEP_TABLE_COLUMNS`)."""
    rows = []
    for r in records:
        row = {c: r.get(c) for c in STEP_TABLE_COLUMNS if c != "overhead_s"}
        row["overhead_s"] = float(r["step_s"]) - sum(float(r[f"{p}_s"]) for p in BREAKDOWN_PHASES[:3])
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(STEP_TABLE_COLUMNS))
    for c in ("step", "n_drafting", "n_verification", "n_sampling", "num_reqs", "scheduled_tokens", "draft_tokens",
              "context_tokens", "prefill_reqs"):
        df[c] = df[c].astype("int64")
    for i, (k, v) in enumerate(keys.items()):
        df.insert(i, k, [v] * len(df))
    return df


def step_problems(steps: pd.DataFrame, method: str) -> list[str]:
    """What is wrong with a run's step table: a step without the target forward or with two, phases
    longer than their step, drafting in a run without SD, or no drafting at all with SD."""
    out = []
    if steps.empty:
        return ["no engine step recorded"]
    bad = steps[steps["n_verification"] != 1]
    if len(bad):
        out.append(f"{len(bad)} step(s) with {sorted(set(bad['n_verification']))} target forwards instead of 1 "
                   f"(first: step {int(bad['step'].iloc[0])})")
    over = steps[steps["overhead_s"] < -CLOCK_SLACK_S]
    if len(over):
        out.append(f"{len(over)} step(s) whose phases exceed the step time (first: step {int(over['step'].iloc[0])})")
    drafted = int((steps["n_drafting"] > 0).sum())
    if method == "none" and drafted:
        out.append(f"{drafted} step(s) with a drafting phase in a run without speculative decoding")
    if method not in ("none", "ngram") and len(steps) > 1 and drafted == 0:
        out.append(f"method {method}: no step ran the proposer")
    return out


def phase_breakdown(steps: pd.DataFrame, *, by: Sequence[str] = ("run",), wall_s: Mapping | None = None) -> pd.DataFrame:
    """Seconds and share of drafting / verification / sampling / overhead per group of steps (pure).

    Total = the summed step time; overhead = total - the three phases (shares sum to 1). ``by``:
    grouping columns (those that exist; none -> one group). ``wall_s``: optional {group key: wall time
    of the ``generate`` calls}; adds ``wall_s`` and ``engine_s`` = wall - total (time outside the
    model runner's steps: scheduling, output processing).

    Columns: the ``by`` columns, ``clock``, ``steps``, ``total_s``, ``<phase>_s``, ``<phase>_share``,
    and ``wall_s``, ``engine_s`` when given.
    """
    missing = {"step_s", "drafting_s", "verification_s", "sampling_s", "clock"} - set(steps.columns)
    if missing:
        raise SpecReproError(f"step table lacks column(s) {', '.join(sorted(missing))}")
    keys = [c for c in by if c in steps.columns]
    groups = steps.groupby(keys, sort=True, dropna=False) if keys else [((), steps)]
    rows = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        if g.empty:
            continue
        total = float(g["step_s"].sum())
        row = dict(zip(keys, key))
        row.update(clock="+".join(sorted(set(g["clock"].astype(str)))), steps=int(len(g)), total_s=total)
        used = 0.0
        for p in BREAKDOWN_PHASES[:3]:
            row[f"{p}_s"] = float(g[f"{p}_s"].sum())
            used += row[f"{p}_s"]
        if used > total + CLOCK_SLACK_S * len(g):
            raise SpecReproError(f"phases ({used:.6g} s) exceed the step time ({total:.6g} s): overlapping phases?")
        row["overhead_s"] = max(total - used, 0.0)
        for p in BREAKDOWN_PHASES:
            row[f"{p}_share"] = row[f"{p}_s"] / total if total > 0 else float("nan")
        if wall_s is not None:
            w = wall_s.get(key[0] if len(key) == 1 else key)
            row["wall_s"] = float(w) if w is not None else np.nan
            row["engine_s"] = row["wall_s"] - total
        rows.append(row)
    cols = keys + ["clock", "steps", "total_s"] + [f"{p}_s" for p in BREAKDOWN_PHASES] + [
        f"{p}_share" for p in BREAKDOWN_PHASES]
    if wall_s is not None:
        cols += ["wall_s", "engine_s"]
    return pd.DataFrame(rows, columns=cols)


#: the columns a breakdown CSV (``specrepro profile --breakdown``) must have
REQUIRED = ("exp", "model", "method", "k", "config", "dataset", "batch_size", "clock", "steps", "total_s",
            "drafting_s", "verification_s", "sampling_s", "overhead_s")


def load_breakdown(paths) -> pd.DataFrame:
    """The breakdown CSVs stacked; an empty file (a configuration without points) is skipped."""
    if not paths:
        raise SpecReproError("no breakdown tables given (--breakdown)")
    frames = []
    for p in paths:
        try:
            df = pd.read_csv(p)
        except FileNotFoundError:
            raise SpecReproError(f"{p}: file not found") from None
        except pd.errors.EmptyDataError:
            continue
        if df.empty:
            continue
        missing = [c for c in REQUIRED if c not in df.columns]
        if missing:
            raise SpecReproError(f"{p}: not a breakdown table (missing column(s) {', '.join(missing)})")
        frames.append(df)
    if not frames:
        raise SpecReproError(f"all {len(paths)} breakdown table(s) are empty: no profiled points to plot")
    df = pd.concat(frames, ignore_index=True)
    df["k"] = pd.to_numeric(df["k"], errors="coerce").astype("Int64")
    df["batch_size"] = df["batch_size"].astype(int)
    for c in ["steps", "total_s"] + [f"{p}_s" for p in BREAKDOWN_PHASES]:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    df["clock"] = df["clock"].astype(str)
    return df
