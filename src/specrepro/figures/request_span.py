"""Fig. 7 style: distribution over requests of the mean tokens per verification step."""

from __future__ import annotations

import numpy as np

from . import FigureSpec, TraceContext
from . import style
from ..analysis.acceptance import BOX_PERCENTILES, request_means
from ._data import load_concat

SPEC = FigureSpec(
    name="fig07_request_span",
    kind="figure",
    title="Per-request mean acceptance length",
    paper_ref="Fig. 7",
    caption=(
        "Mean tokens per verification step of each request ({subject_label}), if the proposer may draft up "
        "to 20 tokens at every position. Boxes: 25th-75th percentile with median; whiskers: 5th-95th "
        "percentile over requests."
    ),
    paper_statement=(
        "Acceptance varies widely between requests: on InstructCoder (Llama-3.1-8B) the n-gram per-request "
        "mean spans 1.91 to 15.08 tokens (5th to 95th percentile) and EAGLE-3's 2.64 to 5.68."
    ),
    data="released traces",
    sources=(
        "results/traces/{subject}/<dataset>.positions.parquet",
    ),
)


def add_arguments(p) -> None:
    p.add_argument("--positions", nargs="+", required=True)


def build(args, ctx: TraceContext) -> None:
    style.apply()
    rm = request_means(load_concat(args.positions))
    datasets = list(ctx.datasets)
    proposers = list(ctx.proposers)
    fig, axes = style.dataset_row(len(datasets), 1.9)
    for j, ds in enumerate(datasets):
        ax = axes[j]
        data = [rm[(rm["dataset"] == ds) & (rm["proposer"] == p)]["mean_acc_len"].to_numpy() for p in proposers]
        positions = np.arange(len(proposers))
        # the percentiles themselves (as the claims' metrics compute them), not boxplot()'s whiskers, which
        # stop at the most extreme request inside them
        stats = []
        for d in data:
            p5, q1, med, q3, p95 = np.percentile(d, BOX_PERCENTILES) if len(d) else [np.nan] * 5
            stats.append({"whislo": p5, "q1": q1, "med": med, "q3": q3, "whishi": p95, "fliers": []})
        bp = ax.bxp(
            stats, positions=positions, widths=0.6, showfliers=False, patch_artist=True,
            medianprops={"color": "black", "linewidth": 1.0},
        )
        for patch, p in zip(bp["boxes"], proposers):
            patch.set_facecolor(style.method_color(p))
            patch.set_edgecolor("#333333")
        ax.set_xticks(positions, style.wrap_labels(ax, [ctx.proposer_label(p) for p in proposers]))
        style.panel_title(ax, ctx.dataset_label(ds))
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", linewidth=0.3, color="#cccccc")
        ax.set_axisbelow(True)
        if j == 0:
            ax.set_ylabel("Mean tokens per step")
    style.save_pdf(fig, args.output)
