"""Table: the hybrid proposer chosen online inside vLLM, measured and simulated, against each single method and
Oracle Combine (issue 23; :mod:`specrepro.analysis.drafted`).

Input: ``specrepro engine-drafted``'s hybrid table (per dataset, batch size and hybrid: measured speedup with its
95 % interval, the simulated one on the same requests with the engine's accounting, the best single method
measured, Oracle Combine measured and simulated, the share of the gap closed, the median share of steps n-gram's
draft was chosen) and its summary (the finding, where the hybrid loses and why, in ms from the cost model, and the
hybrids' closed loop fed wrong acceptance). The finding opens the table; where it loses, and the falsification, follow it.
"""

from __future__ import annotations

import pandas as pd

from . import FigureSpec, TraceContext
from ._enginesim import fmt
from ..core.io import read_json, write_csv, write_text
from ..core.latex import fit_width, tex_escape
from . import style

SPEC = FigureSpec(
    name="tab_hybrid",
    kind="table",
    title="Choosing the proposer online inside vLLM: the hybrid, measured and simulated",
    paper_ref="Sec. 7 (beyond the paper)",
    caption=(
        "The plugin's hybrid proposer on {subject_label}: n-gram and the model drafter both propose every step and a "
        "policy picks one draft per request and step: adaptive (the simulator's own online policy, the same function "
        "in engine and simulator) and n-gram first (vLLM PR \\#24344's rule). Per dataset and batch size: the better "
        "single method measured (fixed k), each hybrid's measured speedup over no SD (95 % paired bootstrap interval) "
        "with the simulator's prediction in parentheses (same requests, this run's cost model and traces, the model "
        "drafter charged its whole draft every step as the engine runs it), Oracle Combine measured (simulated), "
        "the share of the gap from the best single method to Oracle Combine the adaptive hybrid closes (measured / "
        "simulated) and the median share of its steps that verified n-gram's draft."
    ),
    paper_statement=(
        "The paper's way forward: n-gram wins at some positions and requests, EAGLE at others, and choosing the "
        "proposer online could approach Oracle Combine; no released engine does it."
    ),
    data="engine runs (vLLM plugin's draft hook) and this run's engine traces",
)

HYBRIDS = ("hybrid-adaptive", "hybrid-ngram-first")


def add_arguments(p) -> None:
    p.add_argument("--hybrid", required=True, help="results/simulator/engine-<exp>/hybrid.csv")
    p.add_argument("--summary", required=True, help="results/simulator/engine-<exp>/drafted.json")
    p.add_argument("--csv", required=True)


def _pct(v) -> str:
    return fmt(None if v is None else 100 * v, "{:.0f}")


def to_latex(t: pd.DataFrame, ctx: TraceContext, summary: dict) -> str:
    head = [f"\\parbox{{\\textwidth}}{{\\small {tex_escape(summary.get('finding', ''))}}}", "", r"\smallskip", ""]
    lines = [r"\begin{tabular}{@{}lrllllrr@{}}", r"\toprule",
             r"dataset & $B$ & best single & adaptive [95\,\%] (sim.) & n-gram first (sim.) & Oracle Combine (sim.) "
             r"& gap closed & n-gram share \\",
             r"\midrule"]
    for (ds, b), g in t.groupby(["dataset", "batch_size"], sort=False):
        by = {r.hybrid: r for r in g.itertuples(index=False)}
        first = g.iloc[0]
        ad, nf = by.get("hybrid-adaptive"), by.get("hybrid-ngram-first")
        cell = (lambda r: "--" if r is None else
                f"{fmt(r.measured)} [{fmt(r.measured_ci_low)}, {fmt(r.measured_ci_high)}] ({fmt(r.simulated)})")
        nf_cell = "--" if nf is None else f"{fmt(nf.measured)} ({fmt(nf.simulated)})"
        gap = "--" if ad is None else f"{_pct(ad.gap_closed_measured)} / {_pct(ad.gap_closed_simulated)}\\,\\%"
        share = "--" if ad is None or "share_ngram" not in g or pd.isna(getattr(ad, "share_ngram", None)) else \
            f"{100 * ad.share_ngram:.0f}\\,\\%"
        best = f"{tex_escape(style.METHOD_LABELS.get(first.best_single, first.best_single))} {fmt(first.best_single_measured)}"
        lines.append(f"{tex_escape(ctx.dataset_label(ds))} & {int(b)} & {best} & {cell(ad)} & {nf_cell} & "
                     f"{fmt(first.combine_measured)} ({fmt(first.combine_simulated)}) & {gap} & {share} \\\\")
    if not len(t):
        lines.append(r"\multicolumn{8}{c}{no hybrid configuration both benchmarked and traced} \\")
    lines = fit_width(lines + [r"\bottomrule", r"\end{tabular}"])
    falsified = (summary.get("hybrid_falsification") or {}).get("sentence", "")
    tail = ["", r"\smallskip", f"\\parbox{{\\textwidth}}{{\\footnotesize {tex_escape(summary.get('loses', ''))}"
            + (f" {tex_escape(falsified)}" if falsified else "") + "}"]
    return "\n".join(head + lines + tail) + "\n"


def build(args, ctx: TraceContext) -> None:
    t = pd.read_csv(args.hybrid) if args.hybrid else pd.DataFrame()
    summary = read_json(args.summary)
    order = {d: i for i, d in enumerate(ctx.datasets)}
    if len(t):
        t = t.sort_values(["dataset", "batch_size", "hybrid"], key=lambda s: s.map(order) if s.name == "dataset" else s)
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.6g")
    write_text(args.output, to_latex(t, ctx, summary))
