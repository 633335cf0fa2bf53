"""Fig. 5 style: tokens produced per verification step at every output position."""

from __future__ import annotations

import matplotlib.pyplot as plt

from . import FigureSpec, TraceContext
from . import style
from ._data import length_order, load_concat, position_matrix

SPEC = FigureSpec(
    name="fig05_acceptance_heatmap",
    kind="figure",
    title="Per-position acceptance",
    paper_ref="Fig. 5",
    caption=(
        "Tokens one verification step would produce at each generated-token position ({subject_label}). "
        "Rows are requests sorted by output length (shortest on top), columns are output positions 0 to "
        "{max_position} (later positions are not drawn; the acceptance table counts them all); white-yellow beyond a "
        "request's end. Colour is capped at {color_max} tokens (traces allow up to 21)."
    ),
    paper_statement=(
        "Acceptance is far from uniform: n-gram drafts are accepted in long bursts, on most code-editing requests "
        "and on ShareGPT in rarer bursts between long stretches where nothing is accepted, while EAGLE accepts a few "
        "tokens almost everywhere."
    ),
    data="released traces",
    sources=(
        "results/traces/{subject}/<dataset>.positions.parquet",
        "results/traces/{subject}/<dataset>.requests.parquet",
    ),
)


def add_arguments(p) -> None:
    p.add_argument("--positions", nargs="+", required=True, help="positions tables (one per dataset)")
    p.add_argument("--requests", nargs="+", required=True, help="requests tables (one per dataset)")


def build(args, ctx: TraceContext) -> None:
    style.apply()
    positions = load_concat(args.positions)
    requests = load_concat(args.requests)
    max_pos = int(ctx.params.get("heatmap_max_position", 512))
    vmax = int(ctx.params.get("heatmap_color_max", 10))
    proposers = list(ctx.proposers)
    datasets = list(ctx.datasets)
    cmap = plt.get_cmap("YlGnBu").copy()
    cmap.set_bad(cmap(0.0))
    fig, axes = plt.subplots(
        len(proposers), len(datasets), figsize=(style.FULL_WIDTH, 1.55 * len(proposers) + 0.2), squeeze=False,
        constrained_layout=True,
    )
    image = None
    for i, prop in enumerate(proposers):
        for j, ds in enumerate(datasets):
            ax = axes[i][j]
            rows = length_order(requests, ds)
            m = position_matrix(positions, ds, prop, rows, max_pos)
            image = ax.imshow(
                m, aspect="auto", cmap=cmap, vmin=0, vmax=vmax, interpolation="nearest",
                extent=(0, max_pos, len(rows), 0),
            )
            style.panel_title(ax, f"{ctx.dataset_label(ds)}, {ctx.proposer_label(prop)}")
            if i == len(proposers) - 1:
                ax.set_xlabel("Generated token position")
            if j == 0:
                ax.set_ylabel("Request (by length)")
        cb = fig.colorbar(image, ax=list(axes[i]), fraction=0.025, pad=0.01)
        cb.set_label("Tokens per step")
    style.save_pdf(fig, args.output)
