"""Sizing the claims of a config: each claim's requests, expected interval and decision probability, the requests
each engine job needs, and the coverage of each claim group."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from ...jobspec import experiment_configs, profiled_datasets
from ...jobspec.jobs import trace_datasets, trace_methods
from ..claims import REPRODUCED, Claim, decisive_half_width, status_from_interval
from .power import (
    MIN_REQUESTS, POWER, SPREAD_MARGIN, decision_probability, expected_half_width, margin, requests_needed,
)
from .quantities import Quantity, _exp_map, job_points, parse_engine_key, requests_in
from .variance import Pilot, Spread, TraceProxy, quantity_spread


def claim_spread(claim: Claim, claims: Sequence[Claim], cfg: Mapping[str, Any], proxy: TraceProxy) -> Spread | None:
    """The per-request spread of an engine claim's quantity at the paper's value, from the released traces (for an
    envelope claim, at the configuration where the paper's extreme lies): what the band of a claim with
    ``tolerance_from`` is derived from (:func:`specrepro.analysis.claims.band_from_spread`); None where the traces do not
    model the quantity."""
    exps = [e["name"] for e in cfg.get("experiments", []) or []]
    q = parse_engine_key(envelope_quantity(claim, claims) or claim.measured_by or "", exps, list(cfg.get("datasets", {})))
    return None if q is None or claim.value is None else quantity_spread(q, claim.value, proxy, None)


# --- sizing the claims of a config -------------------------------------------------------------------

#: envelope keys (min/max over every profiled configuration) and the per-configuration quantity they range over
ENVELOPE_PREFIX = "engine.breakdown."

SIZING_COLUMNS = ["id", "group", "kind", "headline", "measured_by", "than", "status", "requests", "expected",
                  "expected_b", "spread", "spread_b", "expected_half_width", "decisive_half_width", "margin",
                  "target_half_width", "requests_needed", "decided", "p_decided", "quantities", "jobs", "source",
                  "proxy", "note"]

#: sizing statuses of a claim
SIZED, NOT_COVERED, NOT_SIZED, EXACT = "sized", "not covered", "not sized", "exact"


def envelope_quantity(claim: Claim, claims: Sequence[Claim]) -> str | None:
    """The per-configuration key where the paper's extreme of an envelope claim (``engine.breakdown.<q>.min``
    / ``.max``) lies, from the registry's claims of that quantity; None without such claims."""
    key = claim.measured_by or ""
    if not key.startswith(ENVELOPE_PREFIX):
        return None
    quantity, _, how = key[len(ENVELOPE_PREFIX):].rpartition(".")
    cands = [c for c in claims if c.kind == "value" and c.value is not None and c.measured_by
             and c.measured_by.startswith("engine.") and f".breakdown.{quantity}.b" in c.measured_by]
    if not cands or how not in ("min", "max"):
        return None
    pick = min if how == "min" else max
    return pick(cands, key=lambda c: c.value).measured_by


def _expected(claim: Claim) -> tuple[float | None, float | None]:
    """The paper's expected estimate(s) of a claim: its value (and value_b for an ordering); None for a bound,
    whose value is the bound, not an estimate."""
    if claim.kind in ("upper", "lower"):
        return None, None
    return claim.value, claim.value_b


def size_claim(claim: Claim, cfg: Mapping[str, Any], proxy: TraceProxy | None, pilot: Pilot | None,
               claims: Sequence[Claim] = (), power: float = POWER) -> dict:
    """One row of :data:`SIZING_COLUMNS` for an engine claim: whether the config measures it, with how many
    requests, the expected half-width there, what decides it and the requests that would."""
    nan = float("nan")
    row = {c: nan for c in SIZING_COLUMNS}
    row.update(id=claim.id, group=claim.group, kind=claim.kind, headline=claim.headline,
               measured_by=claim.measured_by or "", than=claim.than or "", status=NOT_COVERED, decided=False,
               quantities="", jobs="", source="", proxy="", note="")
    exps = [e["name"] for e in cfg.get("experiments", []) or []]
    dsets = list(cfg.get("datasets", {}))
    key = claim.measured_by or ""
    if claim.evidence != "engine":
        row["note"] = f"evidence {claim.evidence}: not an engine claim"
        return row
    if key.startswith("engine.memory."):
        model, method = key.split(".")[2], key.split(".")[3]
        used = any(e["model"] == model and any(m["method"] == method for m in e["methods"])
                   for e in cfg.get("experiments", []) or [])
        if used:
            row.update(status=EXACT, decided=True, expected_half_width=0.0,
                       note="computed from the architecture (config.json): no sampling error")
        else:
            row["note"] = f"no experiment runs {model} with {method}"
        return row
    if key.startswith("traces.engine-"):
        return _engine_trace_row(row, key, cfg)
    if key.startswith("tree."):
        return _tree_row(row, key, cfg)
    if key.startswith("sim.engine-"):
        return _engine_sim_row(row, [key, claim.than or ""] if claim.kind == "ordering" else [key], cfg)
    env_key = envelope_quantity(claim, claims)
    if key.startswith(ENVELOPE_PREFIX):
        if env_key is None:
            row["note"] = "the paper gives only the bound, not the configuration where it is reached"
            if _any_profiled(cfg):
                row.update(status=NOT_SIZED, requests=requests_in_profile(cfg),
                           note="measured over this config's profiled configurations; the paper states the bound, "
                                "not an estimate, so no margin can be computed without a pilot")
            return row
        qs = [parse_engine_key(env_key, exps, dsets)]
        row["note"] = f"the paper's extreme is at {env_key}"
    else:
        qs = [parse_engine_key(key, exps, dsets)]
        if claim.kind == "ordering":
            qs.append(parse_engine_key(claim.than or "", exps, dsets))
    if any(q is None for q in qs) or not all(job_points(cfg, q) for q in qs):
        missing = next((k for k, q in zip([env_key or key, claim.than], qs) if q is None or not job_points(cfg, q)), key)
        row["note"] = (row["note"] + "; " if row["note"] else "") + f"this config does not measure {missing}"
        return row
    row["jobs"] = " ".join(job_ids(qs))
    row["quantities"] = " ".join(q.key for q in qs)
    if qs[0].name.startswith("rel_to_eagle") or qs[0].name.startswith("acceptance_rate"):
        row.update(status=NOT_SIZED, requests=requests_in(cfg, qs[0]),
                   note="measured; its per-request spread is not modelled (BLEU buckets, per-position rates)")
        return row
    exp_a, exp_b = _expected(claim)
    levels = [exp_a, exp_b if claim.kind == "ordering" else None]
    spreads = []
    for i, q in enumerate(qs):
        lv = levels[i]
        sp = quantity_spread(q, lv if lv is not None else nan, proxy, pilot)
        spreads.append(sp)
    n = min(requests_in(cfg, q) for q in qs)
    row["requests"] = n
    why = ""
    if any(s is not None and not s.from_pilot and not math.isfinite(s.estimate) for s in spreads):
        why = "no expected value (the paper states a bound, or no second value): give a pilot run (--pilot)"
    elif any(s is None or not math.isfinite(s.spread) for s in spreads):
        why = ("no per-request spread: give the released traces (--traces) or a pilot run (--pilot)" if proxy is None
               else "the traces do not model this quantity: give a pilot run (--pilot)")
    if why:
        row.update(status=NOT_SIZED, note=(row["note"] + "; " if row["note"] else "") + why)
        return row
    est = [s.estimate for s in spreads]
    d = decisive_half_width(claim, est[0], est[1] if claim.kind == "ordering" else None)
    inside = claim.kind != "value" or status_from_interval(claim, est[0]) == REPRODUCED
    m = margin(claim.kind, power, inside=inside)
    needed = max(requests_needed(SPREAD_MARGIN * s.spread, d, m) for s in spreads)
    hw = max(expected_half_width(SPREAD_MARGIN * s.spread, n) for s in spreads)
    b = spreads[1] if len(spreads) > 1 else None
    p = decision_probability(claim, est[0], spreads[0].spread, n, b.estimate if b else None, b.spread if b else None)
    row.update(status=SIZED, expected=est[0], expected_b=est[1] if len(est) > 1 else nan, spread=spreads[0].spread,
               spread_b=spreads[1].spread if len(spreads) > 1 else nan, expected_half_width=hw,
               decisive_half_width=d, margin=m, target_half_width=m * d, requests_needed=needed,
               decided=bool(hw <= m * d + 1e-12 and n >= MIN_REQUESTS), p_decided=p,
               source="; ".join(dict.fromkeys(s.source for s in spreads)),
               proxy="; ".join(dict.fromkeys(proxy_text(q, s, cfg) for q, s in zip(qs, spreads))))
    return row


def proxy_text(q: Quantity, sp: Spread, cfg: Mapping[str, Any]) -> str:
    """What stood in for quantity ``q``'s spread, and how it differs from ``q`` (model, drafter, dataset)."""
    if sp.from_pilot:
        return f"pilot run: {q.exp} {q.dataset} {q.config} itself ({sp.n_source} requests)"
    rt = cfg.get("released_traces") or {}
    model = rt.get("model", "?")
    exp = _exp_map(cfg).get(q.exp, {})
    parts = sp.source.split(": ", 1)[-1].split()  # "<dataset> <proposer> <policy> ..."
    ds, prop = (parts + ["?", "?"])[:2]
    trace = "n-gram" if prop == "ngram" else "EAGLE head"
    differs = [f"other model ({model} for {exp.get('model', q.exp)})"] if exp.get("model") != model else []
    if q.method == "none":
        what = "no SD"
    else:
        what = {"ngram": "n-gram", "eagle": "EAGLE", "eagle3": "EAGLE-3", "draft_model": "draft model",
                "mtp": "MTP"}.get(q.method, q.method)
        if q.method in ("draft_model", "mtp"):
            differs.append(f"other drafter (the trace's {trace} for {what})")
    if ds != q.dataset:
        differs.append(f"other dataset ({ds} for {q.dataset})")
    return (f"{model} {ds} {trace if q.method != 'none' else 'no-SD'} trace"
            + (" (cost-model phase seconds)" if q.job == "profile" else "") + f" for {q.exp} {q.dataset} {q.config}: "
            + (", ".join(differs) if differs else "same model, method and dataset"))


def _tree_row(row: dict, key: str, cfg: Mapping[str, Any]) -> dict:
    """A Fig. 2 claim (``tree.<exp>.<dataset>.<config>.<quantity>.b<B>``): measured where the config runs that tree
    job on that dataset and batch size; never sized (no released trace has tree verification)."""
    exps = _exp_map(cfg)
    rest = key[len("tree."):]
    exp = next((e for e in sorted(exps, key=len, reverse=True) if rest.startswith(e + ".")), None)
    if exp is not None:
        ds, config, tail = (rest[len(exp) + 1:].split(".", 2) + ["", ""])[:3]
        job = experiment_configs(exps[exp]).get(config)
        b = tail.rpartition(".b")[2]
        if job and ds in job["datasets"] and b.isdigit() and int(b) in exps[exp]["batch_sizes"]:
            row.update(status=NOT_SIZED, requests=requests_in(cfg, Quantity(key, exp, ds, config, "tree", (int(b),))),
                       jobs=f"{exp}/bench/{config}", note="measured by the tree study; not sized: no released trace has "
                                                          "tree verification to give its per-request spread")
            return row
    row["note"] = f"this config does not measure {key}"
    return row


def _engine_sim_row(row: dict, keys: Sequence[str], cfg: Mapping[str, Any]) -> dict:
    """A claim on the simulator over an experiment's own traces (``sim.engine-<exp>.<dataset>.<proposer>.<policy>.b<B>``,
    Figs. 10/12 per model): measured where the experiment traces that proposer's methods (Oracle Combine and the best
    single oracle: n-gram and a drafter) on the dataset and runs the batch size; never sized (a simulated value has no
    per-request spread of its own in this rule). Its jobs are the trace and profile jobs the plan already bills."""
    exps = _exp_map(cfg)
    for key in [k for k in keys if k]:
        rest = key[len("sim.engine-"):]
        exp = next((e for e in sorted(exps, key=len, reverse=True) if rest.startswith(e + ".")), None)
        parts = rest[len(exp) + 1:].split(".") if exp else []
        if exp is None or len(parts) != 4 or not parts[3][1:].isdigit():
            row["note"] = f"this config does not measure {key}"
            return row
        ds, proposer, _, b = parts
        traced = set(trace_methods(cfg, exp))
        need = {"ngram"} | (traced - {"ngram"}) if proposer in ("combined", "best-single") else {proposer}
        if ds not in trace_datasets(cfg, exp) or not need <= traced or len(need) < (2 if proposer in ("combined", "best-single") else 1) \
                or int(b[1:]) not in exps[exp]["batch_sizes"]:
            row["note"] = f"this config does not measure {key}"
            return row
    row.update(status=NOT_SIZED, jobs=" ".join(sorted({f"{k[len('sim.engine-'):].split('.')[0]}/traces" for k in keys if k})),
               note="measured by the simulator on the experiment's own k = 20 traces and fitted cost model (no GPU "
                    "time of its own); a simulated value is not sized by this rule")
    return row


def _engine_trace_row(row: dict, key: str, cfg: Mapping[str, Any]) -> dict:
    """A claim on an engine acceptance trace (``traces.engine-<exp>.<dataset>.<method>.<statistic>``): measured
    where the experiment computes that method's traces on the dataset; a quantile over requests is not sized."""
    rest = key[len("traces.engine-"):]
    exp = next((e for e in sorted(_exp_map(cfg), key=len, reverse=True) if rest.startswith(e + ".")), None)
    if exp is not None:
        ds, _, tail = rest[len(exp) + 1:].partition(".")
        method = tail.split(".")[0]
        if ds in trace_datasets(cfg, exp) and method in trace_methods(cfg, exp):
            row.update(status=NOT_SIZED, requests=requests_in(cfg, Quantity(key, exp, ds, "none", "trace", (1,))),
                       jobs=f"{exp}/bench/none", note="measured on the engine's acceptance traces; a quantile over "
                                                      "requests is not sized by this rule")
            return row
    row["note"] = f"this config does not measure {key}"
    return row


def job_ids(qs: Iterable[Quantity]) -> list[str]:
    """``<exp>/<job>/<config>`` of the engine jobs that measure the quantities (a speedup also needs no SD's)."""
    out = []
    for q in qs:
        out.append(f"{q.exp}/{q.job}/{q.config}")
        if q.job == "bench" and q.name in ("speedup", "speedup_drop_pct"):
            out.append(f"{q.exp}/bench/none")
    return list(dict.fromkeys(out))


def requests_table(sizing: pd.DataFrame, cfg: Mapping[str, Any]) -> pd.DataFrame:
    """Per (experiment, job, dataset, configuration) measuring a sized claim: the requests the rule asks for (the
    most any of its claims needs; a speedup's no-SD job needs as many), the requests the config gives it, and
    the claims. Columns exp, job, dataset, config, requests_needed, requests, claims."""
    exps = [e["name"] for e in cfg.get("experiments", []) or []]
    dsets = list(cfg.get("datasets", {}))
    need: dict[tuple, list] = {}
    for r in sizing[sizing["status"] == SIZED].to_dict("records"):
        for key in str(r["quantities"]).split():
            q = parse_engine_key(key, exps, dsets)
            configs = [q.config] + (["none"] if q.job == "bench" and q.name in ("speedup", "speedup_drop_pct") else [])
            for c in configs:
                e = need.setdefault((q.exp, q.job, q.dataset, c), [0.0, requests_in(cfg, q), []])
                e[0] = max(e[0], float(r["requests_needed"]))
                e[2].append(r["id"])
    rows = [{"exp": k[0], "job": k[1], "dataset": k[2], "config": k[3], "requests_needed": v[0], "requests": v[1],
             "claims": " ".join(dict.fromkeys(v[2]))} for k, v in need.items()]
    return pd.DataFrame(rows, columns=["exp", "job", "dataset", "config", "requests_needed", "requests", "claims"]) \
        .sort_values(["exp", "job", "dataset", "config"]).reset_index(drop=True)


def _any_profiled(cfg: Mapping[str, Any]) -> bool:
    prof = cfg.get("profiling") or {}
    return any(profiled_datasets(e, j, prof) for e in cfg.get("experiments", []) or []
               for j in experiment_configs(e).values()) and bool(prof.get("batch_sizes"))


def requests_in_profile(cfg: Mapping[str, Any]) -> int:
    prof = cfg.get("profiling") or {}
    return int(prof.get("num_requests") or 0)


def size_claims(claims: Sequence[Claim], cfg: Mapping[str, Any], proxy: TraceProxy | None,
                pilot: Pilot | None = None, headline_only: bool = True, power: float = POWER) -> pd.DataFrame:
    """:func:`size_claim` for every engine claim (headline claims only by default), registry order; a claim the
    config does not cover carries the config's reason (``run.dropped_claims``) in its note."""
    rows = [size_claim(c, cfg, proxy, pilot, claims, power) for c in claims
            if c.evidence == "engine" and (c.headline or not headline_only)]
    for r in rows:
        if r["status"] == NOT_COVERED:
            why = dropped_reason(cfg, r["id"], r["group"])
            r["note"] = f"dropped: {why} ({r['note']})" if why else r["note"]
    return pd.DataFrame(rows, columns=SIZING_COLUMNS)


def dropped_reason(cfg: Mapping[str, Any], claim_id: str, group: str) -> str:
    """The config's reason for leaving a claim out (``run.dropped_claims``: by claim id, else by figure group)."""
    dropped = (cfg.get("run") or {}).get("dropped_claims") or {}
    return str(dropped.get(claim_id) or dropped.get(group) or "")


def coverage_by_group(claims: Sequence[Claim], cfg: Mapping[str, Any]) -> pd.DataFrame:
    """Per figure group of engine claims: how many there are, how many are headline claims, how many of each the
    config measures, and the config's reason for the group where it measures none (columns group, claims,
    headline, measured, headline_measured, reason)."""
    rows: dict[str, dict] = {}
    for c in claims:
        if c.evidence != "engine":
            continue
        r = rows.setdefault(c.group, {"group": c.group, "claims": 0, "headline": 0, "measured": 0,
                                      "headline_measured": 0, "reason": ""})
        measured = size_claim(c, cfg, None, None, claims)["status"] != NOT_COVERED
        r["claims"] += 1
        r["headline"] += int(c.headline)
        r["measured"] += int(measured)
        r["headline_measured"] += int(measured and c.headline)
    for r in rows.values():
        r["reason"] = dropped_reason(cfg, "", r["group"]) if not r["measured"] else ""
    return pd.DataFrame(list(rows.values()), columns=["group", "claims", "headline", "measured", "headline_measured",
                                                      "reason"])
