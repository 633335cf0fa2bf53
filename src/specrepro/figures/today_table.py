"""Table: how much of the gap between the paper's best fixed k and the oracle today's methods close."""

from __future__ import annotations

import math

import pandas as pd

from . import FigureSpec, TraceContext
from ..core.io import read_json, write_csv, write_text
from ..core.latex import fit_width, tex_escape, whole
from ..analysis.today import (METHODS, MIXED, MIXED_CSV, ORACLE, gap_table, mixed_statements, mixed_table,
                              one_batch_size_statement, statements)
from ._sim import load_summaries
from ..engine.results.metrics import config_label_text, config_order, load_points, speedup_points

SPEC = FigureSpec(
    name="tab_today",
    kind="table",
    title="The paper's question on today's engines: the gap closed",
    paper_ref="Figs. 10, 12; vLLM 0.34",
    caption=(
        "Simulated speedups ({subject_label}, paper mode), in two tables per batch size. First: the paper's best fixed "
        "k (n-gram or EAGLE, k = 1, 3 or 5; which in brackets: E5 is EAGLE with k = 5, n3 n-gram with k = 3), the best "
        "fixed k over the same candidates the schedules choose from (same k: n-gram or EAGLE, every k of "
        "simulator.today.k_candidates, 1..20), the oracle (Oracle Combine of n-gram, EAGLE and suffix, the paper's "
        "accounting: the winner's drafting cost), honest OC (Oracle Combine of n-gram and EAGLE charged both drafters "
        "at every step) and EAGLE at k = 3 (the paper's engine runs); under the first three, in small type, their 95 % "
        "bootstrap intervals over the drawn requests. Second: today's methods, each with, in brackets, the share of the "
        "gap between the paper's best fixed k and the oracle it closes ((S - best fixed) / (oracle - best fixed); "
        "negative: slower than that fixed k); a schedule also gains by a larger k alone (it takes k = 10 and more at "
        "B = 1). At one batch size an n-gram or EAGLE schedule is one fixed k of the same candidates, so it cannot beat "
        "'same k' there (suffix k(B) can: suffix decoding is not among those candidates); "
        "what choosing k by batch size gains shows on mixed batch sizes (the third table). k by batch size: each "
        "dataset is simulated with the schedule chosen on the other datasets (per batch size, the k with the best "
        "geometric-mean fixed-k speedup); the pooled schedules, what an engine is given, are listed below with the "
        "choices at the largest candidate (censored: the released traces record 20 drafts per step). The CSV has an "
        "interval for every speedup (columns <method>_ci_low/_ci_high); shares closed and mixed-batch speedups have none."
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
    p.add_argument("--mixed-csv", help="the mixed-batch-size comparison as CSV (analysis.today.mixed_table)")
    p.add_argument("--engine-points", nargs="*", default=[],
                   help="bench tables of the experiments that run today's methods (GPU runs): measured speedups")


def _with_ci(text: str, r: dict, key: str) -> str:
    """``text`` with the interval of ``key`` under it in small type (no interval: ``text``); a top-aligned inner
    tabular keeps ``text`` on the row's baseline."""
    lo, hi = r.get(f"{key}_ci_low", math.nan), r.get(f"{key}_ci_high", math.nan)
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return text
    return f"\\begin{{tabular}}[t]{{@{{}}r@{{}}}}{text}\\\\{{\\scriptsize [{lo:.2f}, {hi:.2f}]}}\\end{{tabular}}"


def _share(closed: float | None) -> str:
    return "--" if closed is None or math.isnan(closed) else whole(100 * closed, sign=True) + "\\%"


def _cell(v: float, closed: float) -> str:
    if v is None or math.isnan(v):
        return "--"
    return f"{v:.2f} ({_share(closed)})"


def _part_cell(r: dict, key: str) -> str:
    """A cell of the split today table: a baseline's speedup (which proposer and k in brackets) with its interval
    under it, or a method's speedup with the share of the gap from the paper's best fixed k it closes."""
    if key in ("best_fixed", "best_fixed_wide"):
        p, k = r[f"{key}_proposer"], int(r[f"{key}_k"])
        return _with_ci(f"{r[key]:.2f} ({PROPOSER_SHORT.get(p, p)}{k})", r, key)
    if key == ORACLE:
        return _with_ci(f"{r[ORACLE]:.2f}", r, ORACLE)
    if key == "honest_oracle":
        v = r.get(key, math.nan)
        return "--" if v is None or pd.isna(v) else f"{v:.2f}"
    return _cell(r[key], r.get(f"{key}_closed"))


def mixed_latex(m, ctx: TraceContext) -> str:
    """The mixed-batch-size table: one row per dataset."""
    if m.empty:
        return ""
    honest = not m["honest_oracle"].isna().all()
    cols = ["best fixed", *(lab for _, lab in MIXED), "oracle"] + (["honest OC"] if honest else [])
    tab = [r"\begin{tabular}{l " + "r" * len(cols) + "}", r"\toprule", "Dataset & " + " & ".join(cols) + r" \\",
           r"\midrule"]
    for r in m.to_dict("records"):
        cells = [f"{r['best_fixed']:.2f} ({PROPOSER_SHORT.get(r['best_fixed_proposer'], r['best_fixed_proposer'])}"
                 f"{int(r['best_fixed_k'])})"]
        for key, _ in MIXED:
            cell = "--" if pd.isna(r[key]) else f"{r[key]:.2f} ({_share(r[f'{key}_closed'])}"
            if honest and not pd.isna(r[key]):
                cell += f"/{_share(r[f'{key}_closed_honest'])}"
            cells.append(cell + ("" if pd.isna(r[key]) else ")"))
        cells.append(f"{r[ORACLE]:.2f}")
        if honest:
            cells.append("--" if pd.isna(r["honest_oracle"]) else f"{r['honest_oracle']:.2f}")
        tab.append(tex_escape(ctx.dataset_label(r["dataset"])) + " & " + " & ".join(cells) + r" \\")
    lines = [r"\par\medskip\noindent\footnotesize\textbf{Mixed batch sizes} (one run spending the same no-SD time at each batch "
             r"size " + tex_escape(str(m["batch_sizes"].iloc[0])) + r"; speedup = harmonic mean over them): one fixed k "
             r"for the whole run (the best on the dataset itself) against k by batch size (held out), in brackets the "
             r"share of the gap to the oracle" + (" / to Oracle Combine charged both drafters (honest OC)" if honest else "")
             + r" each schedule closes (\texttt{" + tex_escape(MIXED_CSV.replace("<trace set>", ctx.subject)) + r"}):\par", "",
             r"{\footnotesize\setlength{\tabcolsep}{3.5pt}", *fit_width(tab + [r"\bottomrule", r"\end{tabular}"]),
             r"}\par\medskip", r"\begin{minipage}{\linewidth}\raggedright\footnotesize",
             "\\\\\n".join(tex_escape(x) for x in mixed_statements(m, ctx.dataset_label)),
             r"\end{minipage}\par\medskip", ""]
    return "\n".join(lines) + "\n"


def to_latex(t, ctx: TraceContext, schedule: dict | None, mixed: pd.DataFrame | None = None) -> str:
    """The two per-batch-size tables, under the statements of :func:`~specrepro.analysis.today.statements` and the
    one sentence on what k by batch size shows at one batch size (``mixed``: :func:`mixed_table`'s rows)."""
    text = statements(t, (1, 64), ctx.dataset_label)
    lines = []
    if text:
        lines += [r"\begin{minipage}{\linewidth}\raggedright\footnotesize",
                  r"\textbf{On the released traces} (this run's simulator):\\",
                  "\\\\\n".join(tex_escape(s) for s in text + [one_batch_size_statement(mixed, ctx.subject)]),
                  r"\end{minipage}\par\medskip", ""]
    # two tables of at most seven columns, so neither is scaled below the body's small type (issue 22, section 3)
    parts = (("best_fixed", "best_fixed_wide", ORACLE, "honest_oracle", "eagle_k3"),
             ("eagle_schedule", "ngram_schedule", "suffix_schedule", "suffix_k3", "adaptive"))
    heads = {"best_fixed": "best fixed", "best_fixed_wide": "same k", ORACLE: "oracle", "honest_oracle": "honest OC",
             **SHORT}
    for part in parts:
        if "honest_oracle" in part and t.get("honest_oracle", pd.Series(dtype=float)).isna().all():
            part = tuple(k for k in part if k != "honest_oracle")
        tab = [r"\begin{tabular}{lr " + "r" * len(part) + "}", r"\toprule",
               r"Dataset & B & " + " & ".join(heads[k] for k in part) + r" \\", r"\midrule"]
        prev = None
        for r in t.to_dict("records"):
            if prev is not None and r["dataset"] != prev:
                tab.append(r"\addlinespace")
            ds = tex_escape(ctx.dataset_label(r["dataset"])) if r["dataset"] != prev else ""
            prev = r["dataset"]
            tab.append(f"{ds} & {r['batch_size']} & " + " & ".join(_part_cell(r, k) for k in part) + r" \\")
        lines += [r"{\footnotesize\setlength{\tabcolsep}{3.5pt}", *fit_width(tab + [r"\bottomrule", r"\end{tabular}"]),
                  r"}\par\medskip", ""]
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
    summaries = load_summaries(args.summaries)
    t = gap_table(summaries, ctx.datasets)
    write_csv(args.csv, t, float_format="%.10g")
    schedule = read_json(args.schedule) if args.schedule else None
    m = mixed_table(summaries, t)
    text = to_latex(t, ctx, schedule, m)
    if args.mixed_csv:
        write_csv(args.mixed_csv, m, float_format="%.10g")
    text += mixed_latex(m, ctx)
    if args.engine_points:
        text += measured_latex(args.engine_points, ctx)
    write_text(args.output, text)


__all__ = ["SPEC", "METHODS", "add_arguments", "build"]


def finding(csv) -> str:
    """What choosing k by batch size gains where it can (mixed batch sizes, ``results/simulator/<set>/today/mixed.csv``
    beside the run's figures) and how little suffix decoding and the schedules close of the gap at B = 1."""
    from pathlib import Path

    csv = Path(csv)
    subject = csv.stem.split("-", 1)[1]
    mixed = csv.parent.parent / "results" / "simulator" / subject / "today" / "mixed.csv"
    if not mixed.exists():
        return ""
    m = pd.read_csv(mixed)
    if m.empty:
        return ""
    best = m[["ngram_schedule_closed", "eagle_schedule_closed"]].max(axis=1)
    honest = m[["ngram_schedule_closed_honest", "eagle_schedule_closed_honest"]].max(axis=1)
    text = (f"On mixed batch sizes ({m['batch_sizes'].iloc[0]}), choosing k by batch size closes "
            f"{100 * best.min():.0f}-{100 * best.max():.0f} % of the gap between the best single fixed k and the oracle "
            f"over the {len(m)} datasets")
    if honest.notna().any():
        text += (f" ({100 * honest.min():.0f}-{100 * honest.max():.0f} % against Oracle Combine charged both "
                 "drafters)")
    return text + ("; at any one batch size an n-gram or EAGLE schedule is a fixed k of the same candidates and closes "
                   "nothing beyond them by construction.")
