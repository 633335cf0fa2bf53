"""Table: one experiment's simulated upper bounds and the beyond-paper policies, per dataset and batch size.

Input: ``specrepro engine-simulate``'s summary and schedules (:mod:`specrepro.analysis.enginesim`) and the closed-loop
summary. Per dataset and batch size: the best of the paper's fixed k (1, 3, 5) over all methods, the best k by
batch size (each dataset with the schedule chosen on the others), the best online adaptive policy, the best
single-method oracle and Oracle Combine of all proposers; the CSV has every simulated row.
"""

from __future__ import annotations

import pandas as pd

from . import FigureSpec, TraceContext
from ._enginesim import DRAFTED_HELP, error_statement, fmt, load, proposer_label
from ..analysis.enginesim import best_fixed
from ..core.io import read_json, write_csv, write_text
from ..core.latex import fit_width, tex_escape

SPEC = FigureSpec(
    name="tab_sim_engine",
    kind="table",
    title="Upper bounds and beyond-paper policies on this run's traces",
    paper_ref="Figs. 10, 12; beyond the paper",
    caption=(
        "Per dataset and batch size of {subject_label} (paper mode, this run's traces and cost model): the best of the "
        "paper's fixed k = 1, 3, 5 over the experiment's methods, the best k by batch size (vLLM's "
        "num_speculative_tokens_per_batch_size; each dataset with the schedule chosen on the other datasets), the best "
        "online adaptive policy (n-gram with one drafter), the best single-method oracle and Oracle Combine of all the "
        "experiment's proposers; in brackets the method (and k). The note gives the simulator's error against this "
        "run's measurements."
    ),
    paper_statement=(
        "A fixed k leaves much of the oracle's speedup unused, and combining proposers per position would reach "
        "further still; the paper shows this for Llama-3.1-8B on an H100."
    ),
    data="simulator on this run's engine traces",
)

COLUMNS = ["dataset", "batch_size", "best_fixed", "best_fixed_by", "k_by_batch_size", "k_by_batch_size_by",
           "adaptive", "adaptive_by", "best_oracle", "best_oracle_by", "combined_oracle"]


def add_arguments(p) -> None:
    p.add_argument("--summary", required=True)
    p.add_argument("--schedule", required=True)
    p.add_argument("--closed-loop", required=True)
    p.add_argument("--drafted", help=DRAFTED_HELP)
    p.add_argument("--csv", required=True)


def _best(df: pd.DataFrame, mask) -> tuple[float, str]:
    d = df[mask]
    if d.empty:
        return float("nan"), ""
    r = d.loc[d["speedup"].idxmax()]
    by = proposer_label(r["proposer"])
    if str(r["policy"]).startswith("fixed-"):
        by += f", k={r['policy'].split('-')[1]}"
    return float(r["speedup"]), by


def bounds_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, batch size): :data:`COLUMNS`."""
    single = ~df["proposer"].str.contains(r"\+") & (df["proposer"] != "combined")
    bf = best_fixed(df[single])
    rows = []
    for (ds, b), g in df.groupby(["dataset", "batch_size"], sort=False):
        gb = bf[(bf["dataset"] == ds) & (bf["batch_size"] == b)]
        top = gb.loc[gb["best_fixed"].idxmax()] if len(gb) else None
        sg = single.loc[g.index]
        ks, ks_by = _best(g, sg & (g["policy"] == "batch-schedule"))
        if ks == 1.0:  # exactly 1: every schedule chose k = 0 here (no speculation), whichever proposer it belongs to
            ks_by = "k = 0, no SD"
        ad, ad_by = _best(g, g["policy"] == "adaptive")
        orc, orc_by = _best(g, sg & (g["policy"] == "oracle"))
        comb, _ = _best(g, (g["proposer"] == "combined") & (g["policy"] == "oracle"))
        rows.append({"dataset": ds, "batch_size": int(b),
                     "best_fixed": float(top["best_fixed"]) if top is not None else float("nan"),
                     "best_fixed_by": (f"{proposer_label(top['proposer'])}, k={top['best_policy'].split('-')[1]}"
                                       if top is not None else ""),
                     "k_by_batch_size": ks, "k_by_batch_size_by": ks_by, "adaptive": ad, "adaptive_by": ad_by,
                     "best_oracle": orc, "best_oracle_by": orc_by, "combined_oracle": comb})
    return pd.DataFrame(rows, columns=COLUMNS)


def to_latex(t: pd.DataFrame, ctx: TraceContext, note: str) -> str:
    lines = [r"\setlength{\tabcolsep}{3pt}\begin{tabular}{@{}>{\raggedright\arraybackslash}p{0.15\textwidth}rlllll@{}}", r"\toprule",
             r"dataset & $B$ & best fixed $k$ & $k$ by $B$ & adaptive & best oracle & Oracle Combine \\", r"\midrule"]
    for r in t.itertuples(index=False):
        def cell(v, by):
            return f"{fmt(v)}" + (f" {{\\scriptsize ({tex_escape(by)})}}" if by else "")
        lines.append(f"{tex_escape(ctx.dataset_label(r.dataset))} & {r.batch_size} & {cell(r.best_fixed, r.best_fixed_by)} & "
                     f"{cell(r.k_by_batch_size, r.k_by_batch_size_by)} & {cell(r.adaptive, r.adaptive_by)} & "
                     f"{cell(r.best_oracle, r.best_oracle_by)} & {fmt(r.combined_oracle)} \\\\")
    lines = fit_width(lines + [r"\bottomrule", r"\end{tabular}"]) + ["", r"\smallskip",
              f"\\parbox{{\\textwidth}}{{\\footnotesize {tex_escape(note)}}}"]
    return "\n".join(lines) + "\n"


def build(args, ctx: TraceContext) -> None:
    df = load(args.summary)
    sched = read_json(args.schedule)
    t = bounds_table(df)
    order = {d: i for i, d in enumerate(ctx.datasets)}
    t = t.sort_values(["dataset", "batch_size"], key=lambda s: s.map(order) if s.name == "dataset" else s)
    note = (error_statement(args.closed_loop, drafted=args.drafted) + f" n-gram's match probability where its trace says 1 token: "
            f"{fmt(sched.get('ngram_match_prob'))} (from its trace job's undrafted positions).")
    for m, why in (sched.get("left_out") or {}).items():
        note += f" Left out: {m} ({why})."
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.6g")
    write_text(args.output, to_latex(t, ctx, note))


def finding(csv) -> str:
    """The experiment's own upper bound at its smallest batch size against its best fixed k (the table's CSV)."""
    t = pd.read_csv(csv)
    if t.empty or t["combined_oracle"].isna().all():
        return ""
    b = int(t["batch_size"].min())
    r = t[t["batch_size"] == b]
    ratio = r["combined_oracle"] / r["best_fixed"]
    return (f"On this run's own traces and cost model, Oracle Combine of all the experiment's proposers is "
            f"{ratio.min():.2f}-{ratio.max():.2f}x the best fixed k at B = {b} over {len(r)} datasets, a bound the "
            "closed loop above qualifies by the simulator's error against measured speedups.")
