"""Fit the simulator's step-time cost model (:mod:`specrepro.core.costmodel`) to measured engine steps.

Model (seconds; see ``data/cost_models/llama3.1-8b-h100.yaml``)::

    target   T(kv, n)          = c_kv * kv + c_compute * n + c_fixed
    drafter  D(kv, input_len)  = d_kv * kv + d_spec * input_len + d_fixed
    n-gram   draft_fraction * T(kv, n)
    overhead overhead_per_step

**Timings table** (one row per role and engine step; :data:`TIMING_COLUMNS`): ``role`` in
{target, drafter, ngram}, ``kv_tokens`` (tokens of context in the KV cache at the start of the
step, summed over the batch, as the simulator counts it: ``B * (P + generated)``),
``batched_tokens`` (target: ``n``, tokens the step processes, summed over the batch; drafter:
``input_len``, tokens *per request* the drafter takes, the simulator's ``eagle_draft(kv,
input_len)``; n-gram: the target's ``n``), ``seconds``; optional ``overhead_s`` (target rows:
step time minus target and drafter time).

**Fit.** Ordinary least squares per role (``numpy.linalg.lstsq``) restricted to non-negative
coefficients: the exact non-negative solution, found by solving every subset of the three
regressors and keeping the best feasible one (2^3 small solves). ``draft_fraction`` is the
least-squares slope through the origin of n-gram seconds on the fitted ``T(kv, n)``;
``overhead_per_step`` the mean ``overhead_s``. Coefficients without data come from ``base`` (a cost
model) or are 0, and are listed as ``not_fitted``. A role whose ``kv_tokens`` or ``batched_tokens``
takes a single value, or whose regressors are collinear, is an error: its coefficients are not
identifiable.

**Engine-side shapes** (:func:`steps_from_timings`). Every step record of the instrumentation plugin
(:mod:`specrepro.engine.run.instrument`) carries the step's measured shape: requests, tokens scheduled
(``n``), tokens already in the KV cache. The cost-fit sweep (:func:`profile_sweep`) runs
``generate`` on ``B`` requests of exactly ``P`` prompt tokens (distinct token ids: no prefix-cache
hits), ``ignore_eos=True``, ``max_tokens = L``, with ``max_num_batched_tokens >= B*P`` (no chunked
prefill), so the shapes are also known in advance, and :func:`steps_from_timings` checks the
measured ones against them:

``kv`` as the simulator counts it, ``B * (P + generated)``: the engine's computed tokens plus the one
token of every decoding request whose KV the step writes first (``context_tokens + num_reqs -
prefill_reqs`` of the record).

* step 0, prefill: target ``n = B*P``, ``kv = 0``; with a draft model the drafter also runs
  (prefill of the drafter, ``input_len = P``, ``kv = 0``).
* no SD, decode step ``j >= 1``: ``n = B``, ``kv = B*(P + j)``; ``L`` steps in all.
* ``draft_model`` SD whose draft *is* the target (every draft accepted), decode step ``j >= 1``:
  ``n = B*(k+1)``, ``kv = B*(P + 1 + (k+1)*(j-1))``, drafter ``input_len = k+1``; steps
  ``1 + ceil((L-1)/(k+1))`` (vLLM 0.32 does not shorten the last step's drafts: checked with the
  spec-decode metrics, all ``k`` drafts of every step verified and accepted).

A different step count or shape means the sweep did not run as designed (chunked prefill, rejected
drafts, prefix-cache hits): :func:`steps_from_timings` raises. n-gram and EAGLE runs have
data-dependent shapes: raise.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import yaml

from ...core.errors import SpecReproError
from ...core.costmodel import COEFFICIENTS, load_cost_model
from ...core.io import atomic_path, read_parquet, write_json, write_text

TIMING_COLUMNS = ("role", "kv_tokens", "batched_tokens", "seconds")
ROLE_COEFS = {
    "target": ("c_kv", "c_compute", "c_fixed"),
    "drafter": ("d_kv", "d_spec", "d_fixed"),
}
ROLES = ("target", "drafter", "ngram")


# --- the fit ------------------------------------------------------------------------------------


def nnls_small(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares for a few columns: best feasible unconstrained solve over
    all column subsets (the NNLS optimum is the least-squares solution on its support)."""
    m = X.shape[1]
    scale = np.where(np.abs(X).max(axis=0) > 0, np.abs(X).max(axis=0), 1.0)
    Xs = X / scale
    best, best_rss = np.zeros(m), float(np.sum(y ** 2))
    for r in range(1, m + 1):
        for cols in itertools.combinations(range(m), r):
            beta, *_ = np.linalg.lstsq(Xs[:, cols], y, rcond=None)
            if np.any(beta < 0):
                continue
            rss = float(np.sum((y - Xs[:, cols] @ beta) ** 2))
            if rss < best_rss - 1e-18 * max(1.0, best_rss):
                full = np.zeros(m)
                full[list(cols)] = beta
                best, best_rss = full, rss
    return best / scale


@dataclass
class RoleFit:
    role: str
    coefficients: dict[str, float]
    n_points: int
    r2: float
    rmse_s: float
    max_abs_residual_s: float
    mean_abs_relative_residual: float

    def as_dict(self) -> dict:
        return {"coefficients": self.coefficients, "n_points": self.n_points, "r2": self.r2,
                "rmse_s": self.rmse_s, "max_abs_residual_s": self.max_abs_residual_s,
                "mean_abs_relative_residual": self.mean_abs_relative_residual}


@dataclass
class CostFit:
    roles: dict[str, RoleFit]
    coefficients: dict[str, float]  # "target.c_kv" ... "overhead_per_step"
    not_fitted: list[str]
    residuals: pd.DataFrame  # role, kv_tokens, batched_tokens, seconds, predicted, residual
    overhead_points: int = 0
    extra: dict = field(default_factory=dict)

    def report(self) -> dict:
        return {"roles": {r: f.as_dict() for r, f in self.roles.items()}, "coefficients": self.coefficients,
                "not_fitted": self.not_fitted, "overhead_points": self.overhead_points,
                "n_points": int(sum(f.n_points for f in self.roles.values())), **self.extra}


def _check_identifiable(role: str, d: pd.DataFrame) -> None:
    names = {"kv_tokens": ROLE_COEFS[role][0], "batched_tokens": ROLE_COEFS[role][1]}
    if len(d) < 4:
        raise SpecReproError(f"role {role}: {len(d)} rows; at least 4 are needed to fit 3 coefficients and judge the fit")
    for col, coef in names.items():
        vals = d[col].unique()
        if vals.size < 2:
            raise SpecReproError(
                f"role {role}: {col} is {vals[0]:g} in all {len(d)} rows, so {coef} cannot be told apart from the "
                f"fixed term; profile several batch sizes and prompt lengths"
            )
    X = np.column_stack([d["kv_tokens"], d["batched_tokens"], np.ones(len(d))]).astype(float)
    X = X / np.abs(X).max(axis=0)
    if np.linalg.matrix_rank(X, tol=1e-9) < 3:
        raise SpecReproError(
            f"role {role}: kv_tokens, batched_tokens and the constant are collinear in these {len(d)} rows; "
            "vary batch size and prompt length independently"
        )


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot if ss_tot > 0 else float("nan")


def fit_cost_model(timings: pd.DataFrame, base=None) -> CostFit:
    """Fit every role present in ``timings`` (see the module docstring); ``base`` (a
    :class:`~specrepro.core.costmodel.CostModel`) supplies coefficients of absent roles."""
    missing = set(TIMING_COLUMNS) - set(timings.columns)
    if missing:
        raise SpecReproError(f"timings table lacks column(s) {', '.join(sorted(missing))}")
    unknown = sorted(set(timings["role"]) - set(ROLES))
    if unknown:
        raise SpecReproError(f"unknown role(s) {', '.join(map(str, unknown))} (known: {', '.join(ROLES)})")
    t = timings.copy()
    for c in ("kv_tokens", "batched_tokens", "seconds"):
        t[c] = pd.to_numeric(t[c], errors="coerce").astype(float)
    bad = t[["kv_tokens", "batched_tokens", "seconds"]].isna().any(axis=1) | (t[["kv_tokens", "batched_tokens", "seconds"]] < 0).any(axis=1)
    if bad.any():
        raise SpecReproError(f"{int(bad.sum())} timing row(s) with a missing or negative kv_tokens/batched_tokens/seconds")
    coefs: dict[str, float] = {}
    fits: dict[str, RoleFit] = {}
    resid = []
    for role, names in ROLE_COEFS.items():
        d = t[t["role"] == role]
        if d.empty:
            continue
        _check_identifiable(role, d)
        X = np.column_stack([d["kv_tokens"], d["batched_tokens"], np.ones(len(d))])
        y = d["seconds"].to_numpy()
        beta = nnls_small(X, y)
        pred = X @ beta
        r = y - pred
        rel = np.abs(r) / np.where(y > 0, y, np.nan)
        fits[role] = RoleFit(role, dict(zip(names, map(float, beta))), len(d), _r2(y, pred),
                             float(np.sqrt(np.mean(r ** 2))), float(np.max(np.abs(r))), float(np.nanmean(rel)))
        section = "target" if role == "target" else "eagle"
        coefs.update({f"{section}.{n}": float(b) for n, b in zip(names, beta)})
        resid.append(pd.DataFrame({"role": role, "kv_tokens": d["kv_tokens"].to_numpy(),
                                   "batched_tokens": d["batched_tokens"].to_numpy(), "seconds": y,
                                   "predicted": pred, "residual": r}))
    if "target" not in fits and base is None and (t["role"] == "ngram").any():
        raise SpecReproError("n-gram rows need the target's fit (or a base cost model) to relate drafting to T(kv, n)")
    ng = t[t["role"] == "ngram"]
    if not ng.empty:
        c = ({k.split(".")[1]: v for k, v in coefs.items() if k.startswith("target.")} if "target" in fits else
             {"c_kv": base.c_kv, "c_compute": base.c_compute, "c_fixed": base.c_fixed})
        T = c["c_kv"] * ng["kv_tokens"].to_numpy() + c["c_compute"] * ng["batched_tokens"].to_numpy() + c["c_fixed"]
        y = ng["seconds"].to_numpy()
        frac = float(max(0.0, np.dot(T, y) / np.dot(T, T)))
        coefs["ngram.draft_fraction"] = frac
        fits["ngram"] = RoleFit("ngram", {"draft_fraction": frac}, len(ng), _r2(y, frac * T),
                                float(np.sqrt(np.mean((y - frac * T) ** 2))), float(np.max(np.abs(y - frac * T))),
                                float(np.nanmean(np.abs(y - frac * T) / np.where(y > 0, y, np.nan))))
        resid.append(pd.DataFrame({"role": "ngram", "kv_tokens": ng["kv_tokens"].to_numpy(),
                                   "batched_tokens": ng["batched_tokens"].to_numpy(), "seconds": y,
                                   "predicted": frac * T, "residual": y - frac * T}))
    n_over = 0
    if "overhead_s" in t.columns:
        o = pd.to_numeric(t["overhead_s"], errors="coerce").dropna()
        if len(o):
            coefs["overhead_per_step"] = float(max(0.0, o.mean()))
            n_over = int(len(o))
    if not fits:
        raise SpecReproError("no target, drafter or ngram rows to fit")

    not_fitted = []
    for section, key in COEFFICIENTS:
        where = f"{section}.{key}" if section else key
        if where not in coefs:
            not_fitted.append(where)
            if base is not None:
                attr = {"ngram.draft_fraction": "ngram_fraction", "overhead_per_step": "overhead"}.get(where, key)
                coefs[where] = float(getattr(base, attr))
            else:
                coefs[where] = 0.0
    return CostFit(fits, coefs, not_fitted, pd.concat(resid, ignore_index=True), n_over)


def cost_model_yaml(fit: CostFit, *, name: str, model: str = "", hardware: str = "", source: str = "",
                    base_name: str | None = None) -> str:
    """The cost-model file (the keys :func:`specrepro.core.costmodel.load_cost_model` reads)."""
    c = fit.coefficients
    doc: dict[str, Any] = {"name": name}
    if model:
        doc["model"] = model
    if hardware:
        doc["hardware"] = hardware
    doc["source"] = source or "specrepro fit-cost-model (least squares, non-negative)"
    doc["target"] = {k: c[f"target.{k}"] for k in ROLE_COEFS["target"]}
    doc["eagle"] = {k: c[f"eagle.{k}"] for k in ROLE_COEFS["drafter"]}
    doc["ngram"] = {"draft_fraction": c["ngram.draft_fraction"]}
    doc["overhead_per_step"] = c["overhead_per_step"]
    head = ["# Step-time cost model fitted by `specrepro fit-cost-model`, in seconds.",
            "#   target  T(kv, n) = c_kv*kv + c_compute*n + c_fixed",
            "#   eagle   d_kv*kv + d_spec*input_len + d_fixed (fitted on the drafter rows)"]
    for role, f in fit.roles.items():
        head.append(f"#   {role}: R^2 = {f.r2:.4f} over {f.n_points} steps")
    if fit.not_fitted:
        where = f"from {base_name}" if base_name else "set to 0"
        head.append(f"# not fitted ({where}): {', '.join(fit.not_fitted)}")
    return "\n".join(head) + "\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def plot_residuals(fit: CostFit, path) -> None:
    """Residual (measured - fitted, ms) against fitted time, one panel per role (PDF, deterministic)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roles = list(fit.roles)
    fig, axes = plt.subplots(1, len(roles), figsize=(4.2 * len(roles), 3.2), squeeze=False)
    for ax, role in zip(axes[0], roles):
        d = fit.residuals[fit.residuals["role"] == role]
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.scatter(d["predicted"] * 1e3, d["residual"] * 1e3, s=10, alpha=0.7)
        f = fit.roles[role]
        ax.set_title(f"{role}: R$^2$ = {f.r2:.3f}, n = {f.n_points}", fontsize=9)
        ax.set_xlabel("fitted time (ms)")
        ax.set_ylabel("measured - fitted (ms)")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="pdf", metadata={"CreationDate": None})
    plt.close(fig)


def read_timings(paths: Sequence[str]) -> pd.DataFrame:
    frames = []
    for p in paths:
        if str(p).endswith(".csv"):
            if not Path(p).exists():
                raise SpecReproError(f"{p}: file not found")
            frames.append(pd.read_csv(p))
        else:
            frames.append(read_parquet(p))
    return pd.concat(frames, ignore_index=True)


# --- CLI ----------------------------------------------------------------------------------------


def run_fit_cost_model(a) -> None:
    """The body of ``specrepro fit-cost-model``."""
    base = load_cost_model(a.base) if a.base else None
    fit = fit_cost_model(read_timings(a.steps), base=base)
    name = a.name or Path(a.output).stem
    write_text(a.output, cost_model_yaml(fit, name=name, model=a.model, hardware=a.hardware, base_name=a.base))
    if a.plot:
        plot_residuals(fit, a.plot)
    if a.report:
        write_json(a.report, {**fit.report(), "inputs": [str(s) for s in a.steps], "name": name})
    for role, f in fit.roles.items():
        print(f"{a.output}: {role} R^2 = {f.r2:.4f} over {f.n_points} steps", file=sys.stderr)
