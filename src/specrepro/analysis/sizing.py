"""Sizing a run from per-request variance: how many requests decide each claim, and how wide its intervals will be.

**Spread.** Every engine and simulator quantity is a smooth statistic of per-request values: a mean, a ratio of
two means (a speedup: mean SD throughput / mean no-SD throughput, the same requests), a pooled ratio (a time
share: summed phase seconds / summed step seconds) or a function of several means (the speedup drop from B0 to
B). Over n requests its standard error is ``s / sqrt(n)``, where the *spread* ``s`` is the standard deviation of
its influence values (the statistic linearised around the estimate, one value per request):

* mean of x:                 ``x_i - mean(x)``
* ratio mean(x) / mean(y):   ``(x_i - R y_i) / mean(y)``         (also a pooled ratio sum(x) / sum(y))
* f(m_1, ..., m_j):          ``sum_j df/dm_j (x_ij - m_j)``      (gradient by central differences)

and the expected 95 % interval half-width is ``Z * s / sqrt(n)`` (:func:`expected_half_width`), which the
percentile bootstrap of :mod:`specrepro.core.uncertainty` comes close to at moderate n (the validation study below
compares the two on the released traces).

**What decides a claim** is :func:`specrepro.analysis.claims.decisive_half_width` ``d`` at the expected estimate (the
paper's value, or a pilot run's estimate): value claims +- their tolerance, orderings half the gap between the
two quantities, below-one / above-one the distance to 1.

**Margin.** A run is sized so that, if the expected estimate is the truth and the spread is as estimated, its
interval decides the claim with probability :data:`POWER` (0.9). The estimate lands within a normal error of
the truth, so the expected half-width may only take a fraction ``m`` of ``d`` (:func:`margin`):

* value (band on both sides):                 m = Z / (Z + z_0.95)          = 0.544
* upper, lower, below-one, above-one (one side): m = Z / (Z + z_0.90)        = 0.605
* ordering (two intervals, assumed independent): m = Z / (Z + z_0.90 / sqrt 2) = 0.684

so a claim needs ``n = ceil((Z s' / (m d))^2)`` requests (:func:`requests_needed`), and at least
:data:`MIN_REQUESTS` (20): the percentile bootstrap needs some requests to be calibrated (the validation study
measures its coverage down to that size). The spread is taken :data:`SPREAD_MARGIN` (10 %) larger than estimated,
``s' = 1.1 s``: a standard deviation estimated from the proxy's 300 requests has a standard error of about
``s / sqrt(2 * 299) = 4 %`` of itself, so the margin covers its own sampling error about 2.4 times over (not a
different model's spread: a pilot run measures that).

**Joint expectation.** The power is per claim: each sized claim is decided with probability at least
:data:`POWER` (at the inflated spread; :func:`decision_probability` gives it at the estimated one). Over the
sized headline claims the expected number left undecided is the sum of ``1 - p`` and, taking the claims as
independent, all are decided with probability ``prod p``; ``specrepro plan`` prints both, beside the headline
claims the config does not cover (never decided by it) and those it measures without sizing them.

**Where the spread comes from.** From a pilot run's own results when they are given (bench Parquets of a GPU
run; profile breakdown CSVs): the spread of exactly the quantity, at its own estimate. Otherwise from the
released traces through the simulator (:class:`TraceProxy`): every request of the authors' draw simulated on
its own (B copies, the H100 cost model) gives per-request SD and no-SD throughputs, and per-request phase
seconds from the same cost model. An engine method is proxied by the trace of its kind (n-gram by n-gram with
its k; EAGLE, EAGLE-3, a draft model and MTP by the learned drafter's trace with k = 3), a dataset without a
released trace (the reasoning sets AIME, GPQA) by :data:`PROXY_DATASETS` (GSM8K: math), a batch size by itself
(the simulator runs any B). The proxy's *relative* spread (s / its own estimate) is carried over to ratios
(speedups, shares, the draft-to-target forward ratio) at the claim's level; the speedup drop, a difference in
percent, keeps its absolute spread. The proxy is a different model on other outputs (column ``proxy`` names,
per claim, the trace that stood in and what it stands in for): a pilot run (e.g. the quick run itself) replaces
it, and ``specrepro plan --pilot`` then says whether more requests are needed.

**Claims a config leaves out.** A headline claim the config does not measure is *not covered*; the reason is the
config's ``run.dropped_claims`` entry for its id (or its figure group), and ``specrepro plan`` lists each with it,
and every figure whose engine claims the config measures none of (:func:`coverage_by_group`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from .claims import NOT_REPRODUCED, REPRODUCED, Claim, decisive_half_width, load_claims, status_from_interval
from ..core.errors import SpecReproError
from ..engine.run.breakdown import load_breakdown
from ..config import check_config, validate_schema
from ..core.costmodel import load_cost_model
from ..core.io import read_json, sha256_file, write_csv
from ..core.traces import read_trace
from ..core.uncertainty import bootstrap_function_ci, bootstrap_ratio_ci
from ..engine.results.metrics import load_points
from ..jobspec import experiment_configs, profiled_datasets, profiled_requests
from ..jobspec.jobs import trace_datasets, trace_methods
from ..sim.simulator import (
    NGRAM_MATCH_PROB, PAPER_DRAW, PAPER_POLICIES, PROPOSERS, SimSpec, Workload, decode_steps, draw_requests, request_traces, simulate,
)

#: two-sided 95 % normal quantile (the level of every interval of the artifact)
Z = NormalDist().inv_cdf(0.975)
#: probability that a sized run decides a claim whose truth is the expected estimate
POWER = 0.9
#: fewest requests a sized quantity gets (the percentile bootstrap's calibration; see the validation study)
MIN_REQUESTS = 20
#: datasets without a released trace -> the released dataset whose per-request spread stands in for theirs
PROXY_DATASETS = {"aime": "gsm8k", "gpqa": "gsm8k"}
#: claim kinds decided against one bound
ONE_SIDED = ("upper", "lower", "below-one", "above-one")
#: the spread a run is sized for, relative to the estimated one (module docstring)
SPREAD_MARGIN = 1.1

# --- the arithmetic ------------------------------------------------------------------------------


def margin(kind: str, power: float = POWER, inside: bool = True) -> float:
    """Fraction of the decisive half-width the expected half-width may take (module docstring).

    ``inside``: for a value claim, whether the expected estimate is inside its band (two edges to keep clear);
    outside it, deciding "not reproduced" needs one edge only.
    """
    if not 0.5 < power < 1:
        raise SpecReproError(f"power must be in (0.5, 1), got {power}")
    nd = NormalDist()
    if kind == "value" and inside:
        zp = nd.inv_cdf((1 + power) / 2)
    elif kind == "ordering":
        zp = nd.inv_cdf(power) / math.sqrt(2)
    elif kind in ONE_SIDED or kind == "value":
        zp = nd.inv_cdf(power)
    else:
        raise SpecReproError(f"no margin for claim kind {kind!r}")
    return Z / (Z + zp)


def expected_half_width(spread: float, n: float) -> float:
    """Expected 95 % half-width of a statistic with per-request spread ``spread`` over ``n`` requests."""
    if not n or n <= 0 or not math.isfinite(spread):
        return float("nan")
    return Z * spread / math.sqrt(n)


def requests_needed(spread: float, decisive: float, m: float, minimum: int = MIN_REQUESTS) -> float:
    """Requests whose expected half-width is at most ``m * decisive``: ``ceil((Z s / (m d))^2)``, at least
    ``minimum``; ``inf`` where nothing decides (d <= 0), NaN without a spread."""
    if not (math.isfinite(spread) and math.isfinite(decisive)):
        return float("nan")
    if decisive <= 0:
        return math.inf
    if spread <= 0:
        return float(minimum)
    return float(max(minimum, math.ceil((Z * spread / (m * decisive)) ** 2 - 1e-9)))


def decision_probability(claim: Claim, estimate: float, spread: float, n: float, estimate_b: float | None = None,
                         spread_b: float | None = None) -> float:
    """Probability that a run of ``n`` requests decides ``claim`` (reproduced or not reproduced) when the truth is
    ``estimate`` (and ``estimate_b`` for an ordering) and the per-request spread is ``spread``: the estimate normal
    around the truth with standard error ``s / sqrt(n)``, its interval +- Z of that."""
    nd = NormalDist()
    if not (n and n > 0 and math.isfinite(spread) and math.isfinite(estimate)):
        return float("nan")
    sig = spread / math.sqrt(n)
    w = Z * sig

    def cdf(x: float, sd: float) -> float:
        return float(x >= 0) if sd <= 0 else nd.cdf(x / sd)

    if claim.kind == "ordering":
        if estimate_b is None or spread_b is None or not math.isfinite(spread_b):
            return float("nan")
        sig_b = spread_b / math.sqrt(n)
        sd, wsum, gap = math.hypot(sig, sig_b), w + Z * sig_b, estimate - estimate_b
        return 1 - cdf(wsum - gap, sd) + cdf(-wsum - gap, sd)
    if claim.kind in ONE_SIDED:
        lo, hi = claim.band()
        bound = 1.0 if claim.kind in ("below-one", "above-one") else (hi if claim.kind == "upper" else lo)
        return cdf(bound - w - estimate, sig) + 1 - cdf(bound + w - estimate, sig)
    lo, hi = claim.band()
    inside = max(0.0, cdf(hi - w - estimate, sig) - cdf(lo + w - estimate, sig))
    return inside + cdf(lo - w - estimate, sig) + 1 - cdf(hi + w - estimate, sig)


def spread_mean(x: Sequence[float]) -> float:
    """Per-request spread of a mean: the standard deviation of the values (ddof 1)."""
    x = np.asarray(x, dtype=float)
    return float(x.std(ddof=1)) if x.size > 1 else float("nan")


def spread_ratio(x: Sequence[float], y: Sequence[float]) -> float:
    """Per-request spread of mean(x) / mean(y) over the same requests (a speedup, a pooled share)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size != y.size:
        raise ValueError(f"paired values need equal lengths, got {x.size} and {y.size}")
    if x.size < 2 or y.mean() == 0:
        return float("nan")
    r = x.mean() / y.mean()
    return float(((x - r * y) / y.mean()).std(ddof=1))


def spread_function(arrays: Sequence[Sequence[float]], fn: Callable[..., float]) -> float:
    """Per-request spread of ``fn(mean(a_1), ..., mean(a_j))``, the arrays over the same requests."""
    xs = [np.asarray(a, dtype=float) for a in arrays]
    n = xs[0].size if xs else 0
    if any(x.size != n for x in xs):
        raise ValueError(f"paired values need equal lengths, got {[x.size for x in xs]}")
    if n < 2:
        return float("nan")
    m = np.array([x.mean() for x in xs])
    grad = np.empty(len(xs))
    for j in range(len(xs)):
        h = 1e-6 * max(abs(m[j]), 1e-12)
        up, dn = m.copy(), m.copy()
        up[j] += h
        dn[j] -= h
        grad[j] = (fn(*up) - fn(*dn)) / (2 * h)
    infl = sum(g * (x - mj) for g, x, mj in zip(grad, xs, m))
    return float(np.std(infl, ddof=1))


def drop_pct(sd0: float, base0: float, sd: float, base: float) -> float:
    """100 (s(B0) - s(B)) / s(B0) from the four mean throughputs (the engine's ``speedup_drop_pct``)."""
    return 100.0 * (1.0 - (sd / base) / (sd0 / base0))


# --- engine metric keys --------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantity:
    """One engine metric: ``engine.<exp>.<dataset>.<config>.<name>.<suffix>``.

    ``name``: ``speedup``, ``speedup_drop_pct``, ``breakdown.<phase>_pct``, ``draft_to_target_forward_pct``,
    ``throughput``, ... ; ``batch_sizes``: (B,) or (B0, B) for the drop; ``job``: ``bench`` or ``profile``.
    """

    key: str
    exp: str
    dataset: str
    config: str
    name: str
    batch_sizes: tuple[int, ...]

    @property
    def job(self) -> str:
        return "profile" if self.name.startswith("breakdown.") or self.name == "draft_to_target_forward_pct" else "bench"

    @property
    def method(self) -> str:
        return self.config.split("-k")[0]

    @property
    def k(self) -> int | None:
        return int(self.config.split("-k")[1]) if "-k" in self.config else None


def parse_engine_key(key: str, experiments: Iterable[str], datasets: Iterable[str]) -> Quantity | None:
    """The :class:`Quantity` of an ``engine.<exp>.<dataset>.<config>...`` key (names may hold dots: matched
    against the config's experiment and dataset names); None for other keys."""
    if not key or not key.startswith("engine."):
        return None
    rest = key[len("engine."):]
    exp = next((e for e in sorted(experiments, key=len, reverse=True) if rest.startswith(e + ".")), None)
    if exp is None:
        return None
    rest = rest[len(exp) + 1:]
    ds = next((d for d in sorted(datasets, key=len, reverse=True) if rest.startswith(d + ".")), None)
    if ds is None:
        return None
    config, _, tail = rest[len(ds) + 1:].partition(".")
    name, _, suffix = tail.rpartition(".")
    if not suffix.startswith("b") or not name:
        return None
    try:
        bs = tuple(int(b) for b in suffix[1:].split("_b"))
    except ValueError:
        return None
    return Quantity(key, exp, ds, config, name, bs)


def _exp_map(cfg: Mapping[str, Any]) -> dict[str, dict]:
    return {e["name"]: e for e in cfg.get("experiments", []) or []}


def job_points(cfg: Mapping[str, Any], q: Quantity) -> bool:
    """Whether the config's engine jobs measure quantity ``q`` (its configuration, dataset and batch sizes)."""
    exp = _exp_map(cfg).get(q.exp)
    if exp is None:
        return False
    jobs = experiment_configs(exp)
    job = jobs.get(q.config)
    if job is None:
        return False
    if q.job == "profile":
        prof = cfg.get("profiling") or {}
        return q.dataset in profiled_datasets(exp, job, prof) and set(q.batch_sizes) <= set(prof.get("batch_sizes", []))
    if q.dataset not in job["datasets"] or not set(q.batch_sizes) <= set(exp["batch_sizes"]):
        return False
    if q.name in ("speedup", "speedup_drop_pct") or q.name.startswith("rel_to_eagle"):
        base = jobs.get("none")
        if base is None or q.dataset not in base["datasets"]:
            return False
    if q.name == "speedup_drop_pct":
        return q.batch_sizes[0] == min(exp["batch_sizes"])
    return True


def requests_in(cfg: Mapping[str, Any], q: Quantity) -> int:
    """Requests the config runs for quantity ``q``: the experiment's (or profiling's) ``num_requests``, at most the
    dataset's ``num_samples`` (as ``specrepro plan`` and the bench job count them)."""
    ds = cfg["datasets"][q.dataset]
    if q.job == "profile":
        n = profiled_requests(_exp_map(cfg)[q.exp], cfg.get("profiling") or {})
    else:
        n = _exp_map(cfg)[q.exp].get("num_requests")
    return int(min(int(n or ds["num_samples"]), int(ds["num_samples"])))


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
    draft = np.bincount(r, weights=w_ng * cost.ngram_draft(T) + st.eagle_w * cost.eagle_draft(kv, inp), minlength=R)
    over = (1 + np.bincount(r, minlength=R)) * cost.overhead
    n = L - 1
    base_ver = prefill + n * (cost.c_kv * B * (P + 1) + cost.c_compute * B + cost.c_fixed) + cost.c_kv * B * n * (n - 1) / 2
    return pd.DataFrame({"ver_s": ver, "draft_s": draft, "over_s": over, "base_ver_s": base_ver,
                         "base_over_s": L * cost.overhead})


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


# --- inputs: configs, released traces ---------------------------------------------------------------

REPO = Path(__file__).resolve().parents[3]
#: the full grid every plan is compared with
FULL_CONFIG = REPO / "config" / "paper.yaml"


def load_config(path: str | Path) -> dict:
    """A run config: the resolved JSON the workflow writes (``results/run_config.json``), or a config YAML checked
    and completed as the workflow does (schema defaults, cross-reference checks)."""
    path = Path(path)
    if path.suffix == ".json":
        return read_json(path)
    import yaml

    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecReproError(f"{path}: config not found") from None
    if not isinstance(cfg, dict):
        raise SpecReproError(f"{path}: not a config (expected a mapping)")
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    check_config(cfg)
    return cfg


def released_trace_files(cfg: Mapping[str, Any], given: Sequence[str | Path] = (), root: str | Path = ".") -> dict[str, Path]:
    """The released trace file of every dataset of ``cfg['released_traces']``, SHA-256 checked.

    Looked for in ``given`` (files or folders), else in the config's ``traces_dir`` (relative to the repository),
    else in ``<root>/resources/traces/<trace set>/`` (the workflow's verified copies); a folder may hold
    ``<dataset>.jsonl`` or the released name (``combined_<dataset>.jsonl``). Empty where none is found.
    """
    rt = cfg.get("released_traces") or {}
    files = rt.get("files") or {}
    pattern = rt.get("filename", "combined_{dataset}.jsonl")
    if given:
        places = [Path(p) for p in given]
    else:
        places = []
        if cfg.get("traces_dir"):
            td = Path(cfg["traces_dir"]).expanduser()
            places.append(td if td.is_absolute() else REPO / td)
        places.append(Path(root) / "resources" / "traces" / str(rt.get("name", "")))
    out: dict[str, Path] = {}
    for ds, meta in files.items():
        cands = []
        for p in places:
            if p.is_dir():
                cands += [p / f"{ds}.jsonl", p / pattern.format(dataset=ds)]
            elif p.name in (f"{ds}.jsonl", pattern.format(dataset=ds)):
                cands.append(p)
        found = next((c for c in cands if c.is_file()), None)
        if found is None:
            continue
        want = (meta or {}).get("sha256")
        if want and sha256_file(found) != want:
            raise SpecReproError(f"{found}: SHA-256 differs from released_traces.files.{ds}.sha256 in the config "
                                 "(not the released trace)")
        out[ds] = found
    return out


def trace_proxy(cfg: Mapping[str, Any], files: Mapping[str, Path]) -> TraceProxy | None:
    """The :class:`TraceProxy` of a config's released traces, simulator cost model and match probabilities."""
    if not files:
        return None

    sim = cfg.get("simulator") or {}
    name = sim.get("cost_model", "llama3.1-8b-h100")
    try:
        cost = load_cost_model(name)
    except SpecReproError:
        cost = load_cost_model(str(REPO / name))
    probs = {**NGRAM_MATCH_PROB, **(sim.get("ngram_match_prob") or {})}
    label = f"released traces ({(cfg.get('released_traces') or {}).get('name', '')})"
    return TraceProxy(files, cost, probs, PAPER_DRAW["num_requests"], PAPER_DRAW["seed"], label)


# --- the plan with the claims each job serves ----------------------------------------------------------


def _fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "inf" if x == math.inf else "--"
    return f"{x:.{digits}g}"


def claim_line(r: Mapping[str, Any]) -> str:
    """One claim of the plan: requests, expected half-width against the width that decides it, the verdict."""
    head = f"    {r['id']:<48}"
    if r["status"] == EXACT:
        return head + "exact: " + r["note"]
    if r["status"] != SIZED:
        return head + f"{r['status']}: {r['note']}"
    verdict = "decided" if r["decided"] else f"NOT decided: needs {_fmt(r['requests_needed'], 6)} requests"
    line = (head + f"n={int(r['requests']):>4}  expected +-{_fmt(r['expected_half_width'])}  "
            f"needs <= +-{_fmt(r['target_half_width'])} (decides at +-{_fmt(r['decisive_half_width'])})  {verdict}"
            f"  p={_fmt(r.get('p_decided', float('nan')), 3)}")
    return line + (f"\n{'':8}spread from: {r['proxy']}" if r.get("proxy") else "")


def joint_expectation(sizing: pd.DataFrame) -> dict:
    """Over the rows of :func:`size_claims`: claims, sized ones, the expected number of sized claims left undecided
    (sum of 1 - p_decided), the probability that all sized ones are decided (claims taken as independent), and the
    claims undecided by construction (not covered, not sized)."""
    sized = sizing[sizing["status"] == SIZED]
    p = sized["p_decided"].astype(float)
    return {"claims": int(len(sizing)), "sized": int(len(sized)), "expected_undecided": float((1 - p).sum()),
            "p_all": float(p.prod()) if len(p) else float("nan"),
            "not_covered": int((sizing["status"] == NOT_COVERED).sum()),
            "not_sized": int((sizing["status"] == NOT_SIZED).sum()), "exact": int((sizing["status"] == EXACT).sum())}


def format_sized_plan(plan: pd.DataFrame, sizing: pd.DataFrame | None, full_total: float | None,
                      full_name: str = "config/paper.yaml", spread_note: str = "",
                      requests: pd.DataFrame | None = None, coverage: pd.DataFrame | None = None) -> str:
    """The plan (one line per engine job: experiment, job, configuration, GPUs, points, estimated GPU-hours) with,
    under each job, the engine claims it measures, their expected 95 % half-widths, the probability each is decided
    and the trace that stood in for its spread; then every headline claim the config drops (with the config's
    reason), the figures it measures nothing of, the joint expectation over the sized claims, the config's total,
    the full grid's total and their ratio."""
    if plan.empty:
        return "no engine jobs in this config"
    rows = [] if sizing is None else sizing.to_dict("records")
    served: dict[str, list[dict]] = {}
    for r in rows:
        jobs = str(r.get("jobs") or "").split()
        for j in [j for j in jobs if not j.endswith("/none")] or jobs:
            served.setdefault(j, []).append(r)
    baseline_of = {j.split("/")[0] for r in rows for j in str(r.get("jobs") or "").split() if j.endswith("/bench/none")}
    lines = [f"{'experiment':<22} {'job':<8} {'config':<16} {'GPUs':>4} {'points':>7} {'est. GPU-h':>10}"]
    for r in plan.itertuples(index=False):
        lines.append(f"{r.exp:<22} {r.job:<8} {r.config:<16} {r.gpus:>4} {r.points:>7} {r.est_gpu_hours:>10.2f}")
        lines += [claim_line(c) for c in served.get(f"{r.exp}/{r.job}/{r.config}", [])]
        if r.job == "bench" and r.config == "none" and r.exp in baseline_of:
            lines.append("    (no SD: the baseline of this experiment's speedups)")
    total = float(plan["est_gpu_hours"].sum())
    if rows:
        st = sizing["status"]
        which = "headline engine claims" if sizing["headline"].all() else "engine claims"
        lines += ["", (f"{which}: {len(sizing)}; sized {int((st == SIZED).sum())} (expected to be decided: "
                       f"{int((sizing['decided'] & (st == SIZED)).sum())}), exact {int((st == EXACT).sum())}, not "
                       f"sized {int((st == NOT_SIZED).sum())}, not covered {int((st == NOT_COVERED).sum())}")]
        dropped = [r for r in rows if r["status"] == NOT_COVERED]
        if dropped:
            lines.append(f"dropped by this config ({len(dropped)}; the full grid measures them):")
            lines += [f"    {r['id']:<48}{r['note']}" for r in dropped]
        lines += [claim_line(r) for r in rows if r["status"] == NOT_SIZED or (r["status"] == SIZED and not r["decided"])]
        j = joint_expectation(sizing)
        if j["sized"]:
            lines.append(
                f"joint expectation: each sized claim is decided with probability >= {POWER:g} even at "
                f"{100 * (SPREAD_MARGIN - 1):.0f} % more spread than estimated; at the estimated spread the {j['sized']} "
                f"sized claims leave {j['expected_undecided']:.2f} undecided on average and are all decided with "
                f"probability {j['p_all']:.2f} (claims taken as independent); of the others, not covered "
                f"{j['not_covered']} (never decided by this config), not sized {j['not_sized']} (measured, their "
                f"decision not predicted)")
        if spread_note:
            lines.append(f"(per-request spread: {spread_note})")
    if coverage is not None and len(coverage):
        lines += ["", "engine claims per figure: measured by this config / in the registry (headline: measured / all)"]
        for r in coverage.itertuples(index=False):
            why = "" if r.measured else f"  dropped: {r.reason}" if r.reason else "  (no reason in run.dropped_claims)"
            lines.append(f"    {r.group:<44} {r.measured:>4} / {r.claims:<4} (headline {r.headline_measured} / "
                         f"{r.headline}){why}")
    if requests is not None and len(requests):
        lines += ["", "requests per experiment, job and dataset: needed by its sized claims / in this config"]
        per = requests.groupby(["exp", "job", "dataset"], sort=False)[["requests_needed", "requests"]].max()
        for (exp, job, ds), r in per.iterrows():
            flag = "" if r["requests"] >= r["requests_needed"] else "  (too few)"
            lines.append(f"    {exp:<22} {job:<8} {ds:<14} {_fmt(r['requests_needed'], 6):>6} / {int(r['requests'])}{flag}")
    lines += ["", f"{'GPU-hours, this config':<44} {total:>10.2f}"]
    if full_total:
        lines.append(f"{'GPU-hours, full grid (' + full_name + ')':<44} {full_total:>10.2f}")
        lines.append(f"{'this config / full grid':<44} {100 * total / full_total:>9.2f} %")
    lines.append("(estimate: cost-model no-SD time, every SD job charged as no-SD; scaled by weight bytes per GPU; output "
                 "lengths = datasets.<d>.expected_output_tokens, else the output cap. Expected half-widths: 95 % "
                 f"intervals over the job's requests at {100 * (SPREAD_MARGIN - 1):.0f} % more than the estimated spread; "
                 "p: the probability the claim is decided at the estimated spread; specrepro.analysis.sizing)")
    return "\n".join(lines)


# --- the CLI verb ------------------------------------------------------------------------------------------


def add_cli(sub) -> None:
    """``specrepro sizing-study``: the sizing rule checked by subsampling the released traces."""
    p = sub.add_parser("sizing-study", help="check the sizing rule on the released traces: subsamples of the sized "
                                            "sizes, their intervals' coverage and decisions (CSV)")
    p.add_argument("--run-config", required=True, help="results/run_config.json (simulator cost model, match probabilities)")
    p.add_argument("--traceset", required=True, help="the released trace set (its simulator claims are studied)")
    p.add_argument("--traces", nargs="+", required=True, help="its trace files (<dataset>.jsonl), SHA-256 checked")
    p.add_argument("--claims", required=True, help="the claims registry")
    p.add_argument("--sized-config", help="a config whose engine claims' stand-ins are studied at its request counts "
                                          "(config/paper-quick.yaml)")
    p.add_argument("--replications", type=int, default=1000, help="subsamples per quantity")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=_run_study)


def _run_study(a) -> None:
    if a.replications < 10:
        raise SpecReproError(f"--replications must be at least 10, got {a.replications}")
    cfg = load_config(a.run_config)
    files = released_trace_files(cfg, a.traces)
    missing = sorted(set((cfg.get("released_traces") or {}).get("files", {})) - set(files))
    if missing:
        raise SpecReproError(f"no trace file of dataset {missing[0]!r} among --traces")
    proxy = trace_proxy(cfg, files)
    sized = load_config(a.sized_config) if a.sized_config else None
    table = validation_study(load_claims(a.claims), a.traceset, proxy, sized, a.replications, a.seed)
    write_csv(a.output, table, float_format="%.6g")
