"""Can the closed loop fail? The real closed loop next to the same comparison fed wrong inputs.

:mod:`specrepro.analysis.closedloop` compares the simulator with measured speedups. A check that a simulator fed the
wrong acceptance passes as well as the real one says nothing about acceptance. For one experiment, every *variant*
below recomputes the simulated side of the closed loop on the same measured points, cost model, requests and seed,
with only the traces changed (:func:`variant_traces`), or with no simulator at all (``no-traces``):

* ``real``: the traces as recorded;
* ``drafters-swapped``: the model-based drafters' acceptance swapped (EAGLE's trace given to the draft model and the
  other way round; with more than two drafters, rotated);
* ``all-accepted``: every draft accepted (``acc_len`` = the trace's k + 1 at every position);
* ``none-accepted``: no draft accepted (``acc_len`` = 1 everywhere);
* ``other-dataset``: every request given the acceptance of a request of the next dataset (datasets in a cycle,
  request ``i`` takes request ``i mod n`` of the next dataset, repeated or cut to its own output length);
* ``lookup-drafter-swapped``: n-gram's acceptance and a drafter's (EAGLE where traced) swapped;
* ``no-traces``: no simulator: each point predicted by the mean measured speedup of the same (method, k, batch size)
  on the experiment's other datasets.

A variant that does not apply (one drafter, no n-gram, one dataset) is listed with the reason. Each variant gets
the closed loop's numbers (:func:`score`): median, worst and mean signed error (the error's sign: > 0 is an
optimistic simulator), and three ordering agreements, each next to a baseline that always guesses the most common
measured order (:func:`order_agreement`):

* ``order_methods``: configurations within a (dataset, batch size) (the closed loop's); on a CPU this order follows
  drafting cost more than acceptance;
* ``order_datasets``: datasets within a (method, k, batch size): only acceptance tells them apart;
* ``order_k``: k within a (dataset, method, batch size), where the run benchmarked several k.

``falsified``: the variant's median |error| is at least :data:`FACTOR` times the real one's on the same points
(``ratio``; ``no-traces`` leaves out points whose (method, k, B) no other dataset ran). ``input_effect_median`` and
``input_effect_max``: how far the wrong input moves the simulated speedups from the real traces' (|variant / real - 1|
on the same points). A wrong input that moves them less than the real error cannot be told from the right one on
these points, so its ratio says more about the input than about the check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.errors import SpecReproError
from ..core.io import read_json, read_parquet, write_json
from ..core.traces import TraceRecord, read_trace
from ..engine.results.metrics import load_points
from ..engine.results.modelfit import DRAFTERS, LOOKUP
from .closedloop import KEY, experiment_inputs, join, measured_points, order_agreement, simulated_points

#: the issue's bar: every wrong input must give at least this times the real median |error|
FACTOR = 1.5
VARIANTS = ("real", "drafters-swapped", "all-accepted", "none-accepted", "other-dataset", "lookup-drafter-swapped",
            "no-traces")
#: what a reader sees for each variant (the report's tables and sentences)
VARIANT_LABELS = {"real": "real traces", "drafters-swapped": "drafters' acceptance swapped",
                  "all-accepted": "every draft accepted", "none-accepted": "no draft accepted",
                  "other-dataset": "another dataset's acceptance", "lookup-drafter-swapped": "n-gram and EAGLE swapped",
                  "no-traces": "no traces (other datasets' mean)"}
#: the traces' drafts per step (k = 20, specrepro.jobspec.args.TRACE_K): "every draft accepted" is k + 1 tokens a step
TRACE_K = 20
#: (name, the columns that make a group, the item ordered within it)
ORDERINGS = (("order_methods", ["exp", "dataset", "batch_size"], "config"),
             ("order_datasets", ["exp", "method", "k", "batch_size"], "dataset"),
             ("order_k", ["exp", "dataset", "method", "batch_size"], "k"))


def _with_acc(r: TraceRecord, acc: Mapping[str, np.ndarray]) -> TraceRecord:
    return TraceRecord(r.id, r.prompt_token_ids, r.generated_token_ids, dict(acc), r.line)


def _fit_to(a: np.ndarray, n: int, first: int) -> np.ndarray:
    """``a`` repeated or cut to ``n`` positions, position 0 kept as ``first`` (the prefill's token)."""
    out = np.resize(np.asarray(a, dtype=np.int64), n) if n else np.zeros(0, dtype=np.int64)
    if n:
        out[0] = first
    return out


def variant_traces(traces: Mapping[str, Sequence[TraceRecord]], methods: Sequence[str],
                   variant: str) -> dict[str, list[TraceRecord]] | str:
    """The trace set with one variant's acceptance (module docstring); a string saying why when it does not apply.
    ``methods``: the traced methods the simulator models (n-gram and the drafters)."""
    drafters = [m for m in methods if m in DRAFTERS]
    traced = [m for m in methods if m == LOOKUP or m in DRAFTERS]
    if variant == "real":
        return {ds: list(recs) for ds, recs in traces.items()}
    if variant == "drafters-swapped":
        if len(drafters) < 2:
            return "fewer than two model-based drafters traced"
        nxt = dict(zip(drafters, drafters[1:] + drafters[:1]))
        return {ds: [_with_acc(r, {**r.acc_len, **{m: r.acc_len[nxt[m]] for m in drafters}}) for r in recs]
                for ds, recs in traces.items()}
    if variant in ("all-accepted", "none-accepted"):
        def flat(a):
            out = np.full(a.size, TRACE_K + 1 if variant == "all-accepted" else 1, dtype=np.int64)
            if a.size:
                out[0] = a[0]
            return out
        return {ds: [_with_acc(r, {**r.acc_len, **{m: flat(r.acc_len[m]) for m in traced if m in r.acc_len}})
                     for r in recs] for ds, recs in traces.items()}
    if variant == "other-dataset":
        names = [ds for ds, recs in traces.items() if len(recs)]
        if len(names) < 2:
            return "one dataset only"
        nxt = dict(zip(names, names[1:] + names[:1]))
        out = {}
        for ds, recs in traces.items():
            donors = traces[nxt[ds]] if ds in nxt else recs
            out[ds] = [_with_acc(r, {**r.acc_len, **{m: _fit_to(donors[i % len(donors)].acc_len[m], r.acc_len[m].size,
                                                                  int(r.acc_len[m][0]) if r.acc_len[m].size else 1)
                                                     for m in traced if m in r.acc_len}})
                       for i, r in enumerate(recs)]
        return out
    if variant == "lookup-drafter-swapped":
        if LOOKUP not in methods or not drafters:
            return "needs n-gram and a model-based drafter traced"
        d = "eagle" if "eagle" in drafters else drafters[0]
        return {ds: [_with_acc(r, {**r.acc_len, LOOKUP: r.acc_len[d], d: r.acc_len[LOOKUP]}) for r in recs]
                for ds, recs in traces.items()}
    raise SpecReproError(f"unknown trace variant {variant!r} (known: {', '.join(VARIANTS)})")


def no_traces_points(measured: pd.DataFrame) -> pd.DataFrame:
    """The ``no-traces`` prediction: per row, the mean measured speedup of the same (exp, method, k, batch size) on
    the other datasets (rows with no other dataset are dropped); columns as :func:`closedloop.simulated_points`."""
    rows = []
    for r in measured.itertuples(index=False):
        same = measured[(measured["exp"] == r.exp) & (measured["method"] == r.method) & (measured["k"] == r.k)
                        & (measured["batch_size"] == r.batch_size) & (measured["dataset"] != r.dataset)]
        if same.empty:
            continue
        v = float(same["measured"].mean())
        rows.append({"exp": r.exp, "dataset": r.dataset, "method": r.method, "k": int(r.k),
                     "batch_size": int(r.batch_size), "request_ids": tuple(r.request_ids), "simulated": v,
                     "simulated_ci_low": np.nan, "simulated_ci_high": np.nan})
    return pd.DataFrame(rows, columns=KEY + ["request_ids", "simulated", "simulated_ci_low", "simulated_ci_high"])


def score(table: pd.DataFrame) -> dict:
    """A variant's closed-loop numbers (module docstring) from its joined table (:func:`closedloop.join`)."""
    if table.empty:
        return {"points": 0}
    out = {"points": int(len(table)), "median_abs_error": float(table["abs_error"].median()),
           "worst_abs_error": float(table["abs_error"].max()), "mean_error": float(table["error"].mean()),
           "median_error": float(table["error"].median()), "optimistic_points": int((table["error"] > 0).sum())}
    for name, by, item in ORDERINGS:
        out[name] = order_agreement(table, by, item)
    return out


def falsify(measured: pd.DataFrame, traces: Mapping[str, Sequence[TraceRecord]], methods: Sequence[str],
            cost_model: str, *, ngram_match: float, seed: int) -> tuple[dict, pd.DataFrame]:
    """Every variant's score on the same measured points; returns (document, per-point table with a ``variant``
    column). The document's ``variants`` hold each score, ``ratio`` (its median |error| over the real one's on the same
points) and
    ``falsified`` (ratio >= :data:`FACTOR`), or ``not_applicable`` with the reason."""
    doc: dict = {"factor": FACTOR, "variants": {}}
    frames = []
    real_table = None
    for v in VARIANTS:
        if v == "no-traces":
            sim = no_traces_points(measured)
        else:
            tr = variant_traces(traces, methods, v)
            if isinstance(tr, str):
                doc["variants"][v] = {"not_applicable": tr}
                continue
            sim = simulated_points(measured, tr, methods, cost_model, ngram_match=ngram_match, seed=seed)
        t = join(sim, measured) if len(sim) else pd.DataFrame(columns=KEY + ["error", "abs_error"])
        s = score(t)
        if v == "real":
            real_table = t
        elif s.get("points") and real_table is not None and len(real_table):
            # against the real loop on the same points (no-traces drops points with no other dataset)
            same = real_table.merge(t[KEY + ["simulated"]], on=KEY, how="inner", suffixes=("", "_variant"))
            base = float(same["abs_error"].median()) if len(same) else float("nan")
            s["real_median_same_points"] = base
            s["ratio"] = s["median_abs_error"] / base if base > 0 else float("inf")
            s["falsified"] = bool(s["ratio"] >= FACTOR)
            if len(same):
                moved = (same["simulated_variant"] / same["simulated"] - 1).abs()
                s["input_effect_median"], s["input_effect_max"] = float(moved.median()), float(moved.max())
        doc["variants"][v] = s
        frames.append(t.assign(variant=v))
    applied = [s for k, s in doc["variants"].items() if k != "real" and "falsified" in s]
    doc["every_variant_falsified"] = bool(applied) and all(s["falsified"] for s in applied)
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return doc, table


def run_falsify(a) -> None:
    """The body of ``specrepro falsify``."""
    points, ids, traces, traced = experiment_inputs(a.points, a.exp, a.prompts, a.traces)
    match = float(read_json(a.schedule).get("ngram_match_prob", 1.0))
    meas = measured_points(points, ids, traced, a.methods)
    doc, _ = falsify(meas, traces, a.methods, a.cost_model, ngram_match=match, seed=a.seed)
    write_json(a.output, {"exp": a.exp, "ngram_match_prob": match, **doc})
