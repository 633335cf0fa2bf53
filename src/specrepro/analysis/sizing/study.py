"""The validation study: the sizing rule checked by subsampling the released traces at the sized request counts
(coverage of the intervals, decisions)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from ...core.uncertainty import bootstrap_function_ci, bootstrap_ratio_ci
from ...sim.simulator import PAPER_POLICIES, PROPOSERS
from ..claims import NOT_REPRODUCED, REPRODUCED, Claim, decisive_half_width, status_from_interval
from .claims import SIZED, envelope_quantity, size_claims
from .power import POWER, drop_pct, expected_half_width, margin, requests_needed, spread_function, spread_ratio
from .quantities import parse_engine_key
from .variance import TraceProxy, proxy_policy


# --- validating the rule on the released traces ------------------------------------------------------

STUDY_COLUMNS = ["id", "kind", "role", "measured_by", "than", "dataset", "proposer", "policy", "batch_sizes",
                 "full_requests", "requests", "replications", "full_value", "full_value_b", "full_status", "spread",
                 "predicted_half_width", "mean_half_width", "target_half_width", "within_target", "coverage",
                 "coverage_ci_low", "coverage_ci_high", "coverage_b", "agree", "undecided", "opposite", "note"]

#: roles of a study row: a simulator claim decided by subsamples; the traces' stand-in of a sized engine claim
SIM_CLAIM, ENGINE_PROXY = "simulator claim", "engine proxy"


def wilson_interval(hits: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (the coverage's own uncertainty over the replications)."""
    if trials <= 0:
        return float("nan"), float("nan")
    z = NormalDist().inv_cdf((1 + level) / 2)
    p = hits / trials
    den = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / den
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class StudyQuantity:
    """Per-request values of one quantity (and of a second one, for an ordering) and how it is computed.

    ``arrays``: per-request arrays over the same requests; ``stat``: ``ratio`` (mean(a0) / mean(a1)) or
    ``drop`` (:func:`drop_pct` of four means); ``arrays_b`` for the ordering's second quantity.
    """

    arrays: tuple[np.ndarray, ...]
    stat: str = "ratio"
    arrays_b: tuple[np.ndarray, ...] | None = None


def _value(arrays, stat: str) -> float:
    if stat == "ratio":
        return float(arrays[0].mean() / arrays[1].mean())
    return drop_pct(*(a.mean() for a in arrays))


def _interval(arrays, stat: str):
    if stat == "ratio":
        return bootstrap_ratio_ci(arrays[0], arrays[1])
    return bootstrap_function_ci(list(arrays), drop_pct)


def _spread(arrays, stat: str) -> float:
    return spread_ratio(arrays[0], arrays[1]) if stat == "ratio" else spread_function(list(arrays), drop_pct)


def subsample_study(q: StudyQuantity, n: int, replications: int, seed: int, claim: Claim | None = None,
                    target: float = float("nan")) -> dict:
    """Draw ``replications`` subsamples of ``n`` requests (with replacement: the full sample is the population,
    its value the truth), each with the artifact's bootstrap interval (:mod:`specrepro.core.uncertainty`: 2000
    resamples, seed 42); return the coverage of the full-sample value, the mean half-width, the share within
    ``target`` and, given a ``claim``, how often the subsample's status equals the full sample's (decided on
    its point, as the claims table does for the paper's own requests)."""
    rng = np.random.default_rng(seed)
    full = _value(q.arrays, q.stat)
    full_b = _value(q.arrays_b, q.stat) if q.arrays_b is not None else None
    N = q.arrays[0].size
    full_status = None
    if claim is not None:
        other = (full_b, None, None) if claim.kind == "ordering" else None
        full_status = status_from_interval(claim, full, other=other)
    cover = cover_b = within = agree = undecided = opposite = 0
    widths = []
    for _ in range(replications):
        idx = rng.integers(0, N, size=n)
        iv = _interval([a[idx] for a in q.arrays], q.stat)
        cover += iv.low <= full <= iv.high
        hw = iv.width / 2
        widths.append(hw)
        ivb = None
        if q.arrays_b is not None:
            ivb = _interval([a[idx] for a in q.arrays_b], q.stat)
            cover_b += ivb.low <= full_b <= ivb.high
            hw = max(hw, ivb.width / 2)
        within += hw <= target
        if claim is not None:
            other = (ivb.estimate, ivb.low, ivb.high) if ivb is not None else None
            st = status_from_interval(claim, iv.estimate, iv.low, iv.high, other=other)
            agree += st == full_status
            undecided += st not in (REPRODUCED, NOT_REPRODUCED)
            opposite += st in (REPRODUCED, NOT_REPRODUCED) and st != full_status
    lo, hi = wilson_interval(cover, replications)
    nan = float("nan")
    return {
        "full_requests": N, "requests": n, "replications": replications, "full_value": full,
        "full_value_b": nan if full_b is None else full_b, "full_status": full_status or "",
        "mean_half_width": float(np.mean(widths)), "within_target": within / replications if math.isfinite(target)
        else nan, "coverage": cover / replications, "coverage_ci_low": lo, "coverage_ci_high": hi,
        "coverage_b": cover_b / replications if q.arrays_b is not None else nan,
        "agree": agree / replications if claim is not None else nan,
        "undecided": undecided / replications if claim is not None else nan,
        "opposite": opposite / replications if claim is not None else nan,
    }


def parse_sim_key(key: str, traceset: str) -> tuple[str, str, str, int] | None:
    """(dataset, proposer, policy, B) of a paper-mode simulator key ``sim.<trace set>.<dataset>.<proposer>.<policy>.b<B>``;
    None for other keys (variants carry a suffix on the policy)."""
    pre = f"sim.{traceset}."
    if not key or not key.startswith(pre):
        return None
    parts = key[len(pre):].split(".")
    if len(parts) != 4 or parts[1] not in PROPOSERS or parts[2] not in PAPER_POLICIES or not parts[3].startswith("b"):
        return None
    try:
        return parts[0], parts[1], parts[2], int(parts[3][1:])
    except ValueError:
        return None


def _sim_arrays(proxy: TraceProxy, ds: str, prop: str, pol: str, b: int) -> pd.DataFrame:
    return proxy.requests(ds, prop, pol, b).set_index("request_id")[["sd_throughput", "baseline_throughput"]]


def _paired(a: pd.DataFrame, b: pd.DataFrame | None):
    """Both quantities over the requests they share (same request ids, one order)."""
    if b is None:
        return tuple(a[c].to_numpy(float) for c in a.columns), None
    common = a.index.intersection(b.index)
    return (tuple(a.loc[common, c].to_numpy(float) for c in a.columns),
            tuple(b.loc[common, c].to_numpy(float) for c in b.columns))


def simulator_study_rows(claims: Sequence[Claim], traceset: str, proxy: TraceProxy, replications: int,
                         seed: int, power: float = POWER, headline_only: bool = True) -> list[dict]:
    """One row per simulator claim (paper mode, headline by default): its full-sample value on the authors' draw,
    the requests the sizing rule gives it, and the subsamples' coverage and decisions."""
    rows = []
    for c in claims:
        if c.evidence != "simulator" or (headline_only and not c.headline):
            continue
        a = parse_sim_key(c.measured_by or "", traceset)
        b = parse_sim_key(c.than or "", traceset) if c.kind == "ordering" else None
        if a is None or (c.kind == "ordering" and b is None):
            continue
        ta = _sim_arrays(proxy, *a)
        tb = _sim_arrays(proxy, *b) if b is not None else None
        arrays, arrays_b = _paired(ta, tb)
        q = StudyQuantity(arrays, "ratio", arrays_b)
        rows.append(_study_row(c, q, SIM_CLAIM, a, c.measured_by, c.than or "", replications, seed, power))
    return rows


def _study_row(claim: Claim, q: StudyQuantity, role: str, where, key: str, than: str, replications: int,
               seed: int, power: float) -> dict:
    nan = float("nan")
    full = _value(q.arrays, q.stat)
    full_b = _value(q.arrays_b, q.stat) if q.arrays_b is not None else None
    s = max(_spread(q.arrays, q.stat), _spread(q.arrays_b, q.stat) if q.arrays_b is not None else 0.0)
    d = decisive_half_width(claim, full, full_b)
    inside = claim.kind != "value" or status_from_interval(claim, full) == REPRODUCED
    m = margin(claim.kind, power, inside=inside)
    n = requests_needed(s, d, m)
    N = q.arrays[0].size
    row = {c: nan for c in STUDY_COLUMNS}
    row.update(id=claim.id, kind=claim.kind, role=role, measured_by=key, than=than, dataset=where[0],
               proposer=where[1], policy=where[2], batch_sizes=str(where[3]), spread=s, target_half_width=m * d,
               full_requests=N, note="")
    if not math.isfinite(n) or n > N:
        row.update(full_value=full, full_value_b=nan if full_b is None else full_b, requests=n,
                   full_status=status_from_interval(claim, full, other=(full_b, None, None) if full_b is not None else None),
                   note=f"the rule asks for {'more than ' + str(N) if math.isfinite(n) else 'unboundedly many'} requests "
                        f"(the value is within {d:.2g} of what decides the claim): decided on the paper's own requests only")
        return row
    row.update(subsample_study(q, int(n), replications, seed, claim, m * d))
    row["predicted_half_width"] = expected_half_width(s, n)
    return row


def engine_proxy_rows(sizing: pd.DataFrame, cfg: Mapping[str, Any], claims: Sequence[Claim], proxy: TraceProxy,
                      replications: int, seed: int) -> list[dict]:
    """One row per traces' stand-in of a sized engine claim of ``cfg`` (``sizing``: :func:`size_claims`): the proxy
    quantity subsampled at the requests the config gives the claim; coverage of the proxy's full-sample value and
    the share of subsamples whose half-width is within the claim's target (scaled to the proxy's level as the
    sizing scaled the spread). Engine claims are not decided here: the traces are not the engine's."""
    by_id = {c.id: c for c in claims}
    exps = [e["name"] for e in cfg.get("experiments", []) or []]
    dsets = list(cfg.get("datasets", {}))
    rows: list[dict] = []
    seen: dict[tuple, dict] = {}
    nan = float("nan")
    for r in sizing.to_dict("records"):
        if r["status"] != SIZED or "pilot" in str(r["source"]):
            continue
        c = by_id[r["id"]]
        key = envelope_quantity(c, claims) or c.measured_by
        keys = [key] + ([c.than] if c.kind == "ordering" else [])
        for i, k in enumerate(keys):
            qq = parse_engine_key(k, exps, dsets)
            if qq is None or qq.job == "profile" or qq.method == "none":
                continue
            ds = proxy.dataset_for(qq.dataset)
            prop, pol = proxy_policy(qq.method, qq.k)
            n = int(r["requests"])
            level = r["expected"] if i == 0 else r["expected_b"]
            ident = (ds, prop, pol, qq.name, qq.batch_sizes, n)
            if ident in seen:  # the same stand-in at the same size: one row naming every claim it serves
                seen[ident]["id"] = " ".join(dict.fromkeys(seen[ident]["id"].split() + [c.id]))
                continue
            if qq.name == "speedup":
                t = _sim_arrays(proxy, ds, prop, pol, qq.batch_sizes[0])
                q = StudyQuantity((t["sd_throughput"].to_numpy(float), t["baseline_throughput"].to_numpy(float)))
                scale = _value(q.arrays, "ratio") / level
            elif qq.name == "speedup_drop_pct":
                t0, t1 = (_sim_arrays(proxy, ds, prop, pol, b) for b in qq.batch_sizes)
                q = StudyQuantity((t0["sd_throughput"].to_numpy(float), t0["baseline_throughput"].to_numpy(float),
                                   t1["sd_throughput"].to_numpy(float), t1["baseline_throughput"].to_numpy(float)),
                                  "drop")
                scale = 1.0
            else:
                continue
            target = r["target_half_width"] * scale
            row = {col: nan for col in STUDY_COLUMNS}
            row.update(id=c.id, kind=c.kind, role=ENGINE_PROXY, measured_by=k, than="", dataset=ds, proposer=prop,
                       policy=pol, batch_sizes="->".join(str(b) for b in qq.batch_sizes), spread=_spread(q.arrays, q.stat),
                       target_half_width=target, note=f"stands in for {qq.dataset} {qq.config} in {qq.exp}")
            row.update(subsample_study(q, n, replications, seed, target=target))
            row["predicted_half_width"] = expected_half_width(row["spread"], n)
            rows.append(row)
            seen[ident] = row
    return rows


def validation_study(claims: Sequence[Claim], traceset: str, proxy: TraceProxy, sized_cfg: Mapping[str, Any] | None,
                     replications: int = 1000, seed: int = 42, power: float = POWER) -> pd.DataFrame:
    """The sizing rule checked on the released traces (:data:`STUDY_COLUMNS`): the simulator's headline claims at
    the requests the rule gives them, and the stand-ins of ``sized_cfg``'s engine claims at the requests that
    config gives them."""
    rows = simulator_study_rows(claims, traceset, proxy, replications, seed, power)
    if sized_cfg is not None:
        sizing = size_claims(claims, sized_cfg, proxy, None, power=power)
        rows += engine_proxy_rows(sizing, sized_cfg, claims, proxy, replications, seed + 1)
    return pd.DataFrame(rows, columns=STUDY_COLUMNS)
