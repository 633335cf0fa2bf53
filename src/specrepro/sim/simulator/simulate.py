"""The driver: one simulation over the batch sizes (its summary rows with intervals, per batch and per request)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ...core.costmodel import CostModel
from ...core.errors import SpecReproError
from ...core.uncertainty import bootstrap_ratio_ci
from .batching import _baseline_steps, _continuous_throughput, _replicate, continuous_matches
from .steps import decode_steps
from .workload import SUMMARY_COLUMNS, SimSpec, Workload, _numpy_stream, draw_requests, request_traces


# --- driver ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimResult:
    """``summary``: one row per batch size; ``batches``: one row per batch (paper mode only)."""

    summary: pd.DataFrame
    batches: pd.DataFrame


def _summary_row(workload, spec, B, R, base_tpt, sd_tpt, per_request=None, pooled=None) -> dict:
    """One summary row; ``per_request = (sd throughputs, baseline throughputs)`` of the batches gives the interval.
    ``pooled``: the speedup as total tokens over total time (continuous batching's own averaging; replicate batching
    averages per-request throughputs, the paper's), by default the speedup itself."""
    iv = bootstrap_ratio_ci(*per_request) if per_request is not None else None
    return {
        "dataset": workload.dataset, "proposer": spec.proposer, "policy": spec.policy, "batch_size": B,
        "speedup": sd_tpt / base_tpt, "batching": spec.batching, "pairing": spec.pairing,
        "combine_cost": spec.combine_cost, "requests": R, "baseline_throughput": base_tpt, "sd_throughput": sd_tpt,
        "ci_low": iv.low if iv else float("nan"), "ci_high": iv.high if iv else float("nan"),
        "pooled_speedup": sd_tpt / base_tpt if pooled is None else pooled,
    }


def _per_batch_size(run, workload: Workload, spec: SimSpec, batch_sizes: Sequence[int], cost: CostModel) -> SimResult:
    """A batch-schedule policy: at each batch size, the fixed k its schedule gives (k = 0: no SD, speedup 1).

    A batch of B copies (or B slots, continuous) schedules B requests every step, so vLLM's lookup by the
    number of scheduled requests gives one k for the whole run at that batch size."""
    rows, batches = [], []
    for B in _check_batch_sizes(batch_sizes):
        fixed = spec.at_batch_size(B)
        if fixed is None:
            from dataclasses import replace

            # the baseline of the same requests and lengths (any SD policy of this proposer carries it)
            base = run(workload, replace(spec, policy="fixed-1", schedule=()), [B], cost).summary.iloc[0]
            row = _summary_row(workload, spec, B, int(base["requests"]), base["baseline_throughput"],
                               base["baseline_throughput"])
            if spec.batching == "replicate":  # SD = baseline on every request: every resample's ratio is 1
                row.update(ci_low=1.0, ci_high=1.0)
            rows.append(row)
            continue
        res = run(workload, fixed, [B], cost)
        s = res.summary.assign(policy=spec.policy)
        rows += s.to_dict("records")
        if len(res.batches):
            batches.append(res.batches.assign(policy=spec.policy))
    return SimResult(pd.DataFrame(rows, columns=SUMMARY_COLUMNS),
                     pd.concat(batches, ignore_index=True) if batches else pd.DataFrame())


def simulate(workload: Workload, spec: SimSpec, batch_sizes: Sequence[int], cost: CostModel) -> SimResult:
    """Simulate ``spec`` at every batch size (fast, vectorised)."""
    if spec.policy == "batch-schedule":
        return _per_batch_size(simulate, workload, spec, batch_sizes, cost)
    batch_sizes = _check_batch_sizes(batch_sizes)
    idx, rng = draw_requests(workload, spec)
    acc, ng, ea = request_traces(workload, spec.proposer, idx)
    P = workload.prompt_len[idx]
    L = workload.lengths(spec.proposer)[idx]
    fixed_steps = None if spec.policy == "adaptive" else decode_steps(spec, acc, ng, ea, P, 1, cost)
    rows, batch_rows = [], []
    if spec.batching == "replicate":
        n_random = 0 if fixed_steps is None else int(fixed_steps.random.sum())
        uniforms = _numpy_stream(rng).random_sample(max(batch_sizes) * n_random) if n_random else None
        for B in batch_sizes:
            steps = fixed_steps if fixed_steps is not None else decode_steps(spec, acc, ng, ea, P, B, cost)
            sd, base = _replicate(spec, steps, P, L, B, cost, uniforms)
            tokens = B * L.astype(np.float64)
            sd_tpt, base_tpt = tokens / sd, tokens / base
            rows.append(_summary_row(workload, spec, B, idx.size, base_tpt.mean(), sd_tpt.mean(), (sd_tpt, base_tpt),
                                     pooled=float(tokens.sum() / sd.sum()) / float(tokens.sum() / base.sum())))
            batch_rows.append(pd.DataFrame({
                "dataset": workload.dataset, "proposer": spec.proposer, "policy": spec.policy, "batch_size": B,
                "batch": np.arange(idx.size), "request_id": [workload.ids[i] for i in idx], "prompt_len": P,
                "output_len": L, "baseline_latency": base, "sd_latency": sd, "baseline_throughput": base_tpt,
                "sd_throughput": sd_tpt,
            }))
    else:
        base_steps = _baseline_steps(L)
        for B in batch_sizes:
            steps = fixed_steps if fixed_steps is not None else decode_steps(spec, acc, ng, ea, P, B, cost)
            matched = continuous_matches(spec, steps)
            sd_tpt = _continuous_throughput(steps, P, L, B, cost, matched)
            base_tpt = _continuous_throughput(base_steps, P, L, B, cost, None, sd=False)
            rows.append(_summary_row(workload, spec, B, idx.size, base_tpt, sd_tpt))
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    batches = pd.concat(batch_rows, ignore_index=True) if batch_rows else pd.DataFrame()
    return SimResult(summary, batches)


def _check_batch_sizes(batch_sizes: Sequence[int]) -> list[int]:
    out = [int(b) for b in batch_sizes]
    if not out or any(b < 1 for b in out):
        raise SpecReproError(f"--batch-sizes must be positive integers, got {list(batch_sizes)}")
    return out
