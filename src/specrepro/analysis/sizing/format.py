"""The run's plan as text: every engine job with its device time and the claims it serves, and the totals."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from .claims import EXACT, NOT_COVERED, NOT_SIZED, SIZED
from .power import POWER, SPREAD_MARGIN


# --- the plan with the claims each job serves ----------------------------------------------------------


def _fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "inf" if x == math.inf else "--"
    return f"{x:.{digits}g}"


def claim_line(r: Mapping[str, Any]) -> str:
    """One claim of the plan: requests, expected half-width against the width that decides it, the verdict."""
    head = f"    {r['id']:<48}"
    if r["status"] == EXACT:
        return head + "exact: " + r["note"]
    if r["status"] != SIZED:
        return head + f"{r['status']}: {r['note']}"
    verdict = "decided" if r["decided"] else f"NOT decided: needs {_fmt(r['requests_needed'], 6)} requests"
    line = (head + f"n={int(r['requests']):>4}  expected +-{_fmt(r['expected_half_width'])}  "
            f"needs <= +-{_fmt(r['target_half_width'])} (decides at +-{_fmt(r['decisive_half_width'])})  {verdict}"
            f"  p={_fmt(r.get('p_decided', float('nan')), 3)}")
    return line + (f"\n{'':8}spread from: {r['proxy']}" if r.get("proxy") else "")


def joint_expectation(sizing: pd.DataFrame) -> dict:
    """Over the rows of :func:`size_claims`: claims, sized ones, the expected number of sized claims left undecided
    (sum of 1 - p_decided), the probability that all sized ones are decided (claims taken as independent), and the
    claims undecided by construction (not covered, not sized)."""
    sized = sizing[sizing["status"] == SIZED]
    p = sized["p_decided"].astype(float)
    return {"claims": int(len(sizing)), "sized": int(len(sized)), "expected_undecided": float((1 - p).sum()),
            "p_all": float(p.prod()) if len(p) else float("nan"),
            "not_covered": int((sizing["status"] == NOT_COVERED).sum()),
            "not_sized": int((sizing["status"] == NOT_SIZED).sum()), "exact": int((sizing["status"] == EXACT).sum())}


def format_sized_plan(plan: pd.DataFrame, sizing: pd.DataFrame | None, full_total: float | None,
                      full_name: str = "config/paper.yaml", spread_note: str = "",
                      requests: pd.DataFrame | None = None, coverage: pd.DataFrame | None = None,
                      engine_start_s: float = 0) -> str:
    """The plan (one line per engine job: experiment, job, configuration, GPUs, points, estimated GPU-hours) with,
    under each job, the engine claims it measures, their expected 95 % half-widths, the probability each is decided
    and the trace that stood in for its spread; then every headline claim the config drops (with the config's
    reason), the figures it measures nothing of, the joint expectation over the sized claims, the config's total,
    the full grid's total and their ratio."""
    if plan.empty:
        return "no engine jobs in this config"
    rows = [] if sizing is None else sizing.to_dict("records")
    served: dict[str, list[dict]] = {}
    for r in rows:
        jobs = str(r.get("jobs") or "").split()
        for j in [j for j in jobs if not j.endswith("/none")] or jobs:
            served.setdefault(j, []).append(r)
    baseline_of = {j.split("/")[0] for r in rows for j in str(r.get("jobs") or "").split() if j.endswith("/bench/none")}
    lines = [f"{'experiment':<22} {'job':<8} {'config':<16} {'GPUs':>4} {'points':>7} {'est. GPU-h':>10}"]
    for r in plan.itertuples(index=False):
        lines.append(f"{r.exp:<22} {r.job:<8} {r.config:<16} {r.gpus:>4} {r.points:>7} {r.est_gpu_hours:>10.2f}")
        lines += [claim_line(c) for c in served.get(f"{r.exp}/{r.job}/{r.config}", [])]
        if r.job == "bench" and r.config == "none" and r.exp in baseline_of:
            lines.append("    (no SD: the baseline of this experiment's speedups)")
    total = float(plan["est_gpu_hours"].sum())
    if rows:
        st = sizing["status"]
        which = "headline engine claims" if sizing["headline"].all() else "engine claims"
        lines += ["", (f"{which}: {len(sizing)}; sized {int((st == SIZED).sum())} (expected to be decided: "
                       f"{int((sizing['decided'] & (st == SIZED)).sum())}), exact {int((st == EXACT).sum())}, not "
                       f"sized {int((st == NOT_SIZED).sum())}, not covered {int((st == NOT_COVERED).sum())}")]
        dropped = [r for r in rows if r["status"] == NOT_COVERED]
        if dropped:
            lines.append(f"dropped by this config ({len(dropped)}; the full grid measures them):")
            lines += [f"    {r['id']:<48}{r['note']}" for r in dropped]
        lines += [claim_line(r) for r in rows if r["status"] == NOT_SIZED or (r["status"] == SIZED and not r["decided"])]
        j = joint_expectation(sizing)
        if j["sized"]:
            lines.append(
                f"joint expectation: each sized claim is decided with probability >= {POWER:g} even at "
                f"{100 * (SPREAD_MARGIN - 1):.0f} % more spread than estimated; at the estimated spread the {j['sized']} "
                f"sized claims leave {j['expected_undecided']:.2f} undecided on average and are all decided with "
                f"probability {j['p_all']:.2f} (claims taken as independent); of the others, not covered "
                f"{j['not_covered']} (never decided by this config), not sized {j['not_sized']} (measured, their "
                f"decision not predicted)")
        if spread_note:
            lines.append(f"(per-request spread: {spread_note})")
    if coverage is not None and len(coverage):
        lines += ["", "engine claims per figure: measured by this config / in the registry (headline: measured / all)"]
        for r in coverage.itertuples(index=False):
            why = "" if r.measured else f"  dropped: {r.reason}" if r.reason else "  (no reason in run.dropped_claims)"
            lines.append(f"    {r.group:<44} {r.measured:>4} / {r.claims:<4} (headline {r.headline_measured} / "
                         f"{r.headline}){why}")
    if requests is not None and len(requests):
        lines += ["", "requests per experiment, job and dataset: needed by its sized claims / in this config"]
        per = requests.groupby(["exp", "job", "dataset"], sort=False)[["requests_needed", "requests"]].max()
        for (exp, job, ds), r in per.iterrows():
            flag = "" if r["requests"] >= r["requests_needed"] else "  (too few)"
            lines.append(f"    {exp:<22} {job:<8} {ds:<14} {_fmt(r['requests_needed'], 6):>6} / {int(r['requests'])}{flag}")
    lines += ["", f"{'GPU-hours, this config':<44} {total:>10.2f}"]
    if full_total:
        lines.append(f"{'GPU-hours, full grid (' + full_name + ')':<44} {full_total:>10.2f}")
        lines.append(f"{'this config / full grid':<44} {100 * total / full_total:>9.2f} %")
    lines.append("(estimate: cost-model no-SD time, every SD job charged as no-SD; scaled by weight bytes per GPU; output "
                 "lengths = datasets.<d>.expected_output_tokens, else the output cap. Expected half-widths: 95 % "
                 f"intervals over the job's requests at {100 * (SPREAD_MARGIN - 1):.0f} % more than the estimated spread; "
                 "p: the probability the claim is decided at the estimated spread; specrepro.analysis.sizing)")
    lines.append(f"(engine start: {engine_start_s:g} s charged per job, run.engine_start_s, a stated assumption)"
                 if engine_start_s else "(engine start not charged: the config sets no run.engine_start_s)")
    return "\n".join(lines)
