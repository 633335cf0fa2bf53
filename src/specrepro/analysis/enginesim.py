"""The paper's upper-bound analysis (Figs. 10 and 12) on one experiment's own engine traces and cost model.

Input: the experiment's trace set (``resources/traces/engine-<exp>/<dataset>.jsonl``: per-position acceptance of
every traced method, k = 20, one token kept per step; :mod:`specrepro.engine.run.traces`) and its cost model
(``results/engine/<exp>/cost_model.yaml``, :mod:`specrepro.engine.results.modelfit`). Paper mode throughout
(:mod:`specrepro.sim.simulator`: a batch is B copies of one request; every request of the trace set, drawn in the
order of ``random.Random(seed)``), at the experiment's batch sizes.

**Proposers.** The simulator has a lookup slot (n-gram: drafting is ``draft_fraction * T``) and a model slot
(EAGLE in the paper: ``eagle_draft(kv, input_len)``). Each of the experiment's model-based drafters ``m``
(EAGLE, EAGLE-3, draft model, MTP) takes the model slot in turn, with its own fitted drafting coefficients
(``load_cost_model(path, drafter=m)``), n-gram the lookup slot; summary rows name the method (``proposer`` =
``ngram``, ``eagle3``, ``draft_model``, ...). Policies: fixed k (1, 3, 5 and every ``k_candidates``) and the
oracle (verify exactly what will be accepted).

**Oracle Combine** (proposer ``combined``, Fig. 12): per position the best of *all* the experiment's proposers,
verified exactly, at n-gram's drafting cost (the paper's accounting): with one drafter the simulator's
``combined``; with more, its three-slot ``combined3`` with the third slot holding the per-position best of the
remaining drafters (the maximum is the same). Needs n-gram.

**Beyond the paper** (where they apply): the online ``adaptive`` policy over n-gram and each drafter ``m``
(proposer ``ngram+<m>``: its model slot is ``m``), the pairwise Oracle Combine ``ngram+<m>`` (oracle), and k by
batch size (``batch-schedule``) for every single proposer: the schedule of :func:`specrepro.analysis.today.choose_schedule`
on this experiment's fixed-k grid, each dataset evaluated with the schedule chosen on the *other* datasets (with
one dataset, on itself: noted in the schedule file).

**n-gram's match probability.** The paper's simulator draws, at a position where n-gram's trace says 1 token,
whether n-gram found a match at all (probability ``p``; otherwise the step verifies 1 token and drafts nothing).
The released traces do not say; an engine trace job does: its check record counts the positions that verified
no draft (``undrafted``), so ``p = 1 - undrafted / (positions >= 1 with acc_len == 1)`` of that job's trace file
(:func:`ngram_match_from_trace`), one value per experiment.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.costmodel import load_cost_model, resolve
from ..core.errors import SpecReproError
from ..sim.simulator import SUMMARY_COLUMNS, SimSpec, Workload, metrics_from_summaries, simulate
from ..core.traces import TraceRecord, read_trace
from ..engine.results.modelfit import DRAFTERS, LOOKUP
from ..core.uncertainty import Interval, interval_metrics
from ..sim.names import DEFAULT_K_CANDIDATES
from .today import choose_schedule
from ..core.io import read_json, write_csv, write_json

PAPER_FIXED = (1, 3, 5)
COLUMNS = ["exp"] + SUMMARY_COLUMNS


def ngram_acc_lens(path) -> list[np.ndarray]:
    """``acc_ngram.acc_len`` of every record of an n-gram trace job's file (all its datasets: request ids repeat
    across datasets, so this is not read as one trace set)."""
    import json

    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            try:
                out.append(np.asarray(rec["acc_ngram"]["acc_len"], dtype=np.int64))
            except (KeyError, TypeError):
                raise SpecReproError(f"{path}:{n}: no acc_ngram.acc_len (not an n-gram trace job's file)") from None
    return out


def ngram_match_from_trace(acc_lens: Sequence[np.ndarray], undrafted: int) -> float:
    """n-gram's match probability at positions whose trace says 1 token (module docstring); ``acc_lens``: the
    trace job's ``acc_len`` arrays (:func:`ngram_acc_lens`)."""
    ones = sum(int(np.count_nonzero(np.asarray(a)[1:] == 1)) for a in acc_lens)
    if ones == 0:
        return 1.0
    if undrafted > ones:
        raise SpecReproError(f"{undrafted} undrafted positions but only {ones} with acc_len 1: the check record is "
                             "not of this trace file")
    return 1.0 - undrafted / ones


def workload(records: Sequence[TraceRecord], dataset: str, lookup: str | None, model: str,
             third: Sequence[str] = ()) -> Workload:
    """A simulator workload whose lookup slot holds ``acc_<lookup>`` (the model's trace without one), model slot
    ``acc_<model>`` and third slot the per-position maximum of ``third`` (cut to the shortest)."""
    need = [m for m in (lookup, model, *third) if m]
    for r in records:
        for m in need:
            if m not in r.acc_len:
                raise SpecReproError(f"{dataset}: request {r.id!r} has no 'acc_{m}' trace")
    suffix = None
    if third:
        suffix = []
        for r in records:
            arrs = [r.acc_len[m] for m in third]
            n = min(a.size for a in arrs)
            suffix.append(np.maximum.reduce([a[:n] for a in arrs]).astype(np.int64))
        suffix = tuple(suffix)
    return Workload(
        dataset=dataset, ids=tuple(r.id for r in records),
        prompt_len=np.array([r.prompt_token_ids.size for r in records], dtype=np.int64),
        output_len=np.array([r.output_len for r in records], dtype=np.int64),
        ngram=tuple(r.acc_len[lookup or model].astype(np.int64) for r in records),
        eagle=tuple(r.acc_len[model].astype(np.int64) for r in records),
        suffix=suffix)


def _run(w: Workload, spec: SimSpec, batch_sizes, cost, label: str, exp: str) -> pd.DataFrame:
    s = simulate(w, spec, batch_sizes, cost).summary.copy()
    s["proposer"] = label
    s.insert(0, "exp", exp)
    return s


def simulate_experiment(exp: str, traces: Mapping[str, Sequence[TraceRecord]], methods: Sequence[str],
                        cost_model: str, batch_sizes: Sequence[int], *, ngram_match: float = 1.0, seed: int = 42,
                        k_candidates: Sequence[int] = DEFAULT_K_CANDIDATES,
                        adaptive: bool = True, schedules: bool = True) -> tuple[pd.DataFrame, dict]:
    """Every proposer x policy of the module docstring on every dataset; returns (summary, schedule document)."""
    lookup = LOOKUP if LOOKUP in methods else None
    fitted = fitted_drafters(cost_model)
    left_out = {m: "no drafting coefficients in the cost model (its profiled pass recorded no drafter step)"
                for m in methods if m in DRAFTERS and m not in fitted}
    drafters = [m for m in methods if m in DRAFTERS and m in fitted]
    if not lookup and not drafters:
        raise SpecReproError(f"{exp}: no traced method the simulator models (n-gram or {', '.join(DRAFTERS)})")
    ks = sorted(set(PAPER_FIXED) | {int(k) for k in k_candidates})
    fixed = [f"fixed-{k}" for k in ks]
    costs = {m: load_cost_model(cost_model, drafter=m) for m in drafters}
    lookup_cost = load_cost_model(cost_model, overhead_of=LOOKUP)  # n-gram's SD steps: its own overhead
    frames = []
    n_req = {ds: len(recs) for ds, recs in traces.items()}

    def spec(proposer, policy, ds, **kw):
        return SimSpec(proposer, policy, ngram_match_prob=ngram_match, num_requests=max(n_req[ds], 1), seed=seed, **kw)

    for ds, recs in traces.items():
        if lookup:
            w = workload(recs, ds, lookup, lookup)
            for pol in fixed + ["oracle"]:
                frames.append(_run(w, spec("ngram", pol, ds), batch_sizes, lookup_cost, "ngram", exp))
        for m in drafters:
            w = workload(recs, ds, lookup, m)
            for pol in fixed + ["oracle"]:
                frames.append(_run(w, spec("eagle", pol, ds), batch_sizes, costs[m], m, exp))
            if lookup:
                frames.append(_run(w, spec("combined", "oracle", ds), batch_sizes, costs[m], f"ngram+{m}", exp))
                if adaptive:
                    frames.append(_run(w, spec("combined", "adaptive", ds), batch_sizes, costs[m], f"ngram+{m}", exp))
        if lookup and drafters:
            if len(drafters) == 1:
                w = workload(recs, ds, lookup, drafters[0])
                frames.append(_run(w, spec("combined", "oracle", ds), batch_sizes, costs[drafters[0]], "combined", exp))
            else:
                w = workload(recs, ds, lookup, drafters[0], third=drafters[1:])
                frames.append(_run(w, spec("combined3", "oracle", ds), batch_sizes, costs[drafters[0]], "combined", exp))
    summary = pd.concat(frames, ignore_index=True)
    doc: dict = {"rule": ("per batch size, the k in 0..k_max with the highest geometric-mean simulated speedup over the "
                          "other datasets of the experiment (held out); with one dataset, over itself"),
                 "datasets": list(traces), "ngram_match_prob": ngram_match, "proposers": {}, "left_out": left_out}
    if schedules:
        datasets = list(traces)
        singles = ([lookup] if lookup else []) + drafters
        for p in singles:
            entry = {"schedule": choose_schedule(summary, p, datasets)[0], "held_out": {}}
            for ds in datasets:
                others = [d for d in datasets if d != ds] or [ds]
                sched = choose_schedule(summary, p, others)[0]
                entry["held_out"][ds] = sched
                slot = "ngram" if p == lookup else "eagle"
                w = workload(traces[ds], ds, lookup, p if p != lookup else lookup)
                s = spec(slot, "batch-schedule", ds, schedule=tuple(tuple(x) for x in sched))
                frames.append(_run(w, s, batch_sizes, costs.get(p, lookup_cost), p, exp))
            doc["proposers"][p] = entry
        summary = pd.concat(frames, ignore_index=True)
    return summary[COLUMNS], doc


def fitted_drafters(cost_model: str) -> set[str]:
    """The drafters a cost-model file has coefficients for (``drafters`` section; a file without one: ``eagle``)."""
    import yaml

    doc = yaml.safe_load(resolve(cost_model).read_text(encoding="utf-8")) or {}
    return set(doc["drafters"]) if isinstance(doc.get("drafters"), dict) else {"eagle"}


def best_fixed(summary: pd.DataFrame, ks: Sequence[int] = PAPER_FIXED) -> pd.DataFrame:
    """Per (dataset, proposer, batch size): the best of the paper's fixed k (1, 3, 5) with its interval, the oracle,
    and their ratio ``oracle / best fixed``."""
    fx = summary[summary["policy"].isin([f"fixed-{k}" for k in ks])]
    idx = fx.groupby(["dataset", "proposer", "batch_size"])["speedup"].idxmax()
    best = fx.loc[idx, ["dataset", "proposer", "batch_size", "policy", "speedup", "ci_low", "ci_high", "requests"]].rename(
        columns={"policy": "best_policy", "speedup": "best_fixed", "ci_low": "best_ci_low", "ci_high": "best_ci_high"})
    orc = summary[summary["policy"] == "oracle"][["dataset", "proposer", "batch_size", "speedup", "ci_low", "ci_high"]]
    orc = orc.rename(columns={"speedup": "oracle", "ci_low": "oracle_ci_low", "ci_high": "oracle_ci_high"})
    out = best.merge(orc, on=["dataset", "proposer", "batch_size"], how="inner", validate="one_to_one")
    out["oracle_over_best_fixed"] = out["oracle"] / out["best_fixed"]
    return out.sort_values(["dataset", "proposer", "batch_size"]).reset_index(drop=True)


def metrics(traceset: str, summary: pd.DataFrame) -> dict[str, float]:
    """``sim.<trace set>.<dataset>.<proposer>.<policy>.b<B>`` of every row (with intervals), plus per proposer
    ``best-fixed`` (the best of k = 1, 3, 5, with that row's interval) and ``oracle-over-best-fixed``, and per
    dataset ``best-single.oracle`` (the best single-method oracle, with its row's interval)."""
    out = metrics_from_summaries(traceset, [summary.drop(columns=["exp"], errors="ignore")])
    for r in best_fixed(summary).itertuples(index=False):
        key = f"sim.{traceset}.{r.dataset}.{r.proposer}.best-fixed.b{int(r.batch_size)}"
        out.update(interval_metrics(key, Interval(float(r.best_fixed), float(r.best_ci_low), float(r.best_ci_high),
                                                   int(r.requests))))
        out[f"sim.{traceset}.{r.dataset}.{r.proposer}.oracle-over-best-fixed.b{int(r.batch_size)}"] = float(
            r.oracle_over_best_fixed)
    single = summary[(summary["policy"] == "oracle") & ~summary["proposer"].str.contains(r"\+")
                     & (summary["proposer"] != "combined")]
    for (ds, b), g in single.groupby(["dataset", "batch_size"]):
        r = g.loc[g["speedup"].idxmax()]
        out.update(interval_metrics(f"sim.{traceset}.{ds}.best-single.oracle.b{int(b)}",
                                    Interval(float(r["speedup"]), float(r["ci_low"]), float(r["ci_high"]),
                                             int(r["requests"]))))
    return out


# --- CLI ----------------------------------------------------------------------------------------------


def run_engine_simulate(a) -> None:
    """The body of ``specrepro engine-simulate``."""
    from pathlib import Path

    traces = {Path(t).name.removesuffix(".jsonl"): read_trace(t, aligned=()) for t in a.traces}
    match = 1.0
    if "ngram" in a.methods:
        if not (a.ngram_trace and a.ngram_check):
            raise SpecReproError("n-gram is traced: give --ngram-trace and --ngram-check (its match probability)")
        match = ngram_match_from_trace(ngram_acc_lens(a.ngram_trace), int(read_json(a.ngram_check).get("undrafted", 0)))
    summary, doc = simulate_experiment(a.exp, traces, a.methods, a.cost_model, a.batch_sizes, ngram_match=match,
                                       seed=a.seed, k_candidates=a.k_candidates)
    write_csv(a.output, summary, float_format="%.6g")
    write_json(a.schedule, {**doc, "cost_model": a.cost_model})
    write_json(a.metrics, metrics(a.traceset, summary))


