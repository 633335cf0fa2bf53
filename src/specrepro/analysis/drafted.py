"""The draft-substitution runs (oracle, controlled, hybrid: :mod:`specrepro.jobspec.drafts`) next to the simulator.

Each benchmarked configuration whose drafts the plugin substituted is described by a :class:`DraftConfig` and
simulated on exactly the requests it was measured on (the closed loop's pairing,
:mod:`specrepro.analysis.closedloop`), from the run's own cost model and traces, **with the engine's accounting**:
under the oracle and controlled modes vLLM's drafter runs every step whatever draft is then verified, so the
model drafter is charged its whole ``k``-token draft (``k + 1`` input tokens) every step
(:data:`specrepro.jobspec.drafts.ENGINE_DRAFTER_CHARGE`); the hybrid decides before the drafter runs, so the model
drafter is charged the chosen ``k`` where its draft is used and its first pass elsewhere
(:data:`~specrepro.jobspec.drafts.HYBRID_DRAFTER_CHARGE`); the n-gram lookup is charged every step:

``controlled`` (profile ``none`` / ``all`` / ``{name, j: [...]}`` / ``{trace: m}``)
    the method at fixed ``k`` on an acceptance trace built from the profile (:func:`profile_acc`); a controlled
    n-gram step always verifies ``k`` drafts (the plugin proposes them whether the lookup matched or not);
``oracle-<m>``
    the simulator's oracle on ``m``'s trace, capped at ``k + 1`` tokens per step (``SimSpec.engine_k``);
``oracle-combine``
    per position the better of n-gram and the model drafter, both charged every step;
``hybrid-adaptive`` / ``hybrid-ngram-first``
    the simulator's ``adaptive`` (the same :func:`specrepro.core.policy.adaptive_choice` as the engine, with the
    engine's ``k`` as both proposers' ``k_max``) and ``ngram-first`` (:func:`specrepro.core.policy.ngram_first`).

:func:`paired_table` joins measured and simulated per (exp, dataset, config, batch size); error =
simulated / measured - 1. :func:`gap_closed` is the share of the gap from the best single method to Oracle
Combine that a hybrid closes; :func:`choice_shares` the per-request share of steps each proposer was chosen (the hybrid points' own columns);
:func:`hybrid_falsification` the hybrids' closed loop fed the wrong acceptance of :mod:`specrepro.analysis.falsify`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.costmodel import CostModel, load_cost_model
from ..core.errors import SpecReproError
from ..core.io import read_json, read_parquet, write_csv, write_json
from ..core.traces import TraceRecord, read_trace
from ..engine.results.metrics import load_points
from ..engine.results.modelfit import DRAFTERS, LOOKUP
from ..jobspec.args import METHOD_LABELS, dataset_labels, experiment_configs
from ..jobspec.drafts import ENGINE_DRAFTER_CHARGE, HYBRID_DRAFTER_CHARGE, draft_jobs, hybrid_params
from .closedloop import (
    SPLIT_COLUMNS, experiment_inputs, job_split, measured_point, simulated_fields, with_baseline, with_errors,
)
from .falsify import FACTOR, VARIANT_LABELS, VARIANTS, variant_traces
from ..sim.simulator import SimSpec, Workload, simulate
from ..sim.simulator.steps import decode_steps
from ..sim.simulator.workload import draw_requests, request_traces
from .enginesim import workload

MODES = ("fixed", "controlled", "oracle", "hybrid")
#: a measured point's key: a draft job's points carry the plan they ran under in ``profile`` (a controlled job: one
#: per acceptance profile; an oracle or hybrid job: its mode label); plain bench points have none ("")
KEY = ["exp", "dataset", "config", "profile", "batch_size"]
COLUMNS = KEY + ["mode", "method", "drafter", "k", "mean_accepted", "requests", "measured", "measured_ci_low",
                 "measured_ci_high", "simulated", "simulated_ci_low", "simulated_ci_high", "error", "abs_error",
                 "within_measured_ci", *SPLIT_COLUMNS, "baseline", "reference_vs_job"]


@dataclass(frozen=True)
class DraftConfig:
    """One benchmarked configuration of the draft hook (or a plain fixed-k one, ``mode = 'fixed'``).

    ``method``: the drafter vLLM runs (hybrid and oracle-combine: the model drafter paired with n-gram);
    ``k``: ``num_speculative_tokens``; ``of``: the oracle's method (``combine`` too); ``policy``: the hybrid's;
    ``profile``: the controlled profile (``none``, ``all``, ``{name, j}``, ``{trace}``)."""

    config: str
    mode: str
    method: str
    k: int
    of: str | None = None
    policy: str | None = None
    profile: Any = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SpecReproError(f"{self.config}: unknown draft mode {self.mode!r} (known: {', '.join(MODES)})")
        if self.k < 1:
            raise SpecReproError(f"{self.config}: k must be at least 1")

    @property
    def profile_name(self) -> str:
        """``none``, ``all``, the named profile's name or ``trace-<m>`` (empty for other modes)."""
        p = self.profile
        if self.mode != "controlled":
            return ""
        if isinstance(p, str):
            return p
        if isinstance(p, Mapping) and "trace" in p:
            return f"trace-{p['trace']}"
        if isinstance(p, Mapping):
            return str(p.get("name") or "j=" + ",".join(str(j) for j in p.get("j", [])))
        raise SpecReproError(f"{self.config}: unknown controlled profile {p!r}")

    @property
    def point_profile(self) -> str:
        """The ``profile`` its points carry (:func:`specrepro.jobspec.drafts.draft_plans`' plan names)."""
        return self.profile_name if self.mode == "controlled" else ("" if self.mode == "fixed" else self.label)

    @property
    def label(self) -> str:
        """``oracle-<of>``, ``hybrid-<policy>``, ``controlled``, or the method (fixed k)."""
        return {"oracle": f"oracle-{self.of}", "hybrid": f"hybrid-{self.policy}", "controlled": "controlled"}.get(
            self.mode, self.method)


def profile_acc(profile: Any, length: int, k: int, trace: np.ndarray | None = None) -> np.ndarray:
    """Tokens produced per step (the trace quantity ``acc_len``) at each of ``length`` output positions under a
    controlled profile at ``k`` drafts, as the plugin's :func:`specrepro.jobspec.drafts._profile_j` sets them:
    ``acc[0] = 1`` (the prefill), then ``j + 1`` at every position a step starts from, ``j`` the profile's correct
    drafts (a ``j`` list is cycled per step of the request, so it is laid out along the positions those steps
    visit); ``{trace: m}`` is ``m``'s own trace (the fixed-k walk caps it at ``k + 1``)."""
    if length < 1:
        raise SpecReproError("profile_acc: a request needs at least one output position")
    acc = np.ones(length, dtype=np.int64)
    if profile == "none":
        return acc
    if profile == "all":
        acc[1:] = k + 1
        return acc
    if isinstance(profile, Mapping) and "trace" in profile:
        if trace is None:
            raise SpecReproError(f"controlled profile {profile!r}: no {profile['trace']} trace given")
        out = np.asarray(trace, dtype=np.int64)[:length].copy()
        if out.size < length:
            raise SpecReproError(f"controlled profile {profile!r}: trace shorter than the output")
        return np.maximum(out, 1)
    if isinstance(profile, Mapping) and "j" in profile:
        js = [int(j) for j in profile["j"]]
        if not js or min(js) < 0:
            raise SpecReproError(f"controlled profile {profile!r}: needs j >= 0 values")
        g, s = 1, 0
        while g < length:
            acc[g] = min(js[s % len(js)], k) + 1
            g += int(acc[g])
            s += 1
        return acc
    raise SpecReproError(f"unknown controlled profile {profile!r} (none, all, {{name, j}}, {{trace}})")


def _controlled_workload(records: Sequence[TraceRecord], dataset: str, cfg: DraftConfig) -> Workload:
    prof = cfg.profile
    accs = []
    for r in records:
        tr = r.acc_len.get(prof["trace"]) if isinstance(prof, Mapping) and "trace" in prof else None
        if isinstance(prof, Mapping) and "trace" in prof and tr is None:
            raise SpecReproError(f"{dataset}: request {r.id!r} has no 'acc_{prof['trace']}' trace")
        accs.append(profile_acc(prof, int(r.output_len), cfg.k, tr))
    return Workload(dataset=dataset, ids=tuple(r.id for r in records),
                    prompt_len=np.array([r.prompt_token_ids.size for r in records], dtype=np.int64),
                    output_len=np.array([r.output_len for r in records], dtype=np.int64),
                    ngram=tuple(accs), eagle=tuple(accs), suffix=None)


def sim_setup(cfg: DraftConfig, records: Sequence[TraceRecord], dataset: str, cost_model: str, *,
              ngram_match: float, seed: int, lookup: str | None = LOOKUP) -> tuple[Workload, SimSpec, CostModel]:
    """(workload, spec, cost model) that simulate ``cfg`` on ``records`` with the engine's accounting."""
    n = max(len(records), 1)
    model = None if cfg.method == LOOKUP else cfg.method
    if model is not None and model not in DRAFTERS:
        raise SpecReproError(f"{cfg.config}: the simulator has no slot for method {cfg.method!r}")
    cost = load_cost_model(cost_model, drafter=model) if model else load_cost_model(cost_model)
    slot = "ngram" if model is None else "eagle"
    if cfg.mode == "controlled":
        w = _controlled_workload(records, dataset, cfg)
        return w, SimSpec(slot, f"fixed-{cfg.k}", ngram_match_prob=1.0, num_requests=n, seed=seed), cost
    if cfg.mode == "fixed":
        w = workload(records, dataset, lookup, cfg.method)
        return w, SimSpec(slot, f"fixed-{cfg.k}", ngram_match_prob=ngram_match, num_requests=n, seed=seed), cost
    if lookup is None and (cfg.mode == "hybrid" or cfg.of == "combine"):
        raise SpecReproError(f"{cfg.config}: needs n-gram traces")
    if cfg.mode == "oracle":
        if cfg.of == "combine":
            if model is None:
                raise SpecReproError(f"{cfg.config}: oracle-combine pairs n-gram with a model drafter")
            w = workload(records, dataset, lookup, model)
            return w, SimSpec("combined", "oracle", combine_cost="both", num_requests=n, seed=seed,
                              engine_k=cfg.k), cost
        of_model = None if cfg.of == LOOKUP else cfg.of
        w = workload(records, dataset, lookup, of_model or lookup)
        return w, SimSpec("ngram" if of_model is None else "eagle", "oracle", num_requests=n, seed=seed,
                          engine_k=cfg.k), cost
    if model is None:
        raise SpecReproError(f"{cfg.config}: the hybrid pairs n-gram with a model drafter")
    w = workload(records, dataset, lookup, model)
    pol = {"adaptive": "adaptive", "ngram-first": "ngram-first"}.get(cfg.policy or "")
    if pol is None:
        raise SpecReproError(f"{cfg.config}: unknown hybrid policy {cfg.policy!r}")
    return w, SimSpec("combined", pol, ngram_match_prob=ngram_match, num_requests=n, seed=seed,
                      adaptive=hybrid_params(cfg.k)), cost


def mean_accepted(w: Workload, spec: SimSpec, cost: CostModel) -> float:
    """Mean tokens produced per decode step (accepted + 1) of ``spec`` on ``w`` (all requests, B = 1)."""
    idx, _ = draw_requests(w, spec)
    acc, ng, ea = request_traces(w, spec.proposer, idx)
    s = decode_steps(spec, acc, ng, ea, w.prompt_len[idx], 1, cost)
    return float(s.produced.mean()) if s.produced.size else float("nan")


def measured_by_config(points: pd.DataFrame, request_ids: Mapping[str, Mapping[int, str]],
                       traced: Mapping[str, set[str]], configs: Mapping[tuple, DraftConfig]) -> pd.DataFrame:
    """Measured speedup of every benchmarked point of ``configs`` (keyed by (config, profile); per exp, dataset,
    config, profile, B) over no SD on the same requests that are in the trace set, with the paired bootstrap
    interval (the closed loop's pairing)."""
    ok = points[points["status"] == "ok"].copy()
    ok["profile"] = ok["profile"].fillna("").astype(str) if "profile" in ok else ""
    base = ok[ok["method"] == "none"]
    want = [(c, p) in configs for c, p in zip(ok["config"], ok["profile"])]
    rows = []
    for (exp, ds, cfg, prof, b), g in ok[want].groupby(["exp", "dataset", "config", "profile", "batch_size"],
                                                        sort=True):
        bb = base[(base["exp"] == exp) & (base["dataset"] == ds) & (base["batch_size"] == b)]
        point = measured_point(g, bb, request_ids.get(ds, {}), traced.get(ds, set()))
        if point:
            rows.append({"exp": str(exp), "dataset": str(ds), "config": str(cfg), "profile": str(prof),
                         "batch_size": int(b), **point})
    return pd.DataFrame(rows, columns=KEY + ["requests", "request_ids", "measured", "measured_ci_low",
                                             "measured_ci_high", "measured_sd_throughput",
                                             "measured_baseline_throughput", "baseline", "reference_vs_job"])


def simulated_by_config(measured: pd.DataFrame, traces: Mapping[str, Sequence[TraceRecord]],
                        configs: Mapping[tuple, DraftConfig], cost_model: str, *, ngram_match: float,
                        seed: int) -> pd.DataFrame:
    """The simulator at each measured row, on that row's requests (engine accounting, :func:`sim_setup`)."""
    rows = []
    for r in measured.itertuples(index=False):
        cfg = configs[(r.config, r.profile)]
        want = set(r.request_ids)
        recs = [t for t in traces[r.dataset] if t.id in want]
        if len(recs) != len(want):
            raise SpecReproError(f"{r.exp} {r.dataset}: {len(want) - len(recs)} measured request(s) not traced")
        w, spec, cost = sim_setup(cfg, recs, r.dataset, cost_model, ngram_match=ngram_match, seed=seed)
        s = simulate(w, spec, [int(r.batch_size)], cost).summary.iloc[0]
        rows.append({"exp": r.exp, "dataset": r.dataset, "config": r.config, "profile": r.profile,
                     "batch_size": int(r.batch_size), "mode": cfg.mode,
                     "method": cfg.label if cfg.mode != "controlled" else cfg.method, "drafter": cfg.method,
                     "k": cfg.k, "mean_accepted": mean_accepted(w, spec, cost), **simulated_fields(s)})
    return pd.DataFrame(rows, columns=KEY + ["mode", "method", "drafter", "k", "mean_accepted", "simulated",
                                             "simulated_ci_low", "simulated_ci_high", "simulated_sd_throughput",
                                             "simulated_baseline_throughput"])


def paired_table(simulated: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Simulated next to measured on :data:`KEY` (each key once on both sides); the error columns."""
    for name, df in (("simulated", simulated), ("measured", measured)):
        if df.duplicated(KEY).any():
            raise SpecReproError(f"{name} speedups hold key {tuple(df.loc[df.duplicated(KEY), KEY].iloc[0])} twice")
    out = measured.drop(columns=["request_ids"], errors="ignore").merge(simulated, on=KEY, how="inner",
                                                                          validate="one_to_one")
    return with_baseline(with_errors(out)).sort_values(KEY).reset_index(drop=True)[COLUMNS]


def gap_closed(value: float, best_single: float, combine: float) -> float:
    """Share of the gap from the best single method to Oracle Combine that ``value`` closes:
    ``(value - best) / (combine - best)`` (negative: below the best single method; NaN: no gap)."""
    gap = combine - best_single
    if not np.isfinite(gap) or gap <= 0:
        return float("nan")
    return float((value - best_single) / gap)


def hybrid_summary(table: pd.DataFrame, singles: Sequence[str]) -> pd.DataFrame:
    """Per (exp, dataset, B) and hybrid: its measured and simulated speedup, the best single method (the highest
    measured of ``singles``; its simulated value alongside), Oracle Combine measured and simulated, and the share
    of the gap each closes (:func:`gap_closed`, measured against measured, simulated against simulated; measured
    only where Oracle Combine's 95 % interval lies wholly above the best single method, else NaN)."""
    rows = []
    for (exp, ds, b), g in table.groupby(["exp", "dataset", "batch_size"], sort=True):
        single = g[g["method"].isin(list(singles))]
        comb = g[g["method"] == "oracle-combine"]
        if single.empty:
            continue
        best = single.loc[single["measured"].idxmax()]
        best_sim = single["simulated"].max()
        cm = float(comb["measured"].iloc[0]) if len(comb) else float("nan")
        # a measured gap only where Oracle Combine's whole interval lies above the best single method: a gap inside
        # the noise makes the share meaningless (a 0.01x gap turned a 0.2x loss into "-1800 % closed")
        cm_low = float(comb["measured_ci_low"].iloc[0]) if len(comb) and "measured_ci_low" in comb else float("nan")
        resolved = np.isfinite(cm_low) and cm_low > float(best["measured"])
        cs = float(comb["simulated"].iloc[0]) if len(comb) else float("nan")
        for h in g[g["mode"] == "hybrid"].itertuples(index=False):
            rows.append({"exp": exp, "dataset": ds, "batch_size": int(b), "hybrid": h.method, "config": h.config,
                         "drafter": h.drafter, "k": int(h.k),
                         "measured": h.measured, "measured_ci_low": h.measured_ci_low,
                         "measured_ci_high": h.measured_ci_high, "simulated": h.simulated, "error": h.error,
                         "best_single": best["method"],
                         "best_single_k": int(best["k"]) if "k" in best and pd.notna(best["k"]) else None,
                         "best_single_measured": float(best["measured"]),
                         "best_single_simulated": float(best_sim), "combine_measured": cm, "combine_simulated": cs,
                         "vs_best_measured": h.measured / float(best["measured"]) - 1.0,
                         "gap_closed_measured": (gap_closed(h.measured, float(best["measured"]), cm) if resolved
                                                 else float("nan")),
                         "gap_closed_simulated": gap_closed(h.simulated, float(best_sim), cs)})
    return pd.DataFrame(rows)


SHARE_COLUMNS = ["exp", "dataset", "config", "profile", "batch_size", "request_index", "share_ngram", "share_drafter",
                 "departed_requests", "counters_agree", "lossless"]


def choice_shares(points: pd.DataFrame) -> pd.DataFrame:
    """Per hybrid point (dataset, request, B): the share of its verified steps whose draft came from n-gram and from
    the model drafter (the draft job's own per-point columns, from the hook's records), departures, the check
    against vLLM's counters and losslessness."""
    if "mode" not in points:
        return pd.DataFrame(columns=SHARE_COLUMNS)
    h = points[(points["mode"] == "hybrid") & (points["status"] == "ok")]
    return h[[c for c in SHARE_COLUMNS if c in h.columns]].sort_values(
        ["dataset", "config", "batch_size", "request_index"]).reset_index(drop=True)


def drafter_pass_ms(cost: CostModel, kv: float, k: int, batch_size: int = 1) -> dict:
    """The model drafter's cost per step from the cost model at cache size ``kv``: its first pass (one input
    token, what the hybrid pays where every request takes n-gram's draft) and its whole ``k``-token draft
    (``k + 1`` inputs, where one takes the drafter's), and the target's step verifying
    ``k + 1`` tokens of ``batch_size`` requests, in ms."""
    return {"first_pass_ms": 1e3 * float(cost.eagle_draft(kv, 1, batch_size)),
            "full_draft_ms": 1e3 * float(cost.eagle_draft(kv, k + 1, batch_size * (k + 1))),
            "target_step_ms": 1e3 * float(cost.target(kv, batch_size * (k + 1))
                                          + cost.overhead_at(batch_size * (k + 1), sd=False))}


# --- configurations, summaries, the verb --------------------------------------------------------------------------


def draft_configs(label: str, job: Mapping[str, Any], traced: Sequence[str]) -> list[DraftConfig]:
    """The :class:`DraftConfig` s of one engine job: a draft job (:func:`specrepro.jobspec.drafts.draft_jobs`:
    ``mode``, ``of``, ``policy``, ``drafter``, ``k``, ``profiles``; a controlled job one per profile, by default
    ``none`` and ``all``), or a plain fixed-k job of a traced method (``experiment_configs``: ``mode = 'fixed'``);
    none for anything else (no SD, trees, k by batch size)."""
    mode = job.get("mode")
    k = job.get("k")
    if k is None:
        return []
    if mode in ("oracle", "controlled", "hybrid"):
        method = job.get("drafter") if mode != "oracle" or job.get("of") == "combine" else job.get("of")
        profiles = (job.get("profiles") or ["none", "all"]) if mode == "controlled" else [None]
        return [DraftConfig(label, mode, str(method or job["method"]), int(k), of=job.get("of"),
                            policy=job.get("policy"), profile=p) for p in profiles]
    if job.get("tree") or job.get("k_by_batch_size") or job["method"] not in traced:
        return []
    return [DraftConfig(label, "fixed", str(job["method"]), int(k))]


def summarise(table: pd.DataFrame) -> dict:
    """Points, median and worst |error| (with the worst point), mean signed error (> 0: the simulator optimistic),
    points inside the measured interval."""
    if table.empty:
        return {"points": 0, "median_abs_error": None, "worst_abs_error": None, "mean_error": None, "worst": None}
    w = table.loc[table["abs_error"].idxmax()]
    return {"points": int(len(table)), "median_abs_error": float(table["abs_error"].median()),
            "worst_abs_error": float(w["abs_error"]), "mean_error": float(table["error"].mean()),
            "worst": {c: (int(w[c]) if c in ("batch_size", "k") else str(w[c])) for c in
                      ("dataset", "config", "method", "k", "batch_size", "profile")},
            "within_measured_ci": int(table["within_measured_ci"].sum()), **job_split(table)}


def repeat_check(table: pd.DataFrame) -> dict:
    """The same configuration measured in two jobs: a controlled run whose profile is method ``m``'s own trace at
    k (``trace-<m>``) drafts and accepts as the fixed-k job of ``m`` does, so their measured speedups differ only
    by the jobs' timing (load drift between jobs); per pair ``controlled / fixed - 1``, with the simulated pair."""
    c = table[(table["mode"] == "controlled") & table["profile"].astype(str).str.startswith("trace-")].copy()
    f = table[table["mode"] == "fixed"]
    if c.empty or f.empty:
        return {"pairs": 0}
    c["of"] = c["profile"].str.removeprefix("trace-")
    m = c.merge(f, left_on=["dataset", "of", "k", "batch_size"], right_on=["dataset", "method", "k", "batch_size"],
                suffixes=("", "_fixed"))
    if m.empty:
        return {"pairs": 0}
    d = m["measured"] / m["measured_fixed"] - 1
    return {"pairs": int(len(m)), "median_abs": float(d.abs().median()), "max_abs": float(d.abs().max()),
            "simulated_median_abs": float((m["simulated"] / m["simulated_fixed"] - 1).abs().median()),
            "rows": [{"dataset": r.dataset, "method": r.of, "k": int(r.k), "batch_size": int(r.batch_size),
                      "controlled": float(r.measured), "fixed": float(r.measured_fixed)} for r in m.itertuples()]}


def _points(rows: pd.DataFrame, note, labels: Mapping[str, str]) -> str:
    """"<policy> on <dataset label> at B = <b> (<note(row)>)" for each hybrid row, joined by "; "."""
    return "; ".join(f"{r.hybrid.removeprefix('hybrid-')} on {labels.get(r.dataset, r.dataset)} at B = "
                     f"{int(r.batch_size)} ({note(r)})" for r in rows.itertuples(index=False))


def hybrid_finding(hyb: pd.DataFrame, costs: Mapping[str, Mapping], hybrid_err: Mapping,
                   dataset_labels: Mapping[str, str] | None = None) -> dict:
    """The report's sentences on the hybrid: the finding, and where it loses and why (the model drafter's cost per
    step from the cost model: ``costs`` = {dataset@B: :func:`drafter_pass_ms`}). The share of the gap closed is
    stated over the points where Oracle Combine, as the engine runs it, is above the best single method. Datasets
    are named by ``dataset_labels`` (the config's labels, as the tables name them), methods by their labels."""
    labels = dict(dataset_labels or {})
    if hyb.empty:
        return {"finding": "No hybrid configuration was both benchmarked and traced: nothing measured.", "loses": "",
                "loses_why": ""}
    out = {}
    for name, g in hyb.groupby("hybrid", sort=True):
        gm = g["gap_closed_measured"].dropna()
        gs = g["gap_closed_simulated"].dropna()
        out[name] = {
            "points": int(len(g)), "measured_min": float(g["measured"].min()), "measured_max": float(g["measured"].max()),
            "at_least_best": int((g["measured_ci_high"] >= g["best_single_measured"]).sum()),
            "gap_points_measured": int(len(gm)), "gap_points_simulated": int(len(gs)),
            "median_gap_closed_measured": float(gm.median()) if len(gm) else None,
            "median_gap_closed_simulated": float(gs.median()) if len(gs) else None,
            "median_vs_best": float(g["vs_best_measured"].median())}
    name = "hybrid-adaptive" if "hybrid-adaptive" in out else next(iter(out))
    ad = out[name]
    if ad["gap_points_measured"]:
        sim = ad["median_gap_closed_simulated"]
        gap = (f"; where Oracle Combine as the engine runs it lies above the best single method by more than its 95 % "
               f"interval ({ad['gap_points_measured']} "
               f"points) the hybrid closes a median {100 * ad['median_gap_closed_measured']:.0f} % of that gap measured"
               + (f" ({100 * sim:.0f} % simulated)" if sim is not None else ""))
    else:
        gap = ("; Oracle Combine as the engine runs it (both drafters every step, the model drafter's whole draft) "
               "lies above the best single method by more than its 95 % interval at no point, so there is no measured "
               "gap for it to close")
    err = hybrid_err.get("median_abs_error")
    finding = (f"Chosen online inside vLLM, the {name.removeprefix('hybrid-')} hybrid of n-gram and the model drafter "
               f"reaches {ad['measured_min']:.2f}-{ad['measured_max']:.2f}x over no SD and is within its 95 % interval "
               f"of the better single method at {ad['at_least_best']} of {ad['points']} (dataset, B) points (median "
               f"{100 * ad['median_vs_best']:+.0f} % against it){gap}"
               + (f"; the simulator, charging what the engine pays, predicts the hybrids within a median {100 * err:.0f} %."
                  if err is not None else "."))
    lose = hyb[hyb["measured_ci_high"] < hyb["best_single_measured"]]
    loses_why = ""  # why it loses, apart from where (the hybrid table reads the where on point values when it must)
    if lose.empty:
        loses = "It is not below the better single method beyond its 95 % interval at any measured point."
    else:
        pts = _points(lose, lambda r: f"{100 * r.vs_best_measured:+.0f} % against "
                                      f"{METHOD_LABELS.get(r.best_single, r.best_single)}", labels)
        cs = [costs[k] for k in costs]
        why = beyond = ""
        if cs:
            full = np.array([c["full_draft_ms"] for c in cs])
            first = np.array([c["first_pass_ms"] for c in cs])
            tgt = np.array([c["target_step_ms"] for c in cs])
            why = (f" From this run's cost model the model drafter's first pass, which the hybrid runs at every step "
                   f"to keep the drafter's KV cache in step, costs {first.min():.1f}-{first.max():.1f} ms against a "
                   f"target step of {tgt.min():.0f}-{tgt.max():.0f} ms ({100 * (first / tgt).min():.0f}-"
                   f"{100 * (first / tgt).max():.0f} %); its whole draft, which the hybrid runs where a request of the "
                   f"batch takes the drafter's draft, {full.min():.1f}-{full.max():.1f} ms "
                   f"({100 * (full / tgt).min():.0f}-{100 * (full / tgt).max():.0f} %).")
            # on the point values, whichever points the text before this names (the summary's or the table's)
            share = float((first / tgt).max())
            big = hyb[-hyb["vs_best_measured"] > share]
            if big.empty:
                beyond = (f" On the point values no hybrid is further below the better single method than the first "
                          f"pass's largest share of a target step ({100 * share:.1f} %).")
            else:
                names = _points(big, lambda r: f"{100 * r.vs_best_measured:+.1f} %", labels)
                took = (f"; there the hybrid took the drafter's draft at a median "
                        f"{100 * (1 - big['share_ngram'].median()):.0f} % of steps and paid for that draft each time"
                        if "share_ngram" in big and big["share_ngram"].notna().any() else "")
                beyond = (f" On the point values it is further below the better single method than the first pass's "
                          f"largest share of a target step ({100 * share:.1f} %) at: {names}{took}.")
        loses_why = ("The hybrid pays the model drafter's first pass at every step, also where n-gram's draft is "
                     "verified, and its whole draft wherever it chooses the drafter's, so where n-gram or no "
                     "speculation is the better choice it starts every step that first pass behind, which only the steps "
                     "where the drafter's draft is accepted further than n-gram's can win back." + why + beyond)
        loses = f"Where it loses (below the better single method beyond its 95 % interval): {pts}. {loses_why}"
    return {"finding": finding, "loses": loses, "loses_why": loses_why, "by_hybrid": out}


def hybrid_falsification(measured: pd.DataFrame, traces: Mapping[str, Sequence[TraceRecord]],
                         configs: Mapping[tuple, DraftConfig], methods: Sequence[str], cost_model: str, *,
                         ngram_match: float, seed: int) -> dict:
    """The hybrids' closed loop (their rows of ``measured``) with the real traces and with each wrong-acceptance
    variant of :func:`specrepro.analysis.falsify.variant_traces` (same measured points, cost model, requests and
    seed): per variant the median |error|, its ratio to the real one and ``falsified`` (ratio >= ``FACTOR``), or
    ``not_applicable`` with the reason. ``no-traces`` is not one: the hybrid has no other configuration to copy."""
    hyb = measured[[configs[(c, p)].mode == "hybrid" for c, p in zip(measured["config"], measured["profile"])]]
    if hyb.empty:
        return {"factor": FACTOR, "points": 0, "variants": {}}
    out: dict = {"factor": FACTOR, "points": int(len(hyb)), "variants": {}}
    real = None
    for v in (x for x in VARIANTS if x != "no-traces"):
        tr = variant_traces(traces, methods, v)
        if isinstance(tr, str):
            out["variants"][v] = {"not_applicable": tr}
            continue
        t = paired_table(simulated_by_config(hyb, tr, configs, cost_model, ngram_match=ngram_match, seed=seed), hyb)
        med = float(t["abs_error"].median())
        row = {"median_abs_error": med, "worst_abs_error": float(t["abs_error"].max()),
               "mean_error": float(t["error"].mean())}
        if v == "real":
            real = med
        else:
            row["ratio"] = med / real if real else float("inf")
            row["falsified"] = bool(row["ratio"] >= FACTOR)
        out["variants"][v] = row
    applied = [r for k, r in out["variants"].items() if "falsified" in r]
    out["falsified"] = sum(r["falsified"] for r in applied)
    out["applied"] = len(applied)
    return out


def falsification_sentence(doc: Mapping) -> str:
    """One sentence on :func:`hybrid_falsification`'s document for the report (empty without hybrid points)."""
    vs = doc.get("variants") or {}
    if not doc.get("points") or "real" not in vs:
        return ""
    wrong = [(k, r) for k, r in vs.items() if "ratio" in r]
    parts = ", ".join(f"{VARIANT_LABELS.get(k, k)} {100 * r['median_abs_error']:.0f} % ({r['ratio']:.1f}x)"
                      for k, r in wrong)
    missing = [VARIANT_LABELS.get(k, k) for k, r in vs.items() if "not_applicable" in r]
    return (f"Fed the wrong acceptance (the closed loop's falsification variants), the simulator's median |error| on "
            f"the {doc['points']} hybrid points goes from {100 * vs['real']['median_abs_error']:.0f} % to: {parts}; "
            f"{doc['falsified']} of {doc['applied']} variants reach {doc['factor']:g}x the real error"
            + (f" ({', '.join(missing)}: not applicable)" if missing else "") + ".")


def run_drafted(a) -> None:
    """The body of ``specrepro engine-drafted``."""
    points, ids, traces, traced = experiment_inputs(a.points, a.exp, a.prompts, a.traces)
    run_config = read_json(a.run_config)
    exp = next((e for e in run_config.get("experiments") or [] if e["name"] == a.exp), None)
    if exp is None:
        raise SpecReproError(f"{a.run_config}: no experiment {a.exp!r}")
    jobs = {**experiment_configs(exp), **draft_jobs(exp)}
    configs = {(c.config, c.point_profile): c for lab, job in jobs.items() for c in draft_configs(lab, job, a.methods)}
    match = float(read_json(a.schedule).get("ngram_match_prob", 1.0))
    meas = measured_by_config(points, ids, traced, configs)
    sim = simulated_by_config(meas, traces, configs, a.cost_model, ngram_match=match, seed=a.seed)
    table = paired_table(sim, meas)
    cal = table[table["mode"] == "controlled"]
    bounds = table[table["mode"].isin(["oracle", "fixed"])]
    # the hybrid's own proposers: n-gram and the model drafter it pairs with
    singles = [LOOKUP] + sorted({c.method for c in configs.values() if c.mode == "hybrid"})
    hyb_rows = table[table["mode"].isin(["fixed", "hybrid"]) | (table["method"] == "oracle-combine")]
    hyb = hybrid_summary(hyb_rows, singles)
    sh = choice_shares(points)
    if len(hyb) and len(sh):
        med = sh.groupby(["dataset", "config", "batch_size"], as_index=False).agg(
            share_ngram=("share_ngram", "median"), share_ngram_min=("share_ngram", "min"),
            share_ngram_max=("share_ngram", "max"))
        hyb = hyb.merge(med.astype({"batch_size": "int64"}), on=["dataset", "config", "batch_size"], how="left")
    write_csv(a.calibration, cal, float_format="%.6g")
    write_csv(a.bounds, bounds, float_format="%.6g")
    write_csv(a.hybrid, hyb, float_format="%.6g")
    costs = {}
    for (ds, b), g in table[table["mode"] == "hybrid"].groupby(["dataset", "batch_size"]):
        cfg = configs[(g["config"].iloc[0], g["profile"].iloc[0])]
        recs = traces[ds]
        ctx = float(np.mean([r.prompt_token_ids.size + r.output_len / 2 for r in recs]))
        costs[f"{ds}@{int(b)}"] = drafter_pass_ms(load_cost_model(a.cost_model, drafter=cfg.method), int(b) * ctx, cfg.k,
                                                int(b))
    hyb_err = summarise(table[table["mode"] == "hybrid"])
    hyb_false = hybrid_falsification(meas, traces, configs, a.methods, a.cost_model, ngram_match=match, seed=a.seed)
    write_csv(a.shares, sh, float_format="%.6g")
    shares = {f"{c}@{int(b)}": {"points": int(len(g)), "median_share_ngram": float(g["share_ngram"].median()),
                                "min_share_ngram": float(g["share_ngram"].min()),
                                "max_share_ngram": float(g["share_ngram"].max())}
              for (c, b), g in sh.groupby(["config", "batch_size"])} if len(sh) else {}
    departed = {}
    if "departed_requests" in points:
        dp = points[points["config"].isin({c for c, _ in configs}) & points["departed_requests"].notna()]
        departed = {f"{c}@{int(b)}": int(g["departed_requests"].sum()) for (c, b), g in dp.groupby(["config", "batch_size"])}
    write_json(a.summary, {
        "exp": a.exp, "ngram_match_prob": match, "accounting": ENGINE_DRAFTER_CHARGE, "hybrid_accounting": HYBRID_DRAFTER_CHARGE,
        "calibration": {**summarise(cal), "ks": sorted({int(k) for k in cal["k"]}),
                        "profiles": sorted(set(cal["profile"]))},
        "repeat": repeat_check(table),
        "oracle": summarise(table[table["mode"] == "oracle"]), "fixed": summarise(table[table["mode"] == "fixed"]),
        "hybrid": hyb_err, "hybrid_falsification": {**hyb_false, "sentence": falsification_sentence(hyb_false)},
        "drafter_cost_ms": costs, "choice_shares": shares, "departed_requests": departed,
        **hybrid_finding(hyb, costs, hyb_err, dataset_labels(run_config))})
