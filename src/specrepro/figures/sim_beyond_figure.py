"""Figure: beyond the paper, per dataset: the upper bound under honest accounting and realistic batching."""

from __future__ import annotations


from . import FigureSpec, TraceContext
from . import style
from ._beyond import comparison
from ._sim import bs_axis, load_summaries

SPEC = FigureSpec(
    name="fig_sim_beyond",
    kind="figure",
    title="Beyond the paper: the upper bound under honest accounting",
    paper_ref="Figs. 10, 12, extended",
    caption=(
        "Simulated speedup ({subject_label}) of Oracle Combine as in the paper (red), charged the winner's or "
        "both proposers' drafting cost, on equal-length trace pairs only, with continuous batching (dashed); "
        "the online adaptive policy (purple); and the best fixed k of either proposer (grey)."
    ),
    paper_statement=(
        "The paper's Oracle Combine bound (4.9x on InstructCoder at batch size 1) assumes free switching, "
        "n-gram drafting cost and index-paired traces."
    ),
    data="simulator on released traces",
    sources=(
        "results/simulator/{subject}/paper/<dataset>.csv",
        "results/simulator/{subject}/variants/<variant>/<dataset>.csv",
    ),
)

LINES = {
    "combine": ("#d62728", "-", "*", "Oracle Combine (paper)"),
    "combine_winner": ("#e377c2", "-", "v", "winner's drafting cost"),
    "combine_both": ("#8c564b", "-", "^", "both draft"),
    "combine_equal": ("#ff9896", ":", "o", "equal-length pairs"),
    "cont_combine": ("#d62728", "--", "x", "continuous batching"),
    "adaptive": ("#6a3d9a", "-.", "P", "adaptive (online)"),
    "fixed_best": ("#7f7f7f", "-", "s", "best fixed k"),
}


def add_arguments(p) -> None:
    p.add_argument("--summaries", nargs="+", required=True)


def build(args, ctx: TraceContext) -> None:
    style.apply()
    t = comparison(load_summaries(args.summaries), ctx.datasets)
    datasets = [d for d in ctx.datasets if d in set(t["dataset"])]
    fig, axes = style.dataset_row(len(datasets), 2.4)
    for j, ds in enumerate(datasets):
        ax = axes[j]
        for key, (color, ls, marker, label) in LINES.items():
            s = t[(t["dataset"] == ds) & (t["row"] == key)].sort_values("batch_size")
            if len(s):
                ax.plot(s["batch_size"], s["speedup"], color=color, linestyle=ls, marker=marker, markersize=3.5,
                        label=label)
        bs_axis(ax, sorted(t["batch_size"].unique()))
        style.panel_title(ax, ctx.dataset_label(ds))
        ax.set_xlabel("Batch size")
        if j == 0:
            ax.set_ylabel("Speedup")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=4, frameon=False)
    style.save_pdf(fig, args.output)
