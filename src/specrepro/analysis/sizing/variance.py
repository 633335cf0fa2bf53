"""The per-request spread of a claim's quantity: the released traces through the simulator (TraceProxy), a pilot
run's own values (Pilot), and the spread at a level (Spread)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...core.errors import SpecReproError
from ...core.traces import read_trace
from ...engine.results.metrics import load_points
from ...engine.run.breakdown import load_breakdown
from ...sim.simulator import SimSpec, Workload, decode_steps, draw_requests, request_traces, simulate
from .power import PROXY_DATASETS, drop_pct, spread_function, spread_mean, spread_ratio
from .quantities import Quantity


# --- per-request values: the released traces through the simulator -------------------------------


def proxy_policy(method: str, k: int | None) -> tuple[str, str]:
    """(trace proposer, simulator policy) standing in for an engine method with k draft tokens."""
    k = 3 if k is None else int(k)
    if k not in (1, 3, 5):
        raise SpecReproError(f"no simulator policy for k = {k} (the simulator's fixed policies are k = 1, 3, 5)")
    return ("ngram" if method == "ngram" else "eagle"), f"fixed-{k}"


@dataclass
class TraceProxy:
    """Per-request values of the released traces, simulated request by request (paper mode: the authors' draw).

    ``files``: dataset -> trace file; ``cost``: the cost model; ``match_prob``: n-gram match probability per
    dataset (the simulator's); ``num_requests``, ``seed``: the draw (default the authors' 300, 42).
    """

    files: Mapping[str, str | Path]
    cost: Any
    match_prob: Mapping[str, float] = field(default_factory=dict)
    num_requests: int = 300
    seed: int = 42
    label: str = "released traces"
    _workloads: dict = field(default_factory=dict, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    def dataset_for(self, dataset: str) -> str | None:
        """The released dataset standing in for ``dataset`` (itself where it has a trace)."""
        if dataset in self.files:
            return dataset
        alt = PROXY_DATASETS.get(dataset)
        return alt if alt in self.files else None

    def workload(self, dataset: str):
        if dataset not in self._workloads:
            self._workloads[dataset] = Workload.from_records(read_trace(self.files[dataset], aligned=()), dataset)
        return self._workloads[dataset]

    def spec(self, dataset: str, proposer: str, policy: str):
        p = float(self.match_prob.get(dataset, 1.0)) if proposer == "ngram" and policy.startswith("fixed-") else 1.0
        return SimSpec(proposer, policy, ngram_match_prob=p, num_requests=self.num_requests, seed=self.seed)

    def requests(self, dataset: str, proposer: str, policy: str, batch_size: int) -> pd.DataFrame:
        """One row per drawn request: ``request_id``, ``sd_throughput``, ``baseline_throughput`` (the simulator's
        per-batch values: B copies of the request) and the cost model's per-request seconds of verification,
        drafting and overhead with SD (``ver_s``, ``draft_s``, ``over_s``) and without (``base_ver_s``,
        ``base_over_s``)."""
        key = (dataset, proposer, policy, int(batch_size))
        if key not in self._cache:
            wl = self.workload(dataset)
            spec = self.spec(dataset, proposer, policy)
            res = simulate(wl, spec, [int(batch_size)], self.cost)
            t = res.batches[["request_id", "sd_throughput", "baseline_throughput", "sd_latency",
                             "baseline_latency"]].reset_index(drop=True)
            ph = phase_seconds(wl, spec, int(batch_size), self.cost)
            self._cache[key] = pd.concat([t, ph], axis=1)
        return self._cache[key]


def phase_seconds(workload, spec, batch_size: int, cost) -> pd.DataFrame:
    """Per drawn request, the cost model's seconds of one copy's steps, split as the engine profile splits them:
    verification (target forwards, prefill included), drafting, overhead; with SD (``ver_s``, ``draft_s``,
    ``over_s``) and without (``base_ver_s``, ``base_over_s``). n-gram steps that may find no match are charged
    their expected drafting (the match probability), not a random draw."""
    idx, _ = draw_requests(workload, spec)
    acc, ng, ea = request_traces(workload, spec.proposer, idx)
    P = workload.prompt_len[idx].astype(float)
    L = workload.lengths(spec.proposer)[idx].astype(float)
    B = int(batch_size)
    st = decode_steps(spec, acc, ng, ea, workload.prompt_len[idx], B, cost)
    r = st.request
    kv = B * (P[r] + st.gen)
    inp = st.input_len.astype(float)
    w_ng = st.ngram_w.astype(float)
    n_tok = B * inp
    if st.random.any():
        p = spec.ngram_match_prob
        n_tok = np.where(st.random, B * (p * inp + (1 - p)), n_tok)
        w_ng = np.where(st.random, p * w_ng, w_ng)
    T = cost.target(kv, n_tok)
    R = idx.size
    prefill = cost.target(0.0, B * P)
    ver = prefill + np.bincount(r, weights=T, minlength=R)
    draft = np.bincount(r, weights=w_ng * cost.ngram_draft(T) + st.eagle_w * cost.eagle_draft(kv, inp, B * inp), minlength=R)
    over = (1 + np.bincount(r, minlength=R)) * cost.overhead + cost.overhead_per_token * (
        B + np.bincount(r, weights=n_tok, minlength=R))
    n = L - 1
    base_ver = prefill + n * (cost.c_kv * B * (P + 1) + cost.c_compute * B + cost.c_fixed) + cost.c_kv * B * n * (n - 1) / 2
    return pd.DataFrame({"ver_s": ver, "draft_s": draft, "over_s": over, "base_ver_s": base_ver,
                         "base_over_s": L * cost.overhead_at(B, sd=False)})


# --- a pilot run's own per-request values ----------------------------------------------------------


@dataclass
class Pilot:
    """Per-request values of a previous run: bench points (``specrepro bench`` Parquets) and profile breakdowns."""

    points: pd.DataFrame | None = None
    breakdown: pd.DataFrame | None = None
    sources: tuple[str, ...] = ()

    @classmethod
    def load(cls, paths: Sequence[str | Path]) -> Pilot:
        """``*.parquet``: bench tables; ``*.csv``: profile breakdown tables; anything else is an error."""
        pq = [str(p) for p in paths if str(p).endswith(".parquet")]
        csv = [str(p) for p in paths if str(p).endswith(".csv")]
        other = [str(p) for p in paths if str(p) not in pq + csv]
        if other:
            raise SpecReproError(f"{other[0]}: a pilot file is a bench Parquet or a profile breakdown CSV")
        points = load_points(pq) if pq else None
        bd = None
        if csv:
            bd = load_breakdown(csv)
        return cls(points, bd, tuple(pq + csv))

    def _tput(self, exp: str, ds: str, config: str, b: int) -> pd.Series:
        p = self.points
        g = p[(p["exp"] == exp) & (p["dataset"] == ds) & (p["config"] == config) & (p["batch_size"] == b)
              & (p["status"] == "ok")]
        return g.drop_duplicates("request_index").set_index("request_index")["throughput"].astype(float).dropna()

    def spread(self, q: Quantity) -> tuple[float, float, int] | None:
        """(estimate, spread, requests) of quantity ``q`` from the pilot's own requests; None where it lacks them."""
        if q.job == "profile":
            return self._profile_spread(q)
        if self.points is None:
            return None
        if q.name == "speedup":
            sd, base = self._tput(q.exp, q.dataset, q.config, q.batch_sizes[0]), self._tput(q.exp, q.dataset, "none", q.batch_sizes[0])
            common = sd.index.intersection(base.index)
            if len(common) < 2:
                return None
            x, y = sd[common].to_numpy(), base[common].to_numpy()
            return float(x.mean() / y.mean()), spread_ratio(x, y), len(common)
        if q.name == "speedup_drop_pct":
            b0, b = q.batch_sizes
            s = [self._tput(q.exp, q.dataset, c, bb) for c, bb in ((q.config, b0), ("none", b0), (q.config, b), ("none", b))]
            common = s[0].index
            for x in s[1:]:
                common = common.intersection(x.index)
            if len(common) < 2:
                return None
            arrays = [x[common].to_numpy() for x in s]
            return drop_pct(*(a.mean() for a in arrays)), spread_function(arrays, drop_pct), len(common)
        if q.name == "throughput":
            x = self._tput(q.exp, q.dataset, q.config, q.batch_sizes[0]).to_numpy()
            return (float(x.mean()), spread_mean(x), len(x)) if len(x) > 1 else None
        return None

    def _profile_spread(self, q: Quantity):
        bd = self.breakdown
        if bd is None:
            return None
        g = bd[(bd["exp"] == q.exp) & (bd["dataset"] == q.dataset) & (bd["config"] == q.config)
               & (bd["batch_size"] == q.batch_sizes[0])]
        if len(g) < 2:
            return None
        tot = g["total_s"].to_numpy(float)
        if q.name == "draft_to_target_forward_pct":
            x, y = 100 * g["drafting_s"].to_numpy(float), int(q.k or 1) * g["verification_s"].to_numpy(float)
        else:
            phase = q.name.split(".", 1)[1].removesuffix("_pct")
            x, y = 100 * g[f"{phase}_s"].to_numpy(float), tot
        return float(x.sum() / y.sum()), spread_ratio(x, y), len(g)


# --- the spread of one claim's quantity --------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Spread of a quantity at the level it is expected at, and where it came from."""

    spread: float
    estimate: float  #: the level the spread is at (the pilot's estimate, or the claim's value for a proxy)
    source: str
    n_source: int
    from_pilot: bool = False


def proxy_spread(q: Quantity, level: float, proxy: TraceProxy) -> Spread | None:
    """The spread of engine quantity ``q`` at ``level`` from the released traces (module docstring); None where
    the traces say nothing about it (a quantity the sizing does not model, k without a simulator policy)."""
    ds = proxy.dataset_for(q.dataset)
    if ds is None or q.method == "none":
        return None
    try:
        prop, pol = proxy_policy(q.method, q.k)
    except SpecReproError:
        return None
    where = f"{proxy.label}: {ds} {prop} {pol}"
    if q.name == "speedup":
        t = proxy.requests(ds, prop, pol, q.batch_sizes[0])
        x, y = t["sd_throughput"].to_numpy(), t["baseline_throughput"].to_numpy()
        r = x.mean() / y.mean()
        return Spread(spread_ratio(x, y) / r * abs(level), level, f"{where} B={q.batch_sizes[0]}", len(t))
    if q.name == "speedup_drop_pct":
        b0, b = q.batch_sizes
        t0, t1 = proxy.requests(ds, prop, pol, b0), proxy.requests(ds, prop, pol, b)
        arrays = [t0["sd_throughput"], t0["baseline_throughput"], t1["sd_throughput"], t1["baseline_throughput"]]
        return Spread(spread_function([a.to_numpy() for a in arrays], drop_pct), level,
                      f"{where} B={b0}->{b} (absolute)", len(t0))
    if q.job == "profile":
        t = proxy.requests(ds, prop, pol, q.batch_sizes[0])
        total = t["ver_s"] + t["draft_s"] + t["over_s"]
        if q.name == "draft_to_target_forward_pct":
            x, y = t["draft_s"], int(q.k or 3) * t["ver_s"]
        else:
            phase = q.name.split(".", 1)[1].removesuffix("_pct")
            col = {"verification": "ver_s", "drafting": "draft_s", "overhead": "over_s"}.get(phase)
            if col is None:
                return None
            x, y = t[col], total
        x, y = x.to_numpy(float), y.to_numpy(float)
        if x.sum() <= 0:
            return None
        r = x.sum() / y.sum()
        return Spread(spread_ratio(x, y) / r * abs(level), level,
                      f"{where} B={q.batch_sizes[0]} (cost-model phase seconds)", len(t))
    return None


def baseline_share_spread(q: Quantity, level: float, proxy: TraceProxy) -> Spread | None:
    """The verification share of a no-SD configuration from the cost model (the baseline's steps)."""
    ds = proxy.dataset_for(q.dataset)
    if ds is None or q.name != "breakdown.verification_pct":
        return None
    t = proxy.requests(ds, "eagle", "fixed-3", q.batch_sizes[0])
    x, y = t["base_ver_s"].to_numpy(float), (t["base_ver_s"] + t["base_over_s"]).to_numpy(float)
    r = x.sum() / y.sum()
    return Spread(spread_ratio(x, y) / r * abs(level), level,
                  f"{proxy.label}: {ds} no SD B={q.batch_sizes[0]} (cost-model phase seconds)", len(t))


def quantity_spread(q: Quantity, level: float, proxy: TraceProxy | None, pilot: Pilot | None) -> Spread | None:
    """The pilot's spread of ``q`` where it has the quantity, else the traces' (None where neither says)."""
    if pilot is not None:
        got = pilot.spread(q)
        if got is not None and math.isfinite(got[1]):
            return Spread(got[1], got[0], "pilot run", got[2], from_pilot=True)
    if proxy is None:
        return None
    if q.method == "none":
        return baseline_share_spread(q, level, proxy)
    return proxy_spread(q, level, proxy)
