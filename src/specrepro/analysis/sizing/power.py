"""The arithmetic of sizing: the normal quantile, power, the margin a claim's interval needs and the requests that
give it; the spread of a mean, a ratio or a function of means."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np

from ...core.errors import SpecReproError
from ..claims import Claim


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
