"""Shared pieces of the per-experiment simulator figures (trace sets ``engine-<exp>``)."""

from __future__ import annotations

import math

import pandas as pd

from . import style
from ..core.io import read_json

#: every proposer of an engine experiment that is not one method: labels
COMBINED_LABEL = "Oracle Combine (all)"


def proposer_label(p: str) -> str:
    """``ngram`` -> ``n-gram``; ``ngram+eagle`` -> ``n-gram + EAGLE``; ``combined`` -> Oracle Combine (all)."""
    if p == "combined":
        return COMBINED_LABEL
    return " + ".join(style.METHOD_LABELS.get(x, x) for x in p.split("+"))


def methods(summary: pd.DataFrame) -> list[str]:
    """The single methods of a summary (no combinations), in the order they appear."""
    return [p for p in dict.fromkeys(summary["proposer"]) if p != "combined" and "+" not in p]


def load(path) -> pd.DataFrame:
    return pd.read_csv(path)


def error_statement(path) -> str:
    """One line: how far the simulator is from this experiment's measured speedups (the closed loop)."""
    s = read_json(path)
    if not s.get("points"):
        return "Closed loop: no configuration both benchmarked and traced; the simulator is unchecked here."
    text = (f"Checked against this run's measurements (closed loop): median |error| {100 * s['median_abs_error']:.0f} %, "
            f"worst {100 * s['worst_abs_error']:.0f} % over {s['points']} points")
    if s.get("groups"):
        text += f"; ordering of configurations agrees in {s['groups_agreeing']} of {s['groups']} groups"
    return text + "."


def wrap_label(text: str) -> str:
    """A long panel title on two lines, before its parenthesis (``code editing\n(InstructCoder-shaped)``)."""
    head, sep, tail = text.partition(" (")
    return f"{head}\n({tail}" if sep and len(text) > 22 else text


def fmt(v, f="{:.2f}") -> str:
    return "--" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f.format(v)
