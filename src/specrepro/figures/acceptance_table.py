"""Table: acceptance statistics per dataset x proposer, and the share of positions each proposer wins."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import FigureSpec, TraceContext
from ..analysis import acceptance
from ..core.io import write_csv, write_json, write_text
from ..core.latex import tex_breakable, tex_escape
from ..core.uncertainty import MIN_INTERVAL_REQUESTS, printable_interval, too_few_text
from ._data import load_concat

SPEC = FigureSpec(
    name="tab_acceptance_stats",
    kind="table",
    title="Acceptance statistics",
    paper_ref="Figs. 5-7, 11",
    caption=(
        "Tokens per verification step over all output positions ({subject_label}): mean, median and 90th "
        "percentile; the median over requests of the per-request mean; and the share of index-paired "
        "positions where this proposer produces strictly more tokens than every other proposer (with two proposers "
        "the rest are ties; with three, ties or another proposer ahead). In "
        "brackets: 95 % bootstrap intervals over requests (whole requests resampled; none over fewer than "
        f"{MIN_INTERVAL_REQUESTS} requests, and the note under the table says so; the CSV has every statistic's)."
    ),
    paper_statement=(
        "n-gram's acceptance is bimodal (mostly 1, sometimes very long) while EAGLE's is steadier; each "
        "proposer wins at a sizeable share of positions, which is what makes combining them attractive."
    ),
    data="released traces",
)


def add_arguments(p) -> None:
    p.add_argument("--positions", nargs="+", required=True)
    p.add_argument("--csv", required=True, help="the same table as CSV")
    p.add_argument("--metrics", required=True, help="measured values for the claims table (JSON)")


def _ci(row, col: str, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    """`` [low, high]`` in small type; nothing where the row has none or rests on fewer than MIN_INTERVAL_REQUESTS
    requests (a bootstrap over 2 requests printed 1.00 [1.00, 1.00]: no 95 % interval)."""
    lo, hi = getattr(row, f"{col}_ci_low", float("nan")), getattr(row, f"{col}_ci_high", float("nan"))
    lo, hi = printable_interval(lo, hi, getattr(row, "requests", None))
    if pd.isna(lo) or pd.isna(hi):
        return ""
    return " {\\scriptsize [" + fmt.format(scale * lo) + ", " + fmt.format(scale * hi) + "]}"


def few_requests_note(stats: pd.DataFrame) -> str:
    """One sentence under the table where some rows rest on too few requests for a 95 % interval (none printed)."""
    text = too_few_text(stats["requests"], "dataset and proposer", "rows") if "requests" in stats else ""
    if not text:
        return ""
    return ("\\par\\smallskip\\noindent{\\footnotesize " + text.replace("%", "\\%")
            + ", none shown; the CSV keeps the bootstrap's columns.}\n")


def to_latex(stats: pd.DataFrame, ctx: TraceContext) -> str:
    """A booktabs tabular; numbers rounded for reading, the CSV keeps full precision."""
    lines = [
        # dataset and proposer labels wrap (a CPU run's are long: "code editing (InstructCoder-shaped)")
        r"\begin{tabular}{@{}>{\raggedright\arraybackslash}p{0.15\textwidth}>{\raggedright\arraybackslash}p{0.13\textwidth}"
        r"rrrrrrr@{}}",
        r"\toprule",
        r"Dataset & Proposer & Requests & Positions & Mean & Median & P90 & Req.\ median & Wins \\",
        r"\midrule",
    ]
    order = {d: i for i, d in enumerate(ctx.datasets)}
    porder = {p: i for i, p in enumerate(ctx.proposers)}
    stats = stats.assign(_d=stats["dataset"].map(order), _p=stats["proposer"].map(porder))
    stats = stats.sort_values(["_d", "_p"], kind="mergesort")
    prev = None
    for row in stats.itertuples(index=False):
        if prev is not None and row.dataset != prev:
            lines.append(r"\addlinespace")
        ds = tex_escape(ctx.dataset_label(row.dataset)) if row.dataset != prev else ""
        prev = row.dataset
        wins = "--" if pd.isna(row.wins) else f"{100 * row.wins:.1f}\\%" + _ci(row, "wins", 100, "{:.1f}")
        lines.append(
            f"{ds} & {tex_escape(ctx.proposer_label(row.proposer))} & {row.requests:d} & {row.positions:,d} & "
            f"{row.mean:.2f}{_ci(row, 'mean')} & {row.median:.1f} & {row.p90:.1f} & "
            f"{row.request_mean_median:.2f}{_ci(row, 'request_mean_median')} & {wins} \\\\"
        )
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def build(args, ctx: TraceContext) -> None:
    positions = load_concat(args.positions)
    positions = positions[positions["dataset"].isin(list(ctx.datasets))]
    stats = acceptance.acceptance_stats(positions, list(ctx.proposers))
    write_json(args.metrics, acceptance.metrics(positions, stats, ctx.subject))
    capped = acceptance.capped_outputs(positions, list(ctx.proposers))
    stats = stats.merge(capped, on=["dataset", "proposer"], how="left")
    write_csv(args.csv, stats)
    write_text(args.output, to_latex(stats, ctx) + few_requests_note(stats) + capped_note(stats, ctx, Path(args.csv).name))


def capped_note(stats: pd.DataFrame, ctx: TraceContext, csv_name: str = "") -> str:
    """One sentence on the outputs cut off at the generation cap, where any are (their positions weigh in every
    statistic above): per dataset, the distinct requests capped in any trace, and per proposer's trace its capped
    outputs, the share of its positions they hold and its mean without them (the traces need not cap the same
    requests). ``csv_name``: the table's CSV under ``figures/``, which the sentence names."""
    capped = stats.get("capped_requests", pd.Series(0, index=stats.index)).fillna(0)
    if not (capped > 0).any():
        return ""
    parts, total = [], 0
    porder = {p: i for i, p in enumerate(ctx.proposers)}
    for ds in [d for d in ctx.datasets if (capped[stats["dataset"] == d] > 0).any()]:
        g = stats[stats["dataset"] == ds]
        g = g.assign(_p=g["proposer"].map(porder)).sort_values("_p", kind="mergesort")
        n_any = (int(g["capped_requests_any"].max()) if "capped_requests_any" in g and g["capped_requests_any"].notna().any()
                 else None)
        total += n_any or 0
        per = ", ".join(
            f"{tex_escape(ctx.proposer_label(r.proposer))}'s trace {int(r.capped_requests)} outputs "
            f"({100 * r.capped_share:.0f}\\% of its positions; mean {r.mean:.2f} $\\to$ {r.mean_uncapped:.2f} without them)"
            for r in g.itertuples(index=False))
        head = f"{tex_escape(ctx.dataset_label(ds))}" + (f", {n_any} requests" if n_any is not None else "")
        parts.append(f"{head}: {per}")
    cols = "capped\\_requests, capped\\_share, mean\\_uncapped, capped\\_requests\\_any"
    where = f"\\texttt{{{tex_breakable('figures/' + csv_name)}}}" if csv_name else "the CSV"
    lead = f"{total} requests have" if total else "Some requests have"
    return ("\\par\\smallskip\\noindent{\\footnotesize " + f"{lead} an output that stops at the generation cap of "
            f"{acceptance.OUTPUT_CAP:,} tokens (cut off, not finished) in at least one proposer's trace, and those "
            "outputs weigh in every statistic above by their length; the capped outputs of each proposer's trace: "
            + "; ".join(parts) + f" (columns {cols} of {where}).}}\n")
