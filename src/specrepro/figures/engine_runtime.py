"""Table: what the engine runs cost: wall time per configuration, device, points, device-hours."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from . import FigureSpec, TraceContext
from ..engine.results.metrics import config_label_text, config_order, load_points
from ..core.io import SpecReproError, read_json, write_csv, write_text
from ..core.latex import grouped_rows, tex_escape
from ..plan import job_minutes, plan_jobs

SPEC = FigureSpec(
    name="tab_runtime",
    kind="table",
    title="Run time of the engine runs",
    paper_ref="--",
    caption=(
        "Run time of each engine configuration ({subject_label}): measured seconds (sum of the timed generate "
        "calls of its points; warm-up excluded), model load time (from the job's record, when it loaded a model), "
        "the device the points ran on, points run and failed, and device-hours = (measured + load) x devices "
        "/ 3600, with devices the GPU count of the device string (GPU runs; CPU runs count one process as one "
        "CPU). Plan vs job: the job's estimate from `specrepro plan` (H100 cost model, every configuration charged "
        "as no SD, scaled by weight bytes per GPU, plus the config's stated engine start per job, run.engine_start_s, "
        "where it states one) against the job's measured wall time (load, warm-up and every "
        "point of its last run), in hours; shown for GPU runs only, since the plan estimates GPU time."
    ),
    paper_statement="The paper does not report run times; this table is for planning a rerun.",
    data="engine runs",
)


def add_arguments(p) -> None:
    p.add_argument("--points", nargs="+", required=True, help="bench tables (results/engine/<exp>/bench/*.parquet)")
    p.add_argument("--meta", nargs="*", default=[], help="the bench records (results/engine/<exp>/bench/*.json)")
    p.add_argument("--csv", help="the same table as CSV")


def device_count(device: str, kind: str, fallback: int = 1) -> int:
    """GPUs in ``"4x NVIDIA H100 80GB HBM3"``; 1 on a CPU run."""
    if kind != "gpu":
        return 1
    m = re.match(r"\s*(\d+)\s*x\s", device or "")
    return int(m.group(1)) if m else fallback


def load_meta(paths) -> dict:
    out = {}
    for p in paths:
        m = read_json(p)
        if not isinstance(m, dict) or "exp" not in m or "config" not in m:
            raise SpecReproError(f"{p}: not a bench record (needs exp and config)")
        out[(m["exp"], m["config"])] = m
    return out


def runtime_table(points: pd.DataFrame, meta: dict, ctx: TraceContext, plan: pd.DataFrame | None = None) -> pd.DataFrame:
    model_of = {e["name"]: e["model"] for e in ctx.experiments}
    order = {e["name"]: i for i, e in enumerate(ctx.experiments)}
    rows = []
    for exp in sorted(points["exp"].unique(), key=lambda x: (order.get(x, len(order)), x)):
        sub = points[points["exp"] == exp]
        for cfg, method, k in config_order(sub):
            g = sub[sub["config"] == cfg]
            devs = sorted(set(g["device"].dropna().astype(str))) if "device" in g else []
            device = "; ".join(devs) if devs else "unknown"
            m = meta.get((exp, cfg), {})
            load = m.get("load_s")
            load = float(load) if load is not None else math.nan
            measured = float(pd.to_numeric(g["wall_s"], errors="coerce").sum())
            n_dev = max([device_count(d, ctx.run_kind) for d in devs] or [1])
            hours = (measured + (0.0 if math.isnan(load) else load)) * n_dev / 3600
            est = None
            if plan is not None and len(plan):
                est = job_minutes(plan, exp, cfg, "bench")
            job_s = m.get("elapsed_s")
            job_s = float(job_s) if job_s is not None else measured + (0.0 if math.isnan(load) else load)
            rows.append({
                "exp": exp, "model": model_of.get(exp, g["model"].iloc[0]), "config": cfg, "method": method, "k": k,
                "device": device, "devices": n_dev, "points": len(g), "failed": int((g["status"] != "ok").sum()),
                "measured_s": measured, "load_s": load, "device_hours": hours,
                "device_hours_unit": "GPU-hours" if ctx.run_kind == "gpu" else "CPU-hours",
                "plan_h": est / 60 if est is not None else math.nan, "job_h": job_s / 3600,
                "job_to_plan": (job_s / 3600) / (est / 60) if est else math.nan,
            })
    t = pd.DataFrame(rows)
    if len(t):
        t["k"] = t["k"].astype("Int64")
    return t


def _secs(v: float) -> str:
    return "--" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def _hours(v: float) -> str:
    if v >= 0.995 or v == 0:
        return f"{v:.2f}"
    return np.format_float_positional(v, precision=2, unique=False, fractional=False, trim="-")


def to_latex(t: pd.DataFrame, ctx: TraceContext) -> str:
    unit = "GPU-hours" if ctx.run_kind == "gpu" else "CPU-hours"
    gpu = ctx.run_kind == "gpu"
    lines = [
        # experiment, configuration and device wrap (long names and labels would run past the margin)
        r"\begin{tabular}{@{}>{\raggedright\arraybackslash}p{0.12\textwidth} >{\raggedright\arraybackslash}p{0.14\textwidth}"
        r" >{\raggedright\arraybackslash}p{0.12\textwidth} rr rr r rr@{}}",
        r"\toprule",
        f"Exp. & Config. & device & points & failed & timed (s) & load (s) & {unit} & plan (h) & job (h) \\\\",
        r"\midrule",
    ]
    for exp, r in grouped_rows(t.itertuples(index=False), "exp", lines):
        k = None if pd.isna(r.k) else int(r.k)
        lines.append(
            f"{exp} & {tex_escape(config_label_text(r.method, k, ctx.proposers, r.config))} & {tex_escape(r.device)} & "
            f"{r.points} & {r.failed} & {_secs(r.measured_s)} & {_secs(r.load_s)} & {_hours(r.device_hours)} & "
            f"{_plan(r.plan_h, gpu)} & {_hours(r.job_h)} \\\\"
        )
    if len(t):
        load = t["load_s"].sum(skipna=True) if t["load_s"].notna().any() else math.nan
        lines += [
            r"\midrule",
            f"total & & & {int(t['points'].sum())} & {int(t['failed'].sum())} & {_secs(float(t['measured_s'].sum()))} "
            f"& {_secs(float(load))} & {_hours(float(t['device_hours'].sum()))} & "
            f"{_plan(float(t['plan_h'].sum(min_count=1)), gpu)} & {_hours(float(t['job_h'].sum()))} \\\\",
        ]
    else:
        lines.append(r"\multicolumn{10}{c}{no engine points} \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def _plan(v: float, gpu: bool) -> str:
    return "--" if not gpu or v is None or math.isnan(v) else _hours(v)


def _plan_table(run_config: dict) -> pd.DataFrame | None:
    """`specrepro plan` of this run (its simulator's cost model), None when it cannot be made."""
    try:
        return plan_jobs(run_config, (run_config.get("simulator") or {}).get("cost_model") or "llama3.1-8b-h100")
    except (SpecReproError, KeyError):
        return None


def build(args, ctx: TraceContext) -> None:
    t = runtime_table(load_points(args.points), load_meta(args.meta), ctx, _plan_table(read_json(args.run_config)))
    if args.csv:
        write_csv(args.csv, t, float_format="%.10g")
    write_text(args.output, to_latex(t, ctx))
