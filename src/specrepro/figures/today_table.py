"""Table: how much of the gap between the paper's best fixed k and the oracle today's methods close."""

from __future__ import annotations

import math

from . import FigureSpec, TraceContext
from ..core.io import read_json, write_csv, write_text
from ..core.latex import fit_width, tex_escape
from ..analysis.today import METHODS, ORACLE, gap_table, statements
from ._sim import load_summaries
from ..engine.results.metrics import config_label_text, config_order, load_points, speedup_points

SPEC = FigureSpec(
    name="tab_today",
    kind="table",
    title="The paper's question on today's engines: the gap closed",
    paper_ref="Figs. 10, 12; vLLM 0.34",
    caption=(
        "Simulated speedups ({subject_label}, paper mode): the paper's best fixed k (n-gram or EAGLE, k = 1, 3 "
        "or 5; which in brackets: E5 is EAGLE with k = 5, n3 n-gram with k = 3), the best fixed k over the same "
        "candidates the schedules choose from (n-gram or EAGLE, every k of simulator.today.k_candidates, 1..20), "
        "the oracle (Oracle Combine of n-gram, EAGLE and suffix), EAGLE at k = 3 (the "
        "paper's engine runs), and for each of today's methods its speedup and, in brackets, the share of the gap "
        "between a best fixed k and the oracle it closes ((S - best fixed) / (oracle - best fixed); first from the "
        "paper's, then from the one over the same candidates; negative: slower than that fixed k). Against the "
        "paper's k = 1, 3, 5 a schedule also gains by a larger k alone (it takes k = 10 and more at B = 1); against "
        "the same candidates only choosing k by batch size counts. k by batch size: "
        "each dataset is simulated with the schedule chosen on the other datasets (per batch size, the k with "
        "the best geometric-mean fixed-k speedup); the pooled schedules, what an engine is given, are listed "
        "below the table with the choices at the largest candidate (censored: the released traces record 20 drafts "
        "per step, so no larger k can be simulated). Under the best fixed k and the oracle, in small type: their 95 % bootstrap intervals over "
        "the drawn requests (the CSV has one for every speedup, columns <method>_ci_low/_ci_high; the shares "
        "closed have none)."
    ),
    paper_statement=(
        "No fixed k comes close to the oracle, and the gap widens with the batch size (Figs. 10, 12); the "
        "paper's engine had neither a k that follows the batch size nor suffix decoding."
    ),
    data="simulator on released traces",
)

SHOWN = ("eagle_k3", "eagle_schedule", "ngram_schedule", "suffix_schedule", "suffix_k3", "adaptive")
SHORT = {"eagle_k3": "EAGLE k=3", "eagle_schedule": "EAGLE k(B)", "ngram_schedule": "n-gram k(B)",
         "suffix_schedule": "suffix k(B)", "suffix_k3": "suffix k=3", "adaptive": "adaptive"}
PROPOSER_TEXT = {"ngram": "n-gram", "eagle": "EAGLE", "suffix": "suffix"}
PROPOSER_SHORT = {"ngram": "n", "eagle": "E"}


def add_arguments(p) -> None:
    p.add_argument("--summaries", nargs="+", required=True,
                   help="paper-mode, variant (adaptive) and today summaries of specrepro simulate")
    p.add_argument("--schedule", help="k-schedule output (the pooled schedules are listed)")
    p.add_argument("--csv", required=True, help="the full table as CSV")
    p.add_argument("--engine-points", nargs="*", default=[],
                   help="bench tables of the experiments that run today's methods (GPU runs): measured speedups")


def _with_ci(text: str, r: dict, key: str) -> str:
    """``text`` with the interval of ``key`` under it in small type (no interval: ``text``); a top-aligned inner
    tabular keeps ``text`` on the row's baseline."""
    lo, hi = r.get(f"{key}_ci_low", math.nan), r.get(f"{key}_ci_high", math.nan)
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return text
    return f"\\begin{{tabular}}[t]{{@{{}}r@{{}}}}{text}\\\\{{\\tiny [{lo:.2f}, {hi:.2f}]}}\\end{{tabular}}"


def _share(closed: float | None) -> str:
    return "--" if closed is None or math.isnan(closed) else f"{round(100 * closed) + 0:+d}\\%"  # no "-0"


def _cell(v: float, closed: float, closed_wide: float | None = None) -> str:
    if v is None or math.isnan(v):
        return "--"
    return f"{v:.2f} ({_share(closed)}" + ("" if closed_wide is None else f"/{_share(closed_wide)}") + ")"


def to_latex(t, ctx: TraceContext, schedule: dict | None) -> str:
    text = statements(t, (1, 64), ctx.dataset_label)
    lines = []
    if text:
        lines += [r"\begin{minipage}{\linewidth}\raggedright\footnotesize",
                  r"\textbf{On the released traces} (this run's simulator):\\",
                  "\\\\\n".join(tex_escape(s) for s in text),
                  r"\end{minipage}\par\medskip", ""]
    head = len(lines) + 1
    lines += [
        r"{\footnotesize\setlength{\tabcolsep}{3.5pt}",
        r"\begin{tabular}{lr rrr " + "r" * len(SHOWN) + "}",
        r"\toprule",
        r"Dataset & B & best fixed & same k & oracle & " + " & ".join(SHORT[k] for k in SHOWN) + r" \\",
        r"\midrule",
    ]
    prev = None
    for r in t.to_dict("records"):
        if prev is not None and r["dataset"] != prev:
            lines.append(r"\addlinespace")
        ds = tex_escape(ctx.dataset_label(r["dataset"])) if r["dataset"] != prev else ""
        prev = r["dataset"]
        best = f"{r['best_fixed']:.2f} ({PROPOSER_SHORT.get(r['best_fixed_proposer'], r['best_fixed_proposer'])}{r['best_fixed_k']})"
        cells = " & ".join(_cell(r[k], r.get(f"{k}_closed"), r.get(f"{k}_closed_wide")) for k in SHOWN)
        wide = (f"{r['best_fixed_wide']:.2f} ({PROPOSER_SHORT.get(r['best_fixed_wide_proposer'], r['best_fixed_wide_proposer'])}"
                f"{int(r['best_fixed_wide_k'])})")
        best, oracle = _with_ci(best, r, "best_fixed"), _with_ci(f"{r[ORACLE]:.2f}", r, ORACLE)
        wide = _with_ci(wide, r, "best_fixed_wide")
        lines.append(f"{ds} & {r['batch_size']} & {best} & {wide} & {oracle} & {cells} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines[head:] = fit_width(lines[head:]) + ["}"]
    if schedule:
        rows = []
        for p, e in (schedule.get("proposers") or {}).items():
            ranges = ", ".join(f"{a}--{b}: {k}" for a, b, k in e["schedule"])
            cens = e.get("censored") or []
            rows.append(f"{PROPOSER_TEXT.get(p, p)}: {ranges}"
                        + (f" (at the largest candidate k = {max(e['candidates'])}: {', '.join(cens)})" if cens else ""))
        lines += ["", r"\par\smallskip\footnotesize Pooled k-by-batch-size schedules (batch sizes: k): "
                  + tex_escape("; ".join(rows)) + "."]
    return "\n".join(lines) + "\n"


def measured_latex(points, ctx: TraceContext) -> str:
    """Measured speedups over no SD (mean throughput over requests) of every configuration, per experiment."""
    p = load_points(points)
    t = speedup_points(p)
    t = t[t["config"] != "none"]
    if t.empty:
        return ""
    order = [c for c, m, k in config_order(p) if c != "none"]
    names = {c: config_label_text(m, k, ctx.proposers, c) for c, m, k in config_order(p)}
    cols = [c for c in order if c in set(t["config"])]
    lines = ["", r"\par\medskip\footnotesize\textbf{Measured} on the engine (speedup over no SD, mean over requests):",
             ""]
    tab = [r"\begin{tabular}{llr " + "r" * len(cols) + "}", r"\toprule",
           "Exp. & Dataset & B & " + " & ".join(tex_escape(names[c]) for c in cols) + r" \\", r"\midrule"]
    for (exp, ds, b), g in t.groupby(["exp", "dataset", "batch_size"], sort=True):
        s = g.set_index("config")["speedup"]
        cells = " & ".join("--" if c not in s or math.isnan(s[c]) else f"{s[c]:.2f}" for c in cols)
        tab.append(f"{tex_escape(exp)} & {tex_escape(ctx.dataset_label(ds))} & {int(b)} & {cells} \\\\")
    lines += fit_width(tab + [r"\bottomrule", r"\end{tabular}"])
    return "\n".join(lines) + "\n"


def build(args, ctx: TraceContext) -> None:
    t = gap_table(load_summaries(args.summaries), ctx.datasets)
    write_csv(args.csv, t, float_format="%.10g")
    schedule = read_json(args.schedule) if args.schedule else None
    text = to_latex(t, ctx, schedule)
    if args.engine_points:
        text += measured_latex(args.engine_points, ctx)
    write_text(args.output, text)


__all__ = ["SPEC", "METHODS", "add_arguments", "build"]
