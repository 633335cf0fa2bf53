"""Figure: the paper's question on today's engines, per dataset: k by batch size, suffix decoding, the oracles."""

from __future__ import annotations


from . import FigureSpec, TraceContext
from . import style
from ..analysis.today import gap_table
from ._sim import band, bs_axis, load_summaries

SPEC = FigureSpec(
    name="fig_today",
    kind="figure",
    title="The paper's question on today's engines",
    paper_ref="Figs. 10, 12; vLLM 0.34",
    caption=(
        "Simulated speedup ({subject_label}, paper mode, the released traces and the paper's H100 cost model) of "
        "what current vLLM adds, per dataset and batch size: k by batch size (vLLM's "
        "num_speculative_tokens_per_batch_size, each dataset with the schedule chosen on the other datasets) for "
        "n-gram and EAGLE; suffix decoding (traces recomputed from the tokens: each request's own prompt and "
        "output, longest match, frequency-voted draft; no cross-request tree) at k = 3 and with k by batch size; "
        "the online adaptive n-gram/EAGLE policy; against the paper's best fixed k (grey; n-gram or EAGLE, "
        "k = 1, 3, 5), the best fixed k over the same candidates the schedules choose from (grey, dotted; "
        "k = 1..20: against it a schedule gets no credit for a larger k alone) and the oracles "
        "(Oracle Combine of n-gram and EAGLE, and of n-gram, EAGLE and suffix). Bands: 95 % bootstrap intervals "
        "over the drawn requests of both best fixed k, the three k-by-batch-size lines and Oracle Combine with "
        "suffix (tab_today's CSV has every line's)."
    ),
    paper_statement=(
        "The paper's conclusions were drawn on vLLM 0.10.1.1 with one fixed k: no fixed k comes close to the "
        "oracle, the gap widens with the batch size, and Oracle Combine points at a large unused potential. "
        "vLLM has since added k by batch size and suffix decoding."
    ),
    data="simulator on released traces",
    sources=(
        "results/simulator/{subject}/paper/<dataset>.csv",
        "results/simulator/{subject}/today/<dataset>.csv",
        "results/simulator/{subject}/today/<dataset>.suffix.csv",
        "results/simulator/{subject}/today/kgrid/<dataset>.csv",
        "results/simulator/{subject}/variants/<variant>/<dataset>.csv",
    ),
)

#: gap-table column -> (colour, line style, marker, label)
LINES = {
    "best_fixed": ("#7f7f7f", "-", "s", "best fixed k (paper)"),
    "best_fixed_wide": ("#7f7f7f", ":", "s", "best fixed k (same k as the schedules)"),
    "eagle_k3": (style.METHOD_COLORS["eagle"], "--", "d", "EAGLE, k=3"),
    "ngram_schedule": (style.METHOD_COLORS["ngram"], "-", "o", "n-gram, k by B"),
    "eagle_schedule": (style.METHOD_COLORS["eagle"], "-", "D", "EAGLE, k by B"),
    "suffix_k3": (style.METHOD_COLORS["suffix"], "--", "v", "suffix, k=3"),
    "suffix_schedule": (style.METHOD_COLORS["suffix"], "-", "^", "suffix, k by B"),
    "adaptive": ("#6a3d9a", "-.", "P", "adaptive (online)"),
    "combined_oracle": ("#d62728", ":", "*", "Oracle Combine (n-gram, EAGLE)"),
    "combined3_oracle": ("#d62728", "-", "*", "Oracle Combine (+ suffix)"),
}
#: lines drawn with their interval band (the comparison the table states: best fixed k, k by B, the oracle)
BANDS = ("best_fixed", "best_fixed_wide", "ngram_schedule", "eagle_schedule", "suffix_schedule", "combined3_oracle")


def add_arguments(p) -> None:
    p.add_argument("--summaries", nargs="+", required=True,
                   help="paper-mode, variant (adaptive) and today summaries of specrepro simulate")


def build(args, ctx: TraceContext) -> None:
    style.apply()
    t = gap_table(load_summaries(args.summaries), ctx.datasets)
    datasets = [d for d in ctx.datasets if d in set(t["dataset"])]
    fig, axes = style.dataset_row(len(datasets), 2.6)
    for j, ds in enumerate(datasets):
        ax = axes[j]
        s = t[t["dataset"] == ds].sort_values("batch_size")
        for key, (color, ls, marker, label) in LINES.items():
            if key in s and s[key].notna().any():
                ax.plot(s["batch_size"], s[key], color=color, linestyle=ls, marker=marker, markersize=3.5,
                        label=label)
                if key in BANDS and f"{key}_ci_low" in s:
                    band(ax, s[["batch_size"]].assign(ci_low=s[f"{key}_ci_low"], ci_high=s[f"{key}_ci_high"]), color,
                         alpha=0.12)
        bs_axis(ax, sorted(t["batch_size"].unique()))
        ax.axhline(1.0, color="#444444", linewidth=0.5)
        style.panel_title(ax, ctx.dataset_label(ds))
        ax.set_xlabel("Batch size")
        if j == 0:
            ax.set_ylabel("Speedup")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=4, frameon=False)
    style.save_pdf(fig, args.output)
