"""Fig. 10 on one experiment's own traces: each method's speedup with a fixed k (1, 3, 5) against the oracle.

Input: ``specrepro engine-simulate``'s summary (:mod:`specrepro.analysis.enginesim`) and the experiment's closed-loop
summary, whose error the figure states above its panels. Rows: the experiment's methods; columns: its datasets.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from . import FigureSpec, TraceContext
from . import style
from ._enginesim import DRAFTED_HELP, error_statement, load, methods, proposer_label, wrap_label
from ._measured import load_bounds, plot_measured
from ._sim import bs_axis, plot_policy, series

SPEC = FigureSpec(
    name="fig10_sim_engine",
    kind="figure",
    title="Simulated speedup on this run's traces: fixed k versus an oracle",
    paper_ref="Fig. 10",
    caption=(
        "Redrawn for {subject_label}: speedup over no speculation simulated in paper mode (B copies of a request; "
        "every request of the trace set) from this run's own vLLM traces (k = 20, one token kept per step) with this "
        "experiment's own cost model, at its batch sizes; one row per method (each drafter with its own fitted "
        "drafting cost), fixed k = 1, 3, 5 against the oracle k. Bands: 95 % bootstrap intervals over the requests "
        "(none over fewer than 8 requests: the note above the figure says so). The lines above the panels give the "
        "simulator's error against this run's measured speedups, its sign (mean, simulated / measured - 1) and its "
        "ordering beside always guessing the most common measured order (closed loop, table and figure before this "
        "one): read the bounds with it. Where the run measured the oracle inside vLLM (the plugin's oracle drafter "
        "proposing the no-SD output's next tokens, as many as the trace accepts, capped at its k), diamonds show that"
        " upper bound, measured (filled; its 95 % interval where it rests on at least 8 requests) beside the "
        "simulator's value for the same requests and B charged as the engine pays (open: the drafter's whole draft "
        "every step)."
    ),
    paper_statement=(
        "Even an oracle that verifies only the tokens that will be accepted leaves a large gap above any fixed "
        "k, and the gap widens with the batch size (Llama-3.1-8B, H100; shown here for this run's model)."
    ),
    data="simulator on this run's engine traces",
    sources=(
        "results/simulator/{subject}/upper_bounds.csv",
        "results/simulator/{subject}/closed_loop.json",
        "results/simulator/{subject}/measured_bounds.csv",
    ),
)

POLICIES = ("fixed-1", "fixed-3", "fixed-5", "oracle")


def add_arguments(p) -> None:
    p.add_argument("--summary", required=True, help="results/simulator/engine-<exp>/upper_bounds.csv")
    p.add_argument("--measured-bounds", help="results/simulator/engine-<exp>/measured_bounds.csv: vLLM's oracle "
                                             "drafters beside the simulated bound (specrepro engine-drafted)")
    p.add_argument("--closed-loop", required=True, help="results/simulator/engine-<exp>/closed_loop.json")
    p.add_argument("--drafted", help=DRAFTED_HELP)


def build(args, ctx: TraceContext) -> None:
    style.apply()
    df = load(args.summary)
    measured = load_bounds(getattr(args, "measured_bounds", None))
    props = methods(df)
    datasets = [d for d in ctx.datasets if d in set(df["dataset"])]
    fig, axes = plt.subplots(len(props), len(datasets), figsize=(style.FULL_WIDTH, 1.7 * len(props) + 0.7),
                             squeeze=False, constrained_layout=True)
    for i, prop in enumerate(props):
        for j, ds in enumerate(datasets):
            ax = axes[i][j]
            for pol in POLICIES:
                s = series(df, ds, prop, pol)
                if s.empty:
                    continue
                plot_policy(ax, s, pol)
            plot_measured(ax, measured, ds, f"oracle-{prop}", "black")
            bs_axis(ax, sorted(df["batch_size"].unique()))
            if i == 0:
                ax.set_title(wrap_label(ctx.dataset_label(ds)))
            if i == len(props) - 1:
                ax.set_xlabel("Batch size")
            if j == 0:
                ax.set_ylabel(f"{proposer_label(prop)}\nspeedup")
    seen = {}
    for ax in axes.ravel():  # the measured bound may be on some panels only
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    handles, labels = list(seen.values()), list(seen)
    fig.suptitle(error_statement(args.closed_loop, sep=";\n", drafted=args.drafted), fontsize=6.5)
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), frameon=False)
    style.save_pdf(fig, args.output)
