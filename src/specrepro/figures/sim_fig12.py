"""Fig. 12: Oracle Combine (n-gram or EAGLE per position) against the single-method oracles and fixed k."""

from __future__ import annotations


from . import FigureSpec, TraceContext
from . import style
from ._sim import POLICY_STYLE, PROPOSER_STYLE, band, bs_axis, load_summaries, paper_values, series

SPEC = FigureSpec(
    name="fig12_oracle_combine",
    kind="figure",
    title="Oracle Combine: the best proposer at every position",
    paper_ref="Fig. 12",
    caption=(
        "Simulated speedup ({subject_label}, paper mode) of Oracle Combine, which verifies at each position the "
        "longer of the n-gram and EAGLE acceptances (positions paired by index) at n-gram drafting cost, against "
        "each proposer's oracle (dotted) and fixed k = 1, 3, 5 (solid; circle, square, diamond). Band: 95 % "
        "bootstrap interval over the drawn requests of Oracle Combine (the other curves' are in the summary CSVs and "
        "Fig. 10). Black rings: the paper's Oracle Combine values (digitised, paper/claims.yaml)."
    ),
    paper_statement=(
        "Choosing the better proposer at every position would reach 4.9x on InstructCoder at batch size 1 "
        "(ShareGPT 3.11x, GSM8K 2.80x, CNN/DailyMail 2.97x), far above either single-method oracle (2.73x "
        "on InstructCoder), falling to about 1.9x at batch size 128."
    ),
    data="simulator on released traces",
    sources=(
        "results/simulator/{subject}/paper/<dataset>.csv",
    ),
)


def add_arguments(p) -> None:
    p.add_argument("--summaries", nargs="+", required=True, help="paper-mode summary CSVs (one per dataset)")
    p.add_argument("--claims", help="paper/claims.yaml: draw the paper's values as rings")


def build(args, ctx: TraceContext) -> None:
    style.apply()
    df = load_summaries(args.summaries)
    paper = paper_values(args.claims, ctx.subject)
    datasets = list(ctx.datasets)
    fig, axes = style.dataset_row(len(datasets), 2.4)
    for j, ds in enumerate(datasets):
        ax = axes[j]
        for prop in ("ngram", "eagle"):
            plabel, color = PROPOSER_STYLE[prop]
            for pol in ("fixed-1", "fixed-3", "fixed-5", "oracle"):
                s = series(df, ds, prop, pol)
                if s.empty:
                    continue
                klabel, _, marker, ls = POLICY_STYLE[pol]
                ax.plot(s["batch_size"], s["speedup"], color=color, marker=marker, linestyle=ls,
                        markersize=6 if marker == "*" else 3, alpha=1.0 if pol == "oracle" else 0.7,
                        label=f"{klabel} {plabel}")
        s = series(df, ds, "combined", "oracle")
        plabel, color = PROPOSER_STYLE["combined"]
        ax.plot(s["batch_size"], s["speedup"], color=color, marker="*", linestyle=":", markersize=7, label=plabel)
        band(ax, s, color)
        pts = [(b, paper[k]) for b in s["batch_size"] if (k := f"sim.{ctx.subject}.{ds}.combined.oracle.b{b}") in paper]
        if pts:
            ax.scatter(*zip(*pts), s=34, facecolors="none", edgecolors="black", linewidths=0.6, zorder=5,
                       label="paper (Combine)")
        bs_axis(ax, sorted(df["batch_size"].unique()))
        style.panel_title(ax, ctx.dataset_label(ds))
        ax.set_xlabel("Batch size")
        if j == 0:
            ax.set_ylabel("Speedup")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=6, frameon=False)
    style.save_pdf(fig, args.output)
