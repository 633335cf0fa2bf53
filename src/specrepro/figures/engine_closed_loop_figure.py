"""Figure: simulated against measured speedup of one experiment, one marker per compared point (closed loop).

Input: ``specrepro closed-loop``'s table and summary (:mod:`specrepro.analysis.closedloop`). x: measured speedup
with its 95 % interval, y: simulated on the same requests with its interval (no bars for a point of fewer than
MIN_INTERVAL_REQUESTS requests: a note under the axes says so); colour = method, marker = batch size; the dashed line
is equality. The title gives the median and worst absolute error.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from . import FigureSpec, TraceContext
from . import style
from ..core.io import read_json
from ..core.uncertainty import MIN_INTERVAL_REQUESTS, printable_interval, too_few_text

SPEC = FigureSpec(
    name="fig_closed_loop",
    kind="figure",
    title="Closed loop: simulated against measured speedup",
    paper_ref="Sec. 6 (beyond the paper)",
    caption=(
        "Simulated (paper mode, this experiment's own cost model and traces, the benchmark's requests) against "
        "measured speedup of every configuration of {subject_label} both benchmarked and traced; one marker per "
        "dataset, method, k and batch size (colour: method; marker: batch size), bars: 95 % bootstrap intervals over "
        f"the requests (none for a point of fewer than {MIN_INTERVAL_REQUESTS} requests; the note under the axes says "
        "so), dashed: equality. Points above the line are where the simulator promises more than the engine "
        "delivered."
    ),
    paper_statement=(
        "The paper's upper bounds come from a simulator it does not compare with its own measured speedups."
    ),
    data="engine runs and this run's engine traces",
    sources=(
        "results/simulator/{subject}/closed_loop.csv",
        "results/simulator/{subject}/closed_loop.json",
    ),
)

MARKERS = ("o", "s", "D", "^", "v", "P", "X", "h")


def add_arguments(p) -> None:
    p.add_argument("--table", required=True)
    p.add_argument("--summary", required=True)


def build(args, ctx: TraceContext) -> None:
    style.apply()
    t = pd.read_csv(args.table)
    s = read_json(args.summary)
    fig, ax = plt.subplots(figsize=(3.6, 3.4), constrained_layout=True)
    bs = sorted(t["batch_size"].unique()) if len(t) else []
    marker = {b: MARKERS[i % len(MARKERS)] for i, b in enumerate(bs)}
    t = printable(t)
    for r in t.itertuples(index=False):
        c = style.method_color(r.method)
        bars = {}
        if pd.notna(r.measured_ci_low) and pd.notna(r.measured_ci_high):
            bars["xerr"] = [[max(r.measured - r.measured_ci_low, 0)], [max(r.measured_ci_high - r.measured, 0)]]
        if pd.notna(r.simulated_ci_low) and pd.notna(r.simulated_ci_high):
            bars["yerr"] = [[max(r.simulated - r.simulated_ci_low, 0)], [max(r.simulated_ci_high - r.simulated, 0)]]
        ax.errorbar([r.measured], [r.simulated], **bars, fmt=marker[r.batch_size], color=c, markersize=4,
                    elinewidth=0.5, capsize=0, alpha=0.9)
    if len(t):
        lo = float(min(t[["measured", "simulated", "measured_ci_low", "simulated_ci_low"]].min().min(), 1.0))
        hi = float(max(t[["measured", "simulated", "measured_ci_high", "simulated_ci_high"]].max().max(), 1.0))
        pad = 0.05 * (hi - lo or 1.0)
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="#555555", linestyle="--", linewidth=0.7)
        for m in dict.fromkeys(t["method"]):
            ax.plot([], [], "o", color=style.method_color(m), markersize=4, label=style.METHOD_LABELS.get(m, m))
        for b in bs:
            ax.plot([], [], marker[b], color="#555555", markersize=4, linestyle="none", label=f"B={b}")
        ax.legend(fontsize=5.5, frameon=False, loc="upper left")
        ax.set_title(f"median |error| {100 * s['median_abs_error']:.0f} %, worst {100 * s['worst_abs_error']:.0f} % "
                     f"({s['points']} points)", fontsize=7)
    else:
        ax.set_title("no configuration both benchmarked and traced", fontsize=7)
    ax.set_xlabel("measured speedup")
    ax.set_ylabel("simulated speedup")
    ax.grid(True, linestyle="--", linewidth=0.3, color="#bbbbbb")
    ax.set_axisbelow(True)
    note = few_requests_note(t)
    if note:
        style.figure_note(fig, note)
    style.save_pdf(fig, args.output)


def printable(t: pd.DataFrame) -> pd.DataFrame:
    """The table with NaN intervals at points of fewer than MIN_INTERVAL_REQUESTS requests (no 95 % interval there:
    nothing drawn); the CSV keeps them."""
    t = t.copy()
    if "requests" not in t or not len(t):
        return t
    for v in ("measured", "simulated"):
        lh = [printable_interval(lo, hi, n) for lo, hi, n in zip(t[f"{v}_ci_low"], t[f"{v}_ci_high"], t["requests"])]
        t[f"{v}_ci_low"], t[f"{v}_ci_high"] = [x[0] for x in lh], [x[1] for x in lh]
    return t


def few_requests_note(t: pd.DataFrame) -> str:
    """Under the axes, where some points rest on fewer than MIN_INTERVAL_REQUESTS requests: they have no bars."""
    text = too_few_text(t["requests"]) if len(t) and "requests" in t else ""
    return "No bars: " + text.replace(": too few", ":\ntoo few") + "." if text else ""
