"""Table: the closed loop of every experiment with engine traces, one row each (its error before its bounds).

Input: every experiment's ``closed_loop.json`` (:mod:`specrepro.analysis.closedloop`): compared points, median and worst
absolute relative error (with the worst point), the mean signed error (``mean_error``), how many simulated values lie
in the measured 95 % interval, ordering agreement beside the most-common-order baseline (``ranking_baseline_agreeing``),
and where the cost model came from.
"""

from __future__ import annotations

import pandas as pd

from . import FigureSpec, TraceContext
from ._enginesim import fmt, tex_pct
from ..core.io import read_json, write_csv, write_text
from ..core.latex import fit_width, tex_escape

SPEC = FigureSpec(
    name="tab_closed_loop_summary",
    kind="table",
    title="Closed loop of every model: its fixed-k speedups simulated against measured",
    paper_ref="Sec. 6 (beyond the paper)",
    caption=(
        "For every experiment with engine traces ({subject_label}): the configurations it both benchmarked and traced "
        "(fixed k), the median and worst |simulated / measured - 1| of their speedups (simulator in paper mode on the "
        "experiment's own traces and cost model, on the benchmark's requests), their mean signed error (mean err: "
        "simulated / measured - 1; positive where the simulator is optimistic), how many simulated values lie inside "
        "the measured interval (a 95 % interval over at least 8 requests; below that only the bootstrap's range of "
        "the few requests, no 95 % interval), in how many (dataset, batch size) groups the simulator orders the configurations "
        "as measured (in brackets, base: always guessing the most common measured order), and what the cost model was "
        "fitted to (profiled steps, or the benchmark's own wall times: in-sample, so no error is stated for it)."
    ),
    paper_statement="The paper does not compare its simulator with its measured speedups.",
    data="engine runs and this run's engine traces",
)

COLUMNS = ["exp", "points", "median_abs_error", "worst_abs_error", "worst", "within_measured_ci", "groups",
           "groups_agreeing", "ranking_agrees", "fit_source", "ngram_match_prob", "mean_error",
           "ranking_baseline_agreeing"]


def add_arguments(p) -> None:
    p.add_argument("--summaries", nargs="+", required=True, help="results/simulator/engine-<exp>/closed_loop.json")
    p.add_argument("--csv", required=True)


def row(s: dict) -> dict:
    w = s.get("worst") or {}
    return {"exp": s["exp"], "points": s.get("points", 0), "median_abs_error": s.get("median_abs_error"),
            "worst_abs_error": s.get("worst_abs_error"),
            "worst": f"{w.get('dataset')} {w.get('config')} B={w.get('batch_size')}" if w else "",
            "within_measured_ci": s.get("within_measured_ci", 0), "groups": s.get("groups", 0),
            "groups_agreeing": s.get("groups_agreeing", 0), "ranking_agrees": s.get("ranking_agrees"),
            "fit_source": (s.get("diagnostics") or {}).get("fit_source"), "ngram_match_prob": s.get("ngram_match_prob"),
            "mean_error": s.get("mean_error"), "ranking_baseline_agreeing": s.get("ranking_baseline_agreeing")}


def _head(*words: str) -> str:
    """A header cell on several lines (narrow numeric columns keep the table from being scaled)."""
    return r"\begin{tabular}[b]{@{}c@{}}" + r"\\".join("{" + w + "}" for w in words) + r"\end{tabular}"  # "\\[" is a skip


def to_latex(t: pd.DataFrame) -> str:
    # the worst point wraps in its own column and the headers stack: a wider table would be scaled below 7 pt
    # (core.layout.MIN_TEXT_PT)
    lines = [r"\begin{tabular}{@{}lrrrr>{\raggedright\arraybackslash}p{0.15\textwidth}rrl@{}}", r"\toprule",
             " & ".join(["experiment", "points", _head("median", "$|$err$|$"), _head("worst", "$|$err$|$"),
                         _head("mean", "err"), "worst point", _head("in", "CI"), _head("ordering", "[base]"),
                         "cost model"]) + r" \\",
             r"\midrule"]
    for r in t.itertuples(index=False):
        base = getattr(r, "ranking_baseline_agreeing", None)
        order = (f"{r.groups_agreeing}/{r.groups}" + (f" [{int(base)}]" if base is not None and base == base else "")
                 if r.groups else "--")
        src = {"profile": "profiled steps", "bench": "bench (in-sample)"}.get(r.fit_source, str(r.fit_source))
        if r.fit_source == "bench":  # fitted to the wall times it is checked against: no error to state
            lines.append(f"\\texttt{{{tex_escape(r.exp)}}} & {r.points} & \\multicolumn{{6}}{{l}}{{in-sample: no error "
                         f"stated (no profiled pass)}} & {tex_escape(src)} \\\\")
            continue
        lines.append(f"\\texttt{{{tex_escape(r.exp)}}} & {r.points} & {tex_pct(r.median_abs_error)} & "
                     f"{tex_pct(r.worst_abs_error)} & {tex_pct(getattr(r, 'mean_error', None), True)} & "
                     f"{{\\footnotesize {tex_escape(r.worst)}}} & {r.within_measured_ci} & {order} & "
                     f"{tex_escape(src)} \\\\")
    return "\n".join(fit_width(lines + [r"\bottomrule", r"\end{tabular}"])) + "\n"


def build(args, ctx: TraceContext) -> None:
    t = pd.DataFrame([row(read_json(p)) for p in args.summaries], columns=COLUMNS)
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.6g")
    write_text(args.output, to_latex(t))
