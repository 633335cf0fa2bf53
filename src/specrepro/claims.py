"""The paper's quantitative claims against this run's measurements.

The registry (``paper/claims.yaml``) is the single place where values quoted from
the paper live, each with unit, source and tolerance. A claim names the metric
key that measures it (``measured_by``) and the kind of evidence that may decide
it (``evidence``): ``trace`` (the released traces), ``simulator`` (our simulator
on released traces), ``engine`` (vLLM on the paper's hardware). A CPU run never
decides an ``engine`` claim: its tiny models say nothing about the paper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd
import yaml

from .io import SpecReproError, read_json

EVIDENCE = ("trace", "simulator", "engine", "none")
REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_MEASURED = "not measured in this run"


@dataclass(frozen=True)
class Claim:
    id: str
    group: str
    statement: str
    value: float
    unit: str
    source: str
    tolerance_abs: float | None
    tolerance_rel: float | None
    evidence: str
    measured_by: str | None
    note: str = ""

    def tolerance(self, value: float) -> float:
        """Allowed absolute deviation from the paper's value."""
        tol = 0.0
        if self.tolerance_abs is not None:
            tol = max(tol, self.tolerance_abs)
        if self.tolerance_rel is not None:
            tol = max(tol, abs(value) * self.tolerance_rel)
        return tol

    def tolerance_text(self) -> str:
        parts = []
        if self.tolerance_abs is not None:
            parts.append(f"±{self.tolerance_abs:g}")
        if self.tolerance_rel is not None:
            parts.append(f"±{100 * self.tolerance_rel:g}%")
        return " or ".join(parts)


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
        for key in ("id", "group", "statement", "value", "unit", "source", "tolerance", "evidence"):
            if key not in e:
                raise SpecReproError(f"{where}: missing '{key}'")
        if e["id"] in seen:
            raise SpecReproError(f"{where}: id {e['id']!r} used twice")
        seen.add(e["id"])
        if e["evidence"] not in EVIDENCE:
            raise SpecReproError(f"{where}: evidence {e['evidence']!r} not one of {', '.join(EVIDENCE)}")
        tol = e["tolerance"] or {}
        if not isinstance(tol, dict) or not set(tol) <= {"abs", "rel"} or not tol:
            raise SpecReproError(f"{where}: tolerance must be a mapping with 'abs' and/or 'rel'")
        if not isinstance(e["value"], (int, float)):
            raise SpecReproError(f"{where}: value must be a number, got {e['value']!r}")
        if e["evidence"] != "none" and not e.get("measured_by"):
            raise SpecReproError(f"{where}: evidence {e['evidence']!r} needs 'measured_by' (a metric key)")
        out.append(
            Claim(
                id=str(e["id"]), group=str(e["group"]), statement=str(e["statement"]), value=float(e["value"]),
                unit=str(e["unit"]), source=str(e["source"]), tolerance_abs=tol.get("abs"),
                tolerance_rel=tol.get("rel"), evidence=e["evidence"], measured_by=e.get("measured_by"),
                note=str(e.get("note", "")),
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


def decidable(claim: Claim, run_kind: str) -> bool:
    """Whether this kind of run may decide the claim at all."""
    if claim.evidence == "none":
        return False
    if claim.evidence == "engine":
        return run_kind == "gpu"
    return True


def evaluate(claims: list[Claim], metrics: Mapping[str, float], run_kind: str) -> pd.DataFrame:
    """One row per claim: paper value, this run's value (or NaN), status."""
    rows = []
    for c in claims:
        measured = metrics.get(c.measured_by) if c.measured_by else None
        if measured is None or not decidable(c, run_kind) or (isinstance(measured, float) and math.isnan(measured)):
            status, shown = NOT_MEASURED, float("nan")
        else:
            shown = float(measured)
            status = REPRODUCED if abs(shown - c.value) <= c.tolerance(c.value) + 1e-12 else NOT_REPRODUCED
        rows.append(
            {
                "id": c.id, "group": c.group, "statement": c.statement, "paper_value": c.value, "unit": c.unit,
                "source": c.source, "tolerance": c.tolerance_text(), "evidence": c.evidence,
                "measured_by": c.measured_by or "", "this_run": shown, "status": status, "note": c.note,
            }
        )
    return pd.DataFrame(rows)
