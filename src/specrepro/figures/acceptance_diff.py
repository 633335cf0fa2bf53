"""Fig. 11 style: per-position difference in tokens produced, n-gram minus EAGLE."""

from __future__ import annotations

import matplotlib.pyplot as plt

from . import FigureSpec, TraceContext
from . import style
from ._data import length_order, load_concat, position_matrix

SPEC = FigureSpec(
    name="fig11_acceptance_diff",
    kind="figure",
    title="Where n-gram beats EAGLE",
    paper_ref="Fig. 11",
    caption=(
        "Difference in tokens per verification step, {first_label} minus {second_label}, at each output "
        "position ({subject_label}); blue: {first_label} produces more, red: {second_label} produces more. "
        "Positions are paired by index, as Oracle Combine pairs them; white where the two produce the same number "
        "(a tie) or either trace has no value. Rows sorted by output length, output positions 0 to {max_position} "
        "(later ones not drawn); colour capped at +/-{color_max}."
    ),
    paper_statement=(
        "Neither proposer dominates: n-gram wins in long runs of positions (copied code, quoted text) and "
        "EAGLE wins in between, so choosing the proposer per position could beat either one alone."
    ),
    data="released traces",
    sources=(
        "results/traces/{subject}/<dataset>.positions.parquet",
        "results/traces/{subject}/<dataset>.requests.parquet",
    ),
)


def add_arguments(p) -> None:
    p.add_argument("--positions", nargs="+", required=True)
    p.add_argument("--requests", nargs="+", required=True)


def build(args, ctx: TraceContext) -> None:
    style.apply()
    positions = load_concat(args.positions)
    requests = load_concat(args.requests)
    first, second = list(ctx.proposers)[:2]
    max_pos = int(ctx.params.get("heatmap_max_position", 512))
    vmax = int(ctx.params.get("heatmap_color_max", 10))
    cmap = plt.get_cmap("bwr_r").copy()
    cmap.set_bad("white")
    datasets = list(ctx.datasets)
    fig, axes = style.dataset_row(len(datasets), 1.9)
    image = None
    for j, ds in enumerate(datasets):
        ax = axes[j]
        rows = length_order(requests, ds)
        diff = position_matrix(positions, ds, first, rows, max_pos) - position_matrix(positions, ds, second, rows, max_pos)
        image = ax.imshow(diff, aspect="auto", cmap=cmap, vmin=-vmax, vmax=vmax, interpolation="nearest",
                          extent=(0, max_pos, len(rows), 0))
        style.panel_title(ax, ctx.dataset_label(ds))
        ax.set_xlabel("Generated token position")
        if j == 0:
            ax.set_ylabel("Request (by length)")
    cb = fig.colorbar(image, ax=axes, fraction=0.025, pad=0.01)
    cb.set_label(f"{ctx.proposer_label(first)} $-$ {ctx.proposer_label(second)} (tokens)")
    style.save_pdf(fig, args.output)
