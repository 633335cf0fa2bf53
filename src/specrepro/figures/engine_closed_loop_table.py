"""Table: the simulator against the measurements of one experiment (closed loop), and its error summary.

Input: ``specrepro closed-loop``'s table and summary (:mod:`specrepro.analysis.closedloop`): per (dataset, method,
k, batch size) benchmarked and traced, the measured speedup with its 95 % interval, the simulated one on the same
requests with its interval, and the error; below, the experiment's median and worst absolute error, whether the
simulator orders the configurations as measured, and what this run's numbers say about the causes.
"""

from __future__ import annotations

import pandas as pd

from . import FigureSpec, TraceContext
from ._enginesim import fmt, tex_pct
from ..engine.results.metrics import config_label_text
from ..core.io import read_json, write_csv, write_text
from ..core.latex import fit_width, tex_escape
from ..core.uncertainty import MIN_INTERVAL_REQUESTS, printable_interval, too_few_text
from . import style

SPEC = FigureSpec(
    name="tab_closed_loop",
    kind="table",
    title="Closed loop: simulated against measured speedup",
    paper_ref="Sec. 6 (beyond the paper)",
    caption=(
        "Every configuration of {subject_label} that was both benchmarked and traced (a fixed k): the measured speedup "
        "(mean throughput over requests / no SD's on the same requests, timed beside each point where the experiment "
        "sets paired_reference, else by the no-SD job; 95 % paired bootstrap interval; none over "
        f"fewer than {MIN_INTERVAL_REQUESTS} requests, and the note below says so) and the "
        "simulator's (paper mode, B copies of a request as the benchmark ran them, on the traces of exactly those "
        "requests, with this experiment's own cost model), paired on experiment, dataset, method, k and batch size; "
        "error = simulated / measured - 1; a dagger marks an in-sample point (the cost model saw its requests). Below: "
        "the experiment's median and worst |error|, its sign, the ordering agreement and what bounds the error."
    ),
    paper_statement=(
        "The paper bounds what SD could reach with a simulator and a cost model that it does not check against its "
        "own measured speedups; this table does that check for this run's model."
    ),
    data="engine runs and this run's engine traces",
)


def add_arguments(p) -> None:
    p.add_argument("--table", required=True, help="results/simulator/engine-<exp>/closed_loop.csv")
    p.add_argument("--summary", required=True, help="results/simulator/engine-<exp>/closed_loop.json")
    p.add_argument("--csv", required=True)


def _with_interval(v, low, high, n) -> str:
    """``0.66 [0.63, 0.69]``; the point alone over fewer than MIN_INTERVAL_REQUESTS requests (no 95 % interval)."""
    low, high = printable_interval(low, high, n)
    return fmt(v) if pd.isna(low) or pd.isna(high) else f"{fmt(v)} [{fmt(low)}, {fmt(high)}]"


def few_requests_sentence(t: pd.DataFrame) -> str:
    """Where points rest on fewer than MIN_INTERVAL_REQUESTS requests: that their intervals are not shown (once)."""
    text = too_few_text(t["requests"]) if len(t) and "requests" in t else ""
    return f"{text}, none shown; the CSV keeps the bootstrap's columns." if text else ""


def to_latex(t: pd.DataFrame, ctx: TraceContext, summary: dict) -> str:
    all_few = bool(len(t)) and "requests" in t and bool((t["requests"] < MIN_INTERVAL_REQUESTS).all())
    ci = "" if all_few else r" [95\,\%]"
    lines = [r"\begin{tabular}{@{}llrrllr@{}}", r"\toprule",
             f"dataset & configuration & $B$ & requests & measured{ci} & simulated{ci} & error \\\\",
             r"\midrule"]
    for r in t.itertuples(index=False):
        cfg = config_label_text(r.method, int(r.k), style.METHOD_LABELS)
        mark = r"$^\dagger$" if bool(getattr(r, "in_sample", False)) else ""
        lines.append(f"{tex_escape(ctx.dataset_label(r.dataset))}{mark} & {tex_escape(cfg)} & {int(r.batch_size)} & "
                     f"{int(r.requests)} & {_with_interval(r.measured, r.measured_ci_low, r.measured_ci_high, r.requests)} & "
                     f"{_with_interval(r.simulated, r.simulated_ci_low, r.simulated_ci_high, r.requests)} & "
                     f"{tex_pct(r.error, sign=True)} \\\\")
    if not len(t):
        lines.append(r"\multicolumn{7}{c}{no configuration both benchmarked and traced} \\")
    note = " ".join(x for x in (few_requests_sentence(t), summary.get("explanation", "")) if x)
    lines = fit_width(lines + [r"\bottomrule", r"\end{tabular}"]) + ["", r"\smallskip",
              f"\\parbox{{\\textwidth}}{{\\footnotesize {tex_escape(note)}}}"]
    return "\n".join(lines) + "\n"


def build(args, ctx: TraceContext) -> None:
    t = pd.read_csv(args.table)
    summary = read_json(args.summary)
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.6g")
    write_text(args.output, to_latex(t, ctx, summary))
