"""Figure: each experiment's step-time cost model against the engine steps it was fitted to.

Input: per experiment the fit report and residuals of ``specrepro fit-engine-cost-model``
(``results/engine/<exp>/cost_model.{json,residuals.csv}``, :mod:`specrepro.engine.results.modelfit`). One row per
experiment (model on its engine and hardware): measured against fitted time of every role (target, each drafter,
n-gram), the equality line, and the residuals. ``--csv``: one row per experiment and role with R^2, points,
RMSE and the coefficients.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from . import FigureSpec, TraceContext
from . import style
from ..core.io import SpecReproError, read_json, write_csv

SPEC = FigureSpec(
    name="fig_costfit",
    kind="figure",
    title="Cost model of each model, fitted to its own engine steps",
    paper_ref="Sec. 6 (simulator cost model)",
    caption=(
        "The simulator's step-time model (target T(kv, n) = c_kv kv + c_compute n + c_fixed; each drafter d_kv kv + "
        "d_spec input_len + d_fixed, plus d_tok per token over the batch where fitted; n-gram a share of T) fitted per experiment, i.e. per model on its engine and "
        "hardware ({subject_label}), by non-negative least squares to that experiment's own profiled engine steps, "
        "timed inside vLLM's model runner by specrepro's plugin (an experiment without profiled passes, such as the "
        "reasoning runs, is fitted to its benchmark wall times: marked 'bench'). One row per experiment. Left: measured "
        "against fitted time of each role (dashed: equality); right: residuals. Titles give each role's R^2 and "
        "points. On a CPU run the steps come from a shared CPU and are noisy: the fit is a code-path check."
    ),
    paper_statement=(
        "The simulator predicts step time from KV-cache size and batched tokens with a per-model linear cost "
        "model fitted to profiled vLLM steps (the paper fits one, Llama-3.1-8B on an H100)."
    ),
    data="engine runs (profiled steps)",
)

# the target in black: no method's colour (EAGLE's orange was one shade off its old #FF7F0E)
ROLE_COLORS = {"target": "#222222", "ngram": "#4C8DC4"}
CSV_COLUMNS = ["exp", "model", "source", "role", "drafter", "n_points", "r2", "rmse_s", "mean_abs_relative_residual",
               "coefficients"]


def add_arguments(p) -> None:
    p.add_argument("--reports", nargs="+", required=True, help="results/engine/<exp>/cost_model.json")
    p.add_argument("--residuals", nargs="+", required=True, help="results/engine/<exp>/cost_model.residuals.csv")
    p.add_argument("--csv", required=True, help="fit quality per experiment and role")


def role_rows(report: dict) -> list[dict]:
    """One row per role of one experiment's fit report (:data:`CSV_COLUMNS`)."""
    base = {"exp": report["exp"], "model": report.get("model", ""), "source": report.get("source", "")}
    roles = [("target", "", report["target"])]
    roles += [("drafter", m, f) for m, f in (report.get("drafters") or {}).items()]
    if report.get("ngram"):
        roles.append(("ngram", "", report["ngram"]))
    out = []
    for role, drafter, f in roles:
        out.append({**base, "role": role, "drafter": drafter, "n_points": f["n_points"], "r2": f["r2"],
                    "rmse_s": f["rmse_s"], "mean_abs_relative_residual": f.get("mean_abs_relative_residual"),
                    "coefficients": "; ".join(f"{k}={v:.4g}" for k, v in f["coefficients"].items())})
    return out


def _label(role: str, drafter: str) -> str:
    return style.METHOD_LABELS.get(drafter, drafter) if role == "drafter" else {"target": "target", "ngram": "n-gram"}[role]


def _color(role: str, drafter: str) -> str:
    return style.method_color(drafter) if role == "drafter" else ROLE_COLORS[role]


def build(args, ctx: TraceContext) -> None:
    if len(args.reports) != len(args.residuals):
        raise SpecReproError(f"{len(args.reports)} fit reports but {len(args.residuals)} residual tables")
    style.apply()
    reports = [read_json(p) for p in args.reports]
    resid = [pd.read_csv(p, dtype={"drafter": str, "role": str, "config": str}) for p in args.residuals]
    rows = [r for rep in reports for r in role_rows(rep)]
    write_csv(args.csv, pd.DataFrame(rows, columns=CSV_COLUMNS).assign(run_kind=ctx.run_kind), float_format="%.6g")
    labels = {e["name"]: e["model_label"] for e in ctx.experiments}
    fig, axes = plt.subplots(len(reports), 2, figsize=(style.FULL_WIDTH, 2.0 * len(reports) + 0.4), squeeze=False,
                             constrained_layout=True)
    for i, (rep, d) in enumerate(zip(reports, resid)):
        ax, axr = axes[i]
        d = d.assign(drafter=d["drafter"].fillna("").astype(str))
        lo = hi = None
        quality = []
        for (role, drafter), g in d.groupby(["role", "drafter"], sort=False):
            meas, pred = g["seconds"].to_numpy() * 1e3, g["predicted"].to_numpy() * 1e3
            c = _color(role, drafter)
            ax.scatter(pred, meas, s=6, color=c, alpha=0.7, linewidths=0, label=_label(role, drafter))
            axr.scatter(pred, (g["residual"].to_numpy()) * 1e3, s=6, color=c, alpha=0.7, linewidths=0)
            lo = min(meas.min(), pred.min()) if lo is None else min(lo, meas.min(), pred.min())
            hi = max(meas.max(), pred.max()) if hi is None else max(hi, meas.max(), pred.max())
            f = rep["target"] if role == "target" else rep["ngram"] if role == "ngram" else rep["drafters"][drafter]
            r2 = f["r2"]
            quality.append(f"{_label(role, drafter)} R$^2$ {r2:.2f} (n={f['n_points']})" if r2 is not None
                           and math.isfinite(r2) else f"{_label(role, drafter)} (n={f['n_points']})")
        pad = 0.05 * ((hi - lo) or 1.0) if lo is not None else 1.0
        if lo is not None:
            ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="#555555", linestyle="--", linewidth=0.7)
        axr.axhline(0.0, color="#555555", linestyle="--", linewidth=0.7)
        src = "bench" if rep.get("source") == "bench" else "profiled steps"
        style.panel_title(ax, f"{labels.get(rep['exp'], rep['exp'])}\n[{rep['exp']}, {src}]", fontsize=6.5)
        style.panel_title(axr, "\n".join("; ".join(quality[i:i + 2]) for i in range(0, len(quality), 2)), fontsize=6)
        ax.set_xlabel("fitted (ms)")
        ax.set_ylabel("measured (ms)")
        axr.set_xlabel("fitted (ms)")
        axr.set_ylabel("measured - fitted (ms)")
        ax.legend(loc="upper left", fontsize=5.5, frameon=False, markerscale=1.5)
        for a in (ax, axr):
            a.grid(True, linestyle="--", linewidth=0.3, color="#bbbbbb")
            a.set_axisbelow(True)
    style.save_pdf(fig, args.output)
