"""The paper's quantitative claims against this run's measurements, decided by intervals.

The registry (``paper/claims.yaml``) is the single place where values quoted from the paper live, each
with unit, source and tolerance. A claim names the metric key that measures it (``measured_by``) and the
kind of evidence that may decide it (``evidence``): ``trace`` (the released traces), ``simulator`` (our
simulator on released traces), ``engine`` (vLLM on the paper's hardware), ``none`` (outside this
artifact). A CPU run never decides an ``engine`` claim: its tiny models say nothing about the paper.

**Kinds** (``kind``, default ``value``) say what the paper asserts:

* ``value``: the quantity is the paper's ``value``, within ``tolerance`` (``abs`` and/or ``rel``; the band
  is ``value +- max(abs, rel * |value|)``; relative where values are small).
* ``upper`` / ``lower``: the quantity is at most / at least ``value`` (e.g. "sampling < 1.7 %"); an
  optional ``tolerance`` widens the bound (``value + tol`` / ``value - tol``).
* ``below-one`` / ``above-one``: the quantity (a speedup) is below / above 1; ``value`` is the paper's own
  number, shown but not used.
* ``ordering``: the quantity ``measured_by`` (A) is above the quantity ``than`` (B); ``value`` and
  ``value_b`` are the paper's A and B (optional, shown only).

``headline: true`` marks the claims the report's summary of a figure shows (the rest are in its appendix).

**Bands from rounding and spread** (``tolerance_from``: ``resolution``, ``spread``, ``requests``; Fig. 4's time
shares): the paper's value ``v`` is its measurement rounded to ``resolution`` r (half its last printed digit),
and that measurement, a mean over ``requests`` n with per-request spread ``spread`` s, carries the standard error
``s / sqrt(n)``. A rerun of the same size (same spread, same n) has its 95 % interval inside ``v +- tol`` with
probability at least :data:`BAND_POWER` when ``tol = r + (Z + z_0.95 sqrt 2) s / sqrt(n)`` (Z its own interval's
half-width; z_0.95 sqrt 2 the 90 % two-sided spread of the difference of two such means; r the rounding at
worst), rounded up to 0.01 (:func:`band_from_spread`). The loader checks that ``tolerance`` is that value.

**Statuses.** Each measured quantity comes with a 95 % bootstrap interval over requests [low, high]
(:mod:`specrepro.core.uncertainty`; metric keys ``<key>.ci_low``, ``<key>.ci_high``, ``<key>.n``). The status
compares the interval with the claim (:func:`status_from_interval`):

* ``reproduced``: the whole interval satisfies the claim. value: [low, high] inside the band; upper:
  high <= bound; lower: low >= bound; below-one: high < 1; above-one: low > 1; ordering: low(A) > high(B).
* ``not reproduced``: the whole interval contradicts it. value: [low, high] disjoint from the band;
  upper: low > bound; lower: high < bound; below-one: low >= 1; above-one: high <= 1; ordering:
  high(A) < low(B).
* ``consistent but not resolved``: neither: the interval overlaps the claim and its negation, so this
  run cannot tell (more requests would).
* ``not measured in this run``: no value for the key, or a kind of run that may not decide the claim.

A quantity measured without an interval (a count, a figure of a single run) is decided on its point value
(low = high = estimate), which gives reproduced / not reproduced only. A quantity computed on the very
requests the paper's value was computed on (``<key>.same_sample``: the simulator's paper-mode draw of the
released traces) shares the paper's request-sampling error, so its point decides and its interval is
shown for information. Ordering claims compare two separate intervals, which is conservative: disjoint
95 % intervals are stronger evidence than a 95 % interval of the difference.

For sizing a run (:func:`decisive_half_width`): the largest half-width of an interval centred on an
estimate that still decides the claim; an interval of half-width ``w`` over ``n`` requests needs about
``n * (w / decisive)^2`` requests (:func:`specrepro.core.uncertainty.requests_for_half_width`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd
import yaml

from ..core.io import SpecReproError, read_json
from ..core.uncertainty import CI_LOW, SAME_SAMPLE, interval_of

EVIDENCE = ("trace", "simulator", "engine", "none")
KINDS = ("value", "upper", "lower", "below-one", "above-one", "ordering")
#: kinds whose ``value`` is the paper's measured number (drawn as rings in figures)
PAPER_VALUE_KINDS = ("value", "below-one", "above-one")
REPRODUCED = "reproduced"
CONSISTENT = "consistent but not resolved"
NOT_REPRODUCED = "not reproduced"
NOT_MEASURED = "not measured in this run"
STATUSES = (REPRODUCED, CONSISTENT, NOT_REPRODUCED, NOT_MEASURED)
#: how a decided claim was decided (``decided_on``): on the point of a value computed on the paper's own requests,
#: on a 95 % interval, or on the point of a value that has no interval
SAME_POINT, INTERVAL, POINT = "point (same requests as the paper)", "interval", "point (no interval)"
#: the report's two decision rules (and the claims without an interval): rule -> the ``decided_on`` it applies.
#: *simulator fidelity*: the simulator on the authors' traces and the paper's own draw of requests gives the
#: paper's plotted value (the point inside the band); *statistically reproduced*: another sample's whole 95 %
#: interval satisfies the claim
RULES = {"fidelity": SAME_POINT, "statistical": INTERVAL, "point": POINT}
EPS = 1e-12  # rounding slack at band edges
#: a rerun of the paper's own size passes a band of :func:`band_from_spread` with at least this probability
BAND_POWER = 0.9


def band_from_spread(resolution: float, spread: float, requests: int, power: float = BAND_POWER) -> float:
    """Half-width of a value claim's band from the paper's rounding ``resolution``, the per-request ``spread`` of its
    measurement and the ``requests`` it averaged (module docstring): ``r + (Z + z sqrt 2) s / sqrt(n)``, z the
    two-sided ``power`` quantile, rounded up to 0.01."""
    from statistics import NormalDist

    nd = NormalDist()
    z95, zp = nd.inv_cdf(0.975), nd.inv_cdf((1 + power) / 2)
    tol = resolution + (z95 + zp * math.sqrt(2)) * spread / math.sqrt(requests)
    return math.ceil(tol * 100 - 1e-9) / 100


@dataclass(frozen=True)
class Claim:
    id: str
    group: str
    statement: str
    value: float | None
    unit: str
    source: str
    tolerance_abs: float | None
    tolerance_rel: float | None
    evidence: str
    measured_by: str | None
    note: str = ""
    kind: str = "value"
    than: str | None = None  #: ordering: the metric key the measured one must be above
    value_b: float | None = None  #: ordering: the paper's value of ``than``
    headline: bool = False  #: shown in the report's summary of its figure
    tolerance_from: tuple | None = None  #: (resolution, spread, requests) the band is derived from, if it is

    def tolerance(self, value: float | None = None) -> float:
        """Allowed absolute deviation from the paper's value (0 where the claim has no tolerance)."""
        value = self.value if value is None else value
        tol = 0.0
        if self.tolerance_abs is not None:
            tol = max(tol, self.tolerance_abs)
        if self.tolerance_rel is not None and value is not None:
            tol = max(tol, abs(value) * self.tolerance_rel)
        return tol

    def tolerance_text(self) -> str:
        parts = []
        if self.tolerance_abs is not None:
            parts.append(f"±{self.tolerance_abs:g}")
        if self.tolerance_rel is not None:
            parts.append(f"±{100 * self.tolerance_rel:g}%")
        return " or ".join(parts)

    def band(self) -> tuple[float, float]:
        """value: [value - tol, value + tol]; upper: (-inf, bound]; lower: [bound, inf); below/above-one: the side of 1."""
        if self.kind == "value":
            t = self.tolerance()
            return self.value - t, self.value + t
        if self.kind == "upper":
            return -math.inf, self.value + self.tolerance()
        if self.kind == "lower":
            return self.value - self.tolerance(), math.inf
        if self.kind == "below-one":
            return -math.inf, 1.0
        if self.kind == "above-one":
            return 1.0, math.inf
        raise ValueError(f"claim {self.id}: kind {self.kind!r} has no band")

    def claim_text(self) -> str:
        """What a measurement must satisfy, in a few symbols (for tables)."""
        if self.kind == "value":
            lo, hi = self.band()
            return f"in [{lo:.4g}, {hi:.4g}]"
        if self.kind == "upper":
            return f"≤ {self.band()[1]:.4g}"
        if self.kind == "lower":
            return f"≥ {self.band()[0]:.4g}"
        if self.kind == "below-one":
            return "< 1"
        if self.kind == "above-one":
            return "> 1"
        return "above the second key"

    @property
    def plotted_value(self) -> float | None:
        """The paper's number of this quantity, where the claim states one (rings in figures)."""
        return self.value if self.kind in PAPER_VALUE_KINDS else None


def load_claims(path: str | Path) -> list[Claim]:
    """Read and check the registry; a malformed entry is a one-line error."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecReproError(f"{path}: claims registry not found") from None
    entries = doc.get("claims") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise SpecReproError(f"{path}: expected a top-level 'claims:' list")
    out: list[Claim] = []
    seen: set[str] = set()
    for i, e in enumerate(entries):
        where = f"{path}: claims[{i}]"
        for key in ("id", "group", "statement", "unit", "source", "evidence"):
            if key not in e:
                raise SpecReproError(f"{where}: missing '{key}'")
        where = f"{path}: claim {e['id']}"
        if e["id"] in seen:
            raise SpecReproError(f"{where}: id used twice")
        seen.add(e["id"])
        kind = e.get("kind", "value")
        if kind not in KINDS:
            raise SpecReproError(f"{where}: kind {kind!r} not one of {', '.join(KINDS)}")
        if e["evidence"] not in EVIDENCE:
            raise SpecReproError(f"{where}: evidence {e['evidence']!r} not one of {', '.join(EVIDENCE)}")
        if kind == "value" and "tolerance" not in e:
            raise SpecReproError(f"{where}: missing 'tolerance' (a value claim needs one: abs and/or rel)")
        tol = e.get("tolerance")
        if tol is not None:
            if kind not in ("value", "upper", "lower"):
                raise SpecReproError(f"{where}: kind {kind!r} takes no tolerance (only value, upper, lower do)")
            if not isinstance(tol, dict) or not tol or not set(tol) <= {"abs", "rel"}:
                raise SpecReproError(f"{where}: tolerance must be a mapping with 'abs' and/or 'rel'")
            if any(not isinstance(v, (int, float)) or v < 0 for v in tol.values()):
                raise SpecReproError(f"{where}: tolerance values must be non-negative numbers, got {tol}")
        tol = tol or {}
        for key in ("value", "value_b"):
            v = e.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise SpecReproError(f"{where}: {key} must be a number, got {v!r}")
        if kind != "ordering" and e.get("value") is None:
            raise SpecReproError(f"{where}: missing 'value' (kind {kind} needs the paper's number)")
        if e["evidence"] != "none" and not e.get("measured_by"):
            raise SpecReproError(f"{where}: evidence {e['evidence']!r} needs 'measured_by' (a metric key)")
        if kind == "ordering" and e["evidence"] != "none" and not e.get("than"):
            raise SpecReproError(f"{where}: an ordering claim needs 'than' (the metric key it must be above)")
        if kind != "ordering" and e.get("than"):
            raise SpecReproError(f"{where}: 'than' is for ordering claims only")
        if not isinstance(e.get("headline", False), bool):
            raise SpecReproError(f"{where}: headline must be true or false, got {e['headline']!r}")
        rule = e.get("tolerance_from")
        if rule is not None:
            if not isinstance(rule, dict) or not {"resolution", "spread", "requests"} <= set(rule):
                raise SpecReproError(f"{where}: tolerance_from needs resolution, spread and requests")
            want = band_from_spread(float(rule["resolution"]), float(rule["spread"]), int(rule["requests"]))
            if set(tol) != {"abs"} or abs(tol["abs"] - want) > 1e-9:
                raise SpecReproError(f"{where}: tolerance {tol} is not the band of its tolerance_from ({{abs: {want:g}}})")
        out.append(
            Claim(
                id=str(e["id"]), group=str(e["group"]), statement=str(e["statement"]),
                value=None if e.get("value") is None else float(e["value"]), unit=str(e["unit"]),
                source=str(e["source"]), tolerance_abs=tol.get("abs"), tolerance_rel=tol.get("rel"),
                evidence=e["evidence"], measured_by=e.get("measured_by"), note=str(e.get("note", "")), kind=kind,
                than=e.get("than"), value_b=None if e.get("value_b") is None else float(e["value_b"]),
                headline=bool(e.get("headline", False)),
                tolerance_from=None if rule is None else (float(rule["resolution"]), float(rule["spread"]),
                                                          int(rule["requests"])),
            )
        )
    return out


def load_metrics(paths: Iterable[str | Path]) -> dict[str, float]:
    """Merge metric files (``{key: value}`` JSON); a key defined twice is an error."""
    merged: dict[str, float] = {}
    for p in paths:
        data = read_json(p)
        for k, v in data.items():
            if k in merged:
                raise SpecReproError(f"{p}: metric {k!r} is also defined in another metrics file")
            merged[k] = v
    return merged


def decidable(claim: Claim, run_kind: str, engine_claims: bool = True) -> bool:
    """Whether this kind of run may decide the claim at all (``engine_claims``: false for a functional GPU run,
    ``run.decides_engine_claims``, whose engine numbers decide nothing)."""
    if claim.evidence == "none":
        return False
    if claim.evidence == "engine":
        return run_kind == "gpu" and engine_claims
    return True


def _point(x: float, low: float | None, high: float | None) -> tuple[float, float]:
    lo = x if low is None or not math.isfinite(low) else float(low)
    hi = x if high is None or not math.isfinite(high) else float(high)
    return min(lo, x), max(hi, x)


def status_from_interval(
    claim: Claim, estimate: float, low: float | None = None, high: float | None = None, *,
    other: tuple[float, float | None, float | None] | None = None,
) -> str:
    """reproduced / consistent but not resolved / not reproduced for one measured quantity (module docstring).

    ``low``/``high`` default to the estimate (a point). Ordering claims take the second quantity as
    ``other = (estimate, low, high)``. The interval is widened to hold the estimate, should a skewed
    bootstrap leave it outside.
    """
    if estimate is None or not math.isfinite(estimate):
        return NOT_MEASURED
    lo, hi = _point(float(estimate), low, high)
    if claim.kind == "ordering":
        if other is None or other[0] is None or not math.isfinite(other[0]):
            return NOT_MEASURED
        lo_b, hi_b = _point(float(other[0]), other[1], other[2])
        if lo > hi_b:
            return REPRODUCED
        if hi < lo_b:
            return NOT_REPRODUCED
        return CONSISTENT
    b_lo, b_hi = claim.band()
    if claim.kind in ("below-one", "above-one"):
        # strict: a speedup of exactly 1 neither slows down nor speeds up
        if claim.kind == "below-one":
            return REPRODUCED if hi < 1.0 else NOT_REPRODUCED if lo >= 1.0 else CONSISTENT
        return REPRODUCED if lo > 1.0 else NOT_REPRODUCED if hi <= 1.0 else CONSISTENT
    if b_lo - EPS <= lo and hi <= b_hi + EPS:
        return REPRODUCED
    if hi < b_lo - EPS or lo > b_hi + EPS:
        return NOT_REPRODUCED
    return CONSISTENT


def decisive_half_width(claim: Claim, estimate: float, other: float | None = None) -> float:
    """The largest half-width of an interval centred on ``estimate`` (and on ``other``, for an ordering) that
    still decides the claim (reproduced or not reproduced); 0 on a band edge. For sizing runs."""
    if estimate is None or not math.isfinite(estimate):
        return float("nan")
    if claim.kind == "ordering":
        return float("nan") if other is None or not math.isfinite(other) else abs(estimate - other) / 2
    lo, hi = claim.band()
    if lo <= estimate <= hi:
        return float(min(estimate - lo, hi - estimate))
    return float(lo - estimate if estimate < lo else estimate - hi)


def _measured(metrics: Mapping[str, float], key: str | None):
    """(interval or None, same sample?) of a metric key."""
    if not key:
        return None, False
    return interval_of(metrics, key), bool(metrics.get(key + SAME_SAMPLE))


COLUMNS = ["id", "group", "kind", "statement", "paper_value", "paper_value_b", "unit", "source", "tolerance",
           "claim", "evidence", "measured_by", "than", "this_run", "ci_low", "ci_high", "n", "this_run_b",
           "ci_low_b", "ci_high_b", "decided_on", "decisive_half_width", "status", "headline", "note"]


def evaluate(claims: list[Claim], metrics: Mapping[str, float], run_kind: str,
             engine_claims: bool = True) -> pd.DataFrame:
    """One row per claim (columns :data:`COLUMNS`): paper value, this run's value and interval, status
    (``engine_claims``: see :func:`decidable`)."""
    nan = float("nan")
    rows = []
    for c in claims:
        a, same_a = _measured(metrics, c.measured_by)
        b, same_b = _measured(metrics, c.than) if c.kind == "ordering" else (None, False)
        row = {"id": c.id, "group": c.group, "kind": c.kind, "statement": c.statement,
               "paper_value": nan if c.value is None else c.value,
               "paper_value_b": nan if c.value_b is None else c.value_b, "unit": c.unit, "source": c.source,
               "tolerance": c.tolerance_text(), "claim": c.claim_text(), "evidence": c.evidence,
               "measured_by": c.measured_by or "", "than": c.than or "", "this_run": nan, "ci_low": nan,
               "ci_high": nan, "n": nan, "this_run_b": nan, "ci_low_b": nan, "ci_high_b": nan, "decided_on": "",
               "decisive_half_width": nan, "status": NOT_MEASURED, "headline": c.headline, "note": c.note}
        measured = a is not None and (c.kind != "ordering" or b is not None)
        if measured and decidable(c, run_kind, engine_claims):
            has_ci = (c.measured_by + CI_LOW) in metrics
            same = same_a and (c.kind != "ordering" or same_b)
            row.update(this_run=a.estimate, ci_low=a.low if has_ci else nan, ci_high=a.high if has_ci else nan,
                       n=a.n if a.n else nan)
            other = None
            if c.kind == "ordering":
                b_ci = (c.than + CI_LOW) in metrics
                row.update(this_run_b=b.estimate, ci_low_b=b.low if b_ci else nan, ci_high_b=b.high if b_ci else nan)
                other = (b.estimate, None, None) if same else (b.estimate, b.low, b.high)
                has_ci = has_ci or b_ci
            if same:
                row["decided_on"] = SAME_POINT
                row["status"] = status_from_interval(c, a.estimate, other=other)
            else:
                row["decided_on"] = INTERVAL if has_ci else POINT
                row["status"] = status_from_interval(c, a.estimate, a.low, a.high, other=other)
            row["decisive_half_width"] = decisive_half_width(c, a.estimate, None if b is None else b.estimate)
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def rule_counts(table: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per decision rule of :data:`RULES`, the decided claims it decided by status (every status present, 0 where
    none) and ``total``; claims not measured have no rule."""
    how = table["decided_on"].fillna("") if "decided_on" in table else pd.Series([""] * len(table), dtype=str)
    out = {}
    for rule, decided_on in RULES.items():
        part = table[(how == decided_on).to_numpy()]
        counts = status_counts(part)
        out[rule] = {**counts, "total": int(len(part))}
    return out


def status_counts(table: pd.DataFrame) -> dict[str, int]:
    """Claims per status, every status present (0 where none)."""
    got = table["status"].value_counts().to_dict() if len(table) else {}
    return {s: int(got.get(s, 0)) for s in STATUSES}
