"""Bootstrap confidence intervals over requests (percentile method, fixed seed).

Every engine and simulator quantity of the paper is a statistic over requests (a mean of per-request
throughputs, a ratio of two such means, a pooled rate). Its uncertainty comes from which requests were
sampled, so the intervals resample *requests* with replacement: a ratio of two methods measured on
the same requests resamples the pairs together (:func:`bootstrap_ratio_ci`).

The random stream is NumPy's PCG64 seeded with ``seed`` (default :data:`SEED`), so an interval is a
pure function of its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

SEED = 42
N_BOOT = 2000
LEVEL = 0.95


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


def _indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


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
