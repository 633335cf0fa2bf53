"""Fig. 12 on one experiment's own traces: Oracle Combine of all its proposers against each method's oracle and
best fixed k.

Input: ``specrepro engine-simulate``'s summary (:mod:`specrepro.analysis.enginesim`) and the closed-loop summary (its
error, stated above the panels). One panel per dataset.
"""

from __future__ import annotations

from . import FigureSpec, TraceContext
from . import style
from ._enginesim import DRAFTED_HELP, error_statement, load, methods, proposer_label, wrap_label
from ._measured import load_bounds, plot_measured
from ._sim import band, bs_axis, series
from ..analysis.enginesim import best_fixed

SPEC = FigureSpec(
    name="fig12_sim_engine",
    kind="figure",
    title="Oracle Combine on this run's traces",
    paper_ref="Fig. 12",
    caption=(
        "Redrawn for {subject_label} (paper mode, this run's traces and this experiment's cost model): Oracle "
        "Combine, which verifies at every position the longest acceptance of all the experiment's proposers at "
        "n-gram's drafting cost (the paper's accounting), against each method's oracle (dotted) and the best of its "
        "fixed k = 1, 3, 5 at each batch size (solid). Band: 95 % bootstrap interval of Oracle Combine (none over "
        "fewer than 8 requests). The lines above the panels give the simulator's error against this run's measured "
        "speedups, its sign and its ordering beside always guessing the most common measured order. Where the run "
        "measured Oracle Combine inside vLLM (the plugin's oracle drafter with the better of n-gram's and the model "
        "drafter's acceptance at each position, capped at its k, both drafters run every step), diamonds show that "
        "upper bound, measured (filled; its 95 % interval where it rests on at least 8 requests) beside the "
        "simulator's value for the same requests and B charged as the engine pays (open)."
    ),
    paper_statement=(
        "Choosing the better proposer at every position would reach far above either single-method oracle (4.9x on "
        "InstructCoder at batch size 1 for Llama-3.1-8B), falling as the batch grows."
    ),
    data="simulator on this run's engine traces",
    sources=(
        "results/simulator/{subject}/upper_bounds.csv",
        "results/simulator/{subject}/closed_loop.json",
        "results/simulator/{subject}/measured_bounds.csv",
    ),
)


def add_arguments(p) -> None:
    p.add_argument("--summary", required=True)
    p.add_argument("--measured-bounds", help="results/simulator/engine-<exp>/measured_bounds.csv: vLLM's oracle "
                                             "drafters beside the simulated bound (specrepro engine-drafted)")
    p.add_argument("--closed-loop", required=True)
    p.add_argument("--drafted", help=DRAFTED_HELP)


def build(args, ctx: TraceContext) -> None:
    style.apply()
    df = load(args.summary)
    measured = load_bounds(getattr(args, "measured_bounds", None))
    props = methods(df)
    best = best_fixed(df)
    datasets = [d for d in ctx.datasets if d in set(df["dataset"])]
    fig, axes = style.dataset_row(len(datasets), 2.5)
    for j, ds in enumerate(datasets):
        ax = axes[j]
        for prop in props:
            color = style.method_color(prop)
            s = series(df, ds, prop, "oracle")
            ax.plot(s["batch_size"], s["speedup"], color=color, marker="*", linestyle=":", markersize=5,
                    label=f"Oracle {proposer_label(prop)}")
            b = best[(best["dataset"] == ds) & (best["proposer"] == prop)].sort_values("batch_size")
            ax.plot(b["batch_size"], b["best_fixed"], color=color, marker="o", linestyle="-", markersize=3, alpha=0.8,
                    label=f"best fixed k {proposer_label(prop)}")
        s = series(df, ds, "combined", "oracle")
        if len(s):
            c = style.method_color("combined")
            ax.plot(s["batch_size"], s["speedup"], color=c, marker="*", linestyle=":", markersize=7,
                    label=proposer_label("combined"))
            band(ax, s, c)
        plot_measured(ax, measured, ds, "oracle-combine", style.method_color("combined"))
        bs_axis(ax, sorted(df["batch_size"].unique()))
        ax.set_title(wrap_label(ctx.dataset_label(ds)))
        ax.set_xlabel("Batch size")
        if j == 0:
            ax.set_ylabel("Speedup")
    seen = {}
    for ax in axes:  # the measured bound may be on some panels only
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    handles, labels = list(seen.values()), list(seen)
    fig.suptitle(error_statement(args.closed_loop, sep=";\n", drafted=args.drafted), fontsize=6.5)
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 4), frameon=False)
    style.save_pdf(fig, args.output)
