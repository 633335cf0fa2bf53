"""Entry points: the specs of a command line, a trace file simulated, and the metric keys of the summaries."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from ...core.costmodel import CostModel
from ...core.errors import SpecReproError
from ...core.traces import read_trace
from ...core.uncertainty import Interval, interval_metrics
from ..names import BATCHING, COMBINE_COSTS, PAIRING
from .reference import simulate_reference
from .simulate import SimResult, simulate
from .workload import SimSpec, Workload, ngram_match_prob


# --- entry points -------------------------------------------------------------------------------


def build_specs(dataset: str, proposers: Sequence[str], policies: Sequence[str], ngram_match: float | None = None,
                schedules: Mapping[str, Sequence] | None = None, **modes) -> list[SimSpec]:
    """Every valid (proposer, policy) pair of the two lists, in list order.

    With one proposer and one policy an invalid pair is an error; with lists, pairs the
    proposer does not take are skipped (combined takes oracle and adaptive only; adaptive
    needs combined; batch-schedule needs the proposer's schedule in ``schedules``). The n-gram
    match probability is looked up only where it is used.
    """
    schedules = schedules or {}
    for key, allowed in (("combine_cost", COMBINE_COSTS), ("batching", BATCHING), ("pairing", PAIRING)):
        if key in modes and modes[key] not in allowed:
            raise SpecReproError(f"unknown {key.replace('_', ' ')} {modes[key]!r} (known: {', '.join(allowed)})")
    pairs = [(pr, po) for pr in proposers for po in policies]
    specs = []
    for pr, po in pairs:
        # n-gram with a fixed k, and the adaptive policy, whose n-gram option is what the lookup proposes
        needs_p = (pr == "ngram" and (po == "batch-schedule" or po.startswith("fixed-"))) or (
            pr == "combined" and po == "adaptive")
        extra = {}
        if po == "batch-schedule":
            if pr not in schedules:
                if len(pairs) == 1:
                    raise SpecReproError(f"policy 'batch-schedule' needs a schedule for proposer {pr!r} (--schedule)")
                continue
            extra["schedule"] = schedules[pr]
        try:
            spec = SimSpec(pr, po, **extra, **modes)
        except SpecReproError:
            if len(pairs) == 1:
                raise
            continue  # a pair this proposer does not take
        if needs_p:
            spec = SimSpec(pr, po, ngram_match_prob=ngram_match_prob(dataset, ngram_match), **extra, **modes)
        specs.append(spec)
    if not specs:
        raise SpecReproError(f"no valid proposer/policy pair in {list(proposers)} x {list(policies)}")
    return specs


def metric_key(traceset: str, row: Mapping, suffix: str = "") -> str:
    """``sim.<trace set>.<dataset>.<proposer>.<policy>[-<mode>...][suffix].b<B>``; paper mode has no suffix."""
    policy = str(row["policy"])
    if row.get("combine_cost", "ngram") != "ngram":
        policy += f"-cost-{row['combine_cost']}"
    if row.get("pairing", "index") != "index":
        policy += f"-{row['pairing']}"
    if row.get("batching", "replicate") != "replicate":
        policy += f"-{row['batching']}"
    policy += suffix
    return f"sim.{traceset}.{row['dataset']}.{row['proposer']}.{policy}.b{int(row['batch_size'])}"


def metrics_from_summaries(traceset: str, tables: Sequence[pd.DataFrame], suffix: str = "",
                           same_sample: bool = False) -> dict[str, float]:
    """Flat ``{metric key: speedup}`` of simulator summary tables, with the interval keys where a row has one
    (:func:`specrepro.core.uncertainty.interval_metrics`); a key twice is an error.

    ``same_sample``: the tables were simulated with the authors' draw (:data:`PAPER_DRAW`) of the released
    traces, so the paper-mode rows (index pairing: the full draw) are the paper's own requests and get
    ``<key>.same_sample``: :mod:`specrepro.analysis.claims` decides them on the point.
    """
    out: dict[str, float] = {}
    for table in tables:
        for row in table.to_dict("records"):
            key = metric_key(traceset, row, suffix)
            if key in out:
                raise SpecReproError(f"simulator metric {key!r} is produced twice")
            lo, hi = row.get("ci_low", float("nan")), row.get("ci_high", float("nan"))
            iv = Interval(float(row["speedup"]), float(lo), float(hi), int(row.get("requests", 0) or 0))
            same = same_sample and row.get("pairing", "index") == "index"
            m = interval_metrics(key, iv, same_sample=same)
            if key not in m:  # a NaN speedup still names its key, as before
                m = {key: float(row["speedup"])}
            out.update(m)
    return out


def simulate_trace_file(trace: str, dataset: str, proposers: Sequence[str], policies: Sequence[str],
                        batch_sizes: Sequence[int], cost: CostModel, ngram_match: float | None = None,
                        reference: bool = False, schedules: Mapping[str, Sequence] | None = None,
                        **modes) -> SimResult:
    """Read a trace file and simulate every valid (proposer, policy) pair at every batch size."""
    specs = build_specs(dataset, proposers, policies, ngram_match, schedules, **modes)
    workload = Workload.from_records(read_trace(trace, aligned=()), dataset)
    run = simulate_reference if reference else simulate
    results = [run(workload, s, batch_sizes, cost) for s in specs]
    batches = [r.batches for r in results if len(r.batches)]
    return SimResult(
        pd.concat([r.summary for r in results], ignore_index=True),
        pd.concat(batches, ignore_index=True) if batches else pd.DataFrame(),
    )
