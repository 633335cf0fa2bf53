"""Bootstrap confidence intervals over requests (percentile method, fixed seed).

Every engine and simulator quantity of the paper is a statistic over requests (a mean of per-request
throughputs, a ratio of two such means, a pooled rate). Its uncertainty comes from which requests were
sampled, so the intervals resample *requests* with replacement: a ratio of two methods measured on
the same requests resamples the pairs together (:func:`bootstrap_ratio_ci`).

The random stream is NumPy's PCG64 seeded with ``seed`` (default :data:`SEED`), so an interval is a
pure function of its inputs. Every bootstrap of ``n`` requests draws the same index matrix (cached per
``n``), so statistics over the same requests are resampled jointly.

Flat metrics (``results/metrics/*.json``) carry an interval as three extra keys next to the point value
(:func:`interval_metrics`): ``<key>.ci_low``, ``<key>.ci_high``, ``<key>.n``. A value computed on the very
requests the paper's own value was computed on (the simulator's paper-mode draw of the released traces)
also carries ``<key>.same_sample = 1``: its request-sampling error is shared with the paper's value, so
:mod:`specrepro.analysis.claims` decides it on the point and shows the interval for information.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

SEED = 42
N_BOOT = 2000
LEVEL = 0.95
#: fewest requests whose bootstrap interval a table or figure prints as a 95 % interval: with 2 requests the
#: percentile bootstrap has 3 distinct resamples (0.90 [0.90, 0.90] says nothing); the report's minimum of
#: requests per dataset (specrepro.core.layout.MIN_REQUESTS) is the same 8
MIN_INTERVAL_REQUESTS = 8


def printable_interval(low: float, high: float, n: float | None) -> tuple[float, float]:
    """``(low, high)``, or NaN for both where the interval rests on fewer than :data:`MIN_INTERVAL_REQUESTS` requests
    (``n`` unknown: as given)."""
    if n is not None and not (isinstance(n, float) and math.isnan(n)) and int(n) < MIN_INTERVAL_REQUESTS:
        return math.nan, math.nan
    return low, high


def request_range(ns) -> str:
    """``2`` or ``2-5``: the fewest and most of some request counts."""
    lo, hi = int(min(ns)), int(max(ns))
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def too_few_text(requests, unit: str = "point", rows: str = "points") -> str:
    """Where some of ``requests`` (one count per row) are under :data:`MIN_INTERVAL_REQUESTS`: ``"2 requests per
    point (3 of 8 points): too few for a 95 % interval (at least 8)"`` (the part in brackets only where some rows
    have enough); otherwise ``""``. Unknown counts (NaN) are not few."""
    def num(n) -> float:
        try:
            return float(n)
        except (TypeError, ValueError):  # pandas' NA, None
            return math.nan

    ns = [num(n) for n in requests]
    few = [n for n in ns if n == n and n < MIN_INTERVAL_REQUESTS]
    if not few:
        return ""
    where = "" if len(few) == len(ns) else f" ({len(few)} of {len(ns)} {rows})"
    return (f"{request_range(few)} requests per {unit}{where}: too few for a 95 % interval "
            f"(at least {MIN_INTERVAL_REQUESTS})")


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap interval; ``n`` = number of requests it rests on."""

    estimate: float
    low: float
    high: float
    n: int
    level: float = LEVEL

    @property
    def width(self) -> float:
        return self.high - self.low

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}estimate": self.estimate, f"{prefix}ci_low": self.low, f"{prefix}ci_high": self.high,
                f"{prefix}n": self.n}


#: suffixes of the interval keys next to a metric's point value
CI_LOW, CI_HIGH, CI_N, SAME_SAMPLE = ".ci_low", ".ci_high", ".n", ".same_sample"
CI_SUFFIXES = (CI_LOW, CI_HIGH, CI_N, SAME_SAMPLE)


@functools.lru_cache(maxsize=16)
def _cached_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    idx.setflags(write=False)
    return idx


def _indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    return _cached_indices(int(n), int(n_boot), int(seed))


def _percentiles(stats: np.ndarray, level: float) -> tuple[float, float]:
    a = (1 - level) / 2
    lo, hi = np.nanquantile(stats, [a, 1 - a])
    return float(lo), float(hi)


def bootstrap_ci(
    values: Sequence[float], stat: Callable[[np.ndarray], float] | None = None, *, n_boot: int = N_BOOT,
    seed: int = SEED, level: float = LEVEL,
) -> Interval:
    """Interval of ``stat`` (default: the mean) over per-request ``values``; NaN interval for n = 0, point for n = 1."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, level)
    est = float(np.mean(x) if stat is None else stat(x))
    if n == 1:
        return Interval(est, est, est, 1, level)
    idx = _indices(n, n_boot, seed)
    if stat is None:
        boots = x[idx].mean(axis=1)
    else:
        boots = np.array([stat(x[i]) for i in idx])
    lo, hi = _percentiles(boots, level)
    return Interval(est, lo, hi, n, level)


def bootstrap_ratio_ci(
    num: Sequence[float], den: Sequence[float], *, paired: bool = True, n_boot: int = N_BOOT, seed: int = SEED,
    level: float = LEVEL,
) -> Interval:
    """Interval of mean(num) / mean(den): a speedup as the paper computes it (ratio of mean throughputs).

    ``paired`` (same requests in both, same order): one resample of request indices serves both means.
    Otherwise each side is resampled on its own (streams ``seed`` and ``seed + 1``).
    """
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if paired and len(a) != len(b):
        raise ValueError(f"paired ratio needs equal lengths, got {len(a)} and {len(b)}")
    if len(a) == 0 or len(b) == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, level)
    est = float(a.mean() / b.mean())
    n = min(len(a), len(b))
    if n == 1:
        return Interval(est, est, est, 1, level)
    if paired:
        idx = _indices(len(a), n_boot, seed)
        boots = a[idx].mean(axis=1) / b[idx].mean(axis=1)
    else:
        boots = a[_indices(len(a), n_boot, seed)].mean(axis=1) / b[_indices(len(b), n_boot, seed + 1)].mean(axis=1)
    lo, hi = _percentiles(boots, level)
    return Interval(est, lo, hi, n, level)


def bootstrap_pooled_ratio_ci(
    num: Sequence[float], den: Sequence[float], *, n_boot: int = N_BOOT, seed: int = SEED, level: float = LEVEL,
) -> Interval:
    """Interval of sum(num) / sum(den) over requests (a pooled rate, e.g. accepted / drafted tokens)."""
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(a) != len(b):
        raise ValueError(f"pooled ratio needs equal lengths, got {len(a)} and {len(b)}")
    if len(a) == 0 or b.sum() == 0:
        return Interval(float("nan"), float("nan"), float("nan"), len(a), level)
    est = float(a.sum() / b.sum())
    if len(a) == 1:
        return Interval(est, est, est, 1, level)
    idx = _indices(len(a), n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        boots = a[idx].sum(axis=1) / b[idx].sum(axis=1)
    lo, hi = _percentiles(boots, level)
    return Interval(est, lo, hi, len(a), level)


def _nan(n: int = 0, level: float = LEVEL) -> Interval:
    return Interval(float("nan"), float("nan"), float("nan"), n, level)


def bootstrap_function_ci(
    arrays: Sequence[Sequence[float]], fn: Callable[..., np.ndarray], *, reduce: str = "mean", n_boot: int = N_BOOT,
    seed: int = SEED, level: float = LEVEL,
) -> Interval:
    """Interval of ``fn(m_1, ..., m_j)``, ``m_i`` the mean (``reduce="sum"``: the sum) of per-request ``arrays[i]``.

    The arrays hold one value per request, the same requests in the same order; one resample of request
    indices serves all of them (a paired bootstrap). ``fn`` must work elementwise on NumPy arrays (it gets
    one value per resample), e.g. ``lambda s0, s: 100 * (s0 - s) / s0``.
    """
    xs = [np.asarray(a, dtype=float) for a in arrays]
    n = len(xs[0]) if xs else 0
    if any(len(x) != n for x in xs):
        raise ValueError(f"paired arrays need equal lengths, got {[len(x) for x in xs]}")
    if n == 0:
        return _nan(0, level)
    red = np.mean if reduce == "mean" else np.sum
    with np.errstate(invalid="ignore", divide="ignore"):
        est = float(fn(*[red(x) for x in xs]))
        if n == 1:
            return Interval(est, est, est, 1, level)
        idx = _indices(n, n_boot, seed)
        boots = np.asarray(fn(*[red(x[idx], axis=1) for x in xs]), dtype=float)
    lo, hi = _percentiles(boots, level)
    return Interval(est, lo, hi, n, level)


def bootstrap_quantiles_ci(
    values: Sequence[float], percentiles: Sequence[float], *, n_boot: int = N_BOOT, seed: int = SEED,
    level: float = LEVEL,
) -> list[Interval]:
    """Intervals of several percentiles (NumPy's linear rule) of per-request ``values``, one resample for all."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return [_nan(0, level) for _ in percentiles]
    est = np.percentile(x, list(percentiles))
    if n == 1:
        return [Interval(float(e), float(e), float(e), 1, level) for e in est]
    boots = np.percentile(x[_indices(n, n_boot, seed)], list(percentiles), axis=1)
    return [Interval(float(e), *_percentiles(b, level), n, level) for e, b in zip(est, boots)]


def _hist_quantile(hist: np.ndarray, values: np.ndarray, q: float) -> np.ndarray:
    """Linear-rule q-quantile of the values a histogram row counts (one result per row of ``hist``)."""
    cum = np.cumsum(hist, axis=1)
    total = cum[:, -1]
    h = (total - 1) * q
    lo_i, hi_i = np.floor(h), np.ceil(h)
    lo_v = values[np.argmax(cum > lo_i[:, None], axis=1)]
    hi_v = values[np.argmax(cum > hi_i[:, None], axis=1)]
    return lo_v + (h - lo_i) * (hi_v - lo_v)


def bootstrap_pooled_quantiles_ci(
    per_request: Sequence[Sequence[int]], quantiles: Sequence[float], *, n_boot: int = N_BOOT, seed: int = SEED,
    level: float = LEVEL,
) -> list[Interval]:
    """Intervals of quantiles of values pooled over requests (e.g. the median acceptance length over all output
    positions), resampling whole requests. Values are small integers; each request is kept as a histogram, so a
    resample is one matrix product. Quantiles use the linear rule (pandas' and NumPy's default)."""
    reqs = [np.asarray(v, dtype=np.int64) for v in per_request]
    reqs = [v for v in reqs if v.size]
    n = len(reqs)
    if n == 0:
        return [_nan(0, level) for _ in quantiles]
    values = np.unique(np.concatenate(reqs))
    hist = np.stack([np.bincount(np.searchsorted(values, v), minlength=values.size) for v in reqs]).astype(float)
    pooled = hist.sum(axis=0, keepdims=True)
    est = [float(_hist_quantile(pooled, values.astype(float), q)[0]) for q in quantiles]
    if n == 1:
        return [Interval(e, e, e, 1, level) for e in est]
    idx = _indices(n, n_boot, seed)
    counts = np.zeros((idx.shape[0], n))
    np.add.at(counts, (np.repeat(np.arange(idx.shape[0]), n), idx.ravel()), 1.0)
    boot_hist = counts @ hist
    return [Interval(e, *_percentiles(_hist_quantile(boot_hist, values.astype(float), q), level), n, level)
            for e, q in zip(est, quantiles)]


def envelope(intervals: Sequence[Interval], how: str) -> Interval:
    """The interval of the largest (``how="max"``) or smallest (``"min"``) of several estimates, as the envelope
    of their intervals: [max of lows, max of highs] (or the mins). An upper bound on all estimates holds with
    confidence when the envelope's high is below it. ``n`` is the fewest requests among those with an interval
    (n >= 2; a single-request estimate enters as a point)."""
    ivs = [iv for iv in intervals if not math.isnan(iv.estimate)]
    if not ivs:
        return _nan()
    pick = max if how == "max" else min
    lows = [iv.low if math.isfinite(iv.low) else iv.estimate for iv in ivs]
    highs = [iv.high if math.isfinite(iv.high) else iv.estimate for iv in ivs]
    ns = [iv.n for iv in ivs if iv.n >= 2] or [iv.n for iv in ivs]
    return Interval(pick(iv.estimate for iv in ivs), pick(lows), pick(highs), min(ns), ivs[0].level)


def interval_metrics(key: str, iv: Interval, same_sample: bool = False) -> dict[str, float]:
    """``{key: estimate, key.ci_low, key.ci_high, key.n}`` (``key.same_sample`` if set). Finite values only; no
    interval keys below 2 requests (one request says nothing about the spread: the point decides)."""
    out: dict[str, float] = {}
    if iv.estimate is None or not math.isfinite(iv.estimate):
        return out
    out[key] = float(iv.estimate)
    if iv.n >= 2 and math.isfinite(iv.low) and math.isfinite(iv.high):
        out[key + CI_LOW], out[key + CI_HIGH] = float(iv.low), float(iv.high)
    out[key + CI_N] = int(iv.n)
    if same_sample:
        out[key + SAME_SAMPLE] = 1
    return out


def interval_of(metrics: Mapping[str, float], key: str) -> Interval | None:
    """The point value and interval of ``key`` in flat metrics (low = high = estimate where none was stored)."""
    v = metrics.get(key)
    if v is None or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        return None
    lo, hi = metrics.get(key + CI_LOW), metrics.get(key + CI_HIGH)
    n = metrics.get(key + CI_N)
    if lo is None or hi is None:
        return Interval(float(v), float(v), float(v), int(n) if n is not None else 0)
    return Interval(float(v), float(lo), float(hi), int(n) if n is not None else 0)


def is_interval_key(key: str) -> bool:
    """Whether a flat metrics key is one of the interval keys next to a point value."""
    return key.endswith(CI_SUFFIXES)


def requests_for_half_width(iv: Interval, half_width: float) -> float:
    """Requests an interval like ``iv`` needs to shrink to ``half_width`` (it scales as 1/sqrt(n)):
    ``n * (iv.width / 2 / half_width)^2``; NaN without an interval, 1 where ``iv`` has zero width."""
    if iv.n < 2 or not (math.isfinite(iv.low) and math.isfinite(iv.high)) or half_width <= 0:
        return float("nan")
    return max(1.0, iv.n * (iv.width / 2 / half_width) ** 2)
