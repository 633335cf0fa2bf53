"""Fig. 10: simulated speedup of n-gram and EAGLE with a fixed k or an oracle k, per dataset."""

from __future__ import annotations

import matplotlib.pyplot as plt

from . import FigureSpec, TraceContext
from . import style
from ._sim import bs_axis, load_summaries, paper_values, plot_policy, series

SPEC = FigureSpec(
    name="fig10_sim_speedup",
    kind="figure",
    title="Simulated speedup: fixed k versus an oracle",
    paper_ref="Fig. 10",
    caption=(
        "Speedup over no speculation, simulated from the released traces ({subject_label}) with the authors' "
        "H100 cost model (paper mode: 300 requests drawn with seed 42, a batch is B copies of one request). "
        "Top: n-gram, bottom: EAGLE; k = draft tokens per step; Oracle = verify exactly the tokens that will "
        "be accepted. Bands: 95 % bootstrap intervals over the 300 drawn requests (how much another draw of "
        "requests would move a value; the paper's values are computed on the same draw). Black rings: the paper's "
        "values (digitised from its figure, paper/claims.yaml)."
    ),
    paper_statement=(
        "Even an oracle that verifies only the tokens that will be accepted leaves a large gap above any fixed "
        "k: for n-gram on InstructCoder at batch size 1 about 2.75x against about 2.1x for the best fixed k "
        "(k = 5), and the gap widens with the batch size, where wasted verification costs more."
    ),
    data="simulator on released traces",
    sources=(
        "results/simulator/{subject}/paper/<dataset>.csv",
    ),
)

PROPOSERS = ("ngram", "eagle")
POLICIES = ("fixed-1", "fixed-3", "fixed-5", "oracle")


def add_arguments(p) -> None:
    p.add_argument("--summaries", nargs="+", required=True, help="paper-mode summary CSVs (one per dataset)")
    p.add_argument("--claims", help="paper/claims.yaml: draw the paper's values as rings")


def build(args, ctx: TraceContext) -> None:
    style.apply()
    df = load_summaries(args.summaries)
    paper = paper_values(args.claims, ctx.subject)
    datasets = list(ctx.datasets)
    fig, axes = plt.subplots(len(PROPOSERS), len(datasets), figsize=(style.FULL_WIDTH, 3.6), squeeze=False,
                             constrained_layout=True)
    for i, prop in enumerate(PROPOSERS):
        for j, ds in enumerate(datasets):
            ax = axes[i][j]
            for pol in POLICIES:
                s = series(df, ds, prop, pol)
                if s.empty:
                    continue
                plot_policy(ax, s, pol)
                pts = [(b, paper[k]) for b in s["batch_size"]
                       if (k := f"sim.{ctx.subject}.{ds}.{prop}.{pol}.b{b}") in paper]
                if pts:
                    ax.scatter(*zip(*pts), s=28, facecolors="none", edgecolors="black", linewidths=0.6, zorder=5,
                               label="paper" if pol == "oracle" else None)
            bs_axis(ax, sorted(df["batch_size"].unique()))
            style.panel_title(ax, f"{'n-gram' if prop == 'ngram' else 'EAGLE'}, {ctx.dataset_label(ds)}")
            if i == len(PROPOSERS) - 1:
                ax.set_xlabel("Batch size")
            if j == 0:
                ax.set_ylabel("Speedup")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=len(labels), frameon=False)
    style.save_pdf(fig, args.output)
