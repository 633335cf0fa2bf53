"""Shared pieces of the per-experiment simulator figures (trace sets ``engine-<exp>``)."""

from __future__ import annotations

import math

import pandas as pd

from . import style
from ..analysis.closedloop import signed_pct
from ..core.io import read_json
from ..core.latex import whole

#: every proposer of an engine experiment that is not one method: labels
COMBINED_LABEL = "Oracle Combine (all)"

#: the ``--drafted`` option of the figures and tables that state the closed loop's error
DRAFTED_HELP = ("results/simulator/engine-<exp>/drafted.json, where the experiment ran draft jobs (its repeat check: the "
                "noise floor between jobs)")


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


def _finite(v) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def tex_pct(v, sign: bool = False) -> str:
    """A table cell in whole percent: ``12\\,\\%``; with ``sign`` ``+9\\,\\%`` / ``-4\\,\\%``, and ``0\\,\\%`` (not
    ``-0``) where it rounds to nothing; ``--`` when missing."""
    if v is None or v != v:
        return "--"
    return whole(100 * v, sign) + "\\,\\%"


def signed_error_text(s: dict) -> str:
    """The closed loop's mean signed error (simulated / measured - 1, as
    :func:`specrepro.analysis.closedloop.summarise` writes it: ``mean_error``, ``optimistic_points``) and the way it
    leans: ``mean error +9 % (optimistic: 22 of 28 simulated above measured)``; a mean that rounds to 0 % leans
    neither way, and a mean whose sign the majority of points contradicts says so (``mean error -2 % (pessimistic
    on average, though 16 of 28 simulated above measured)``); empty without a mean."""
    mean = s.get("mean_error")
    if not _finite(mean):
        return ""
    pos, n = s.get("optimistic_points"), s.get("points")
    if not round(100 * mean):
        head, sep = "mean error 0 % (neither way", ": "
    else:
        head = f"mean error {signed_pct(mean)} ({'optimistic' if mean > 0 else 'pessimistic'}"
        # the mean can lean against most points (a few large errors); then the count must not read as its support
        against = _finite(pos) and _finite(n) and ((mean > 0) != (2 * pos > n)) and 2 * pos != n
        sep = " on average, though " if against else ": "
    return head + (f"{sep}{int(pos)} of {n} simulated above measured" if _finite(pos) else "") + ")"


def ordering_text(s: dict) -> str:
    """In how many (dataset, batch size) groups the simulator orders the configurations as measured, beside the
    baseline that always guesses the most common measured order (``ranking_baseline_agreeing``, from
    :func:`specrepro.analysis.closedloop.order_agreement`): ``ordering agrees in 5 of 8 groups (always guessing the
    most common measured order: 5 of 8)``; empty without groups."""
    if not s.get("groups"):
        return ""
    text = f"ordering agrees in {s.get('groups_agreeing', 0)} of {s['groups']} groups"
    base = s.get("ranking_baseline_agreeing")
    if _finite(base):
        text += f" (always guessing the most common measured order: {int(base)} of {s['groups']})"
    return text


def noise_floor_text(drafted: dict) -> str:
    """The draft jobs' repeat check (``drafted.json``'s ``repeat``: one configuration measured in two jobs) as the
    closed loop's noise floor: ``one configuration timed in two jobs (...): 12 % apart (median of 2 pairs), the
    noise floor an error below which is not resolved here``; empty without pairs."""
    rep = drafted.get("repeat") or {}
    if not rep.get("pairs"):
        return ""
    n = int(rep["pairs"])
    return (f"one configuration timed in two jobs (a draft job replaying its trace, and the benchmark): "
            f"{100 * rep['median_abs']:.0f} % apart (median of {n} pair{'s' if n > 1 else ''}), the noise floor an "
            "error below which is not resolved here")


def measured_bound_text(drafted: dict) -> str:
    """The simulated upper bound against the one measured inside vLLM (``drafted.json``'s ``oracle``: the oracle
    drafter's jobs): ``the upper bound measured inside vLLM (10 points): simulated median |error| 8 %, worst 21 %,
    mean +7 % (the simulated bound optimistic)``; empty without points."""
    o = drafted.get("oracle") or {}
    if not o.get("points"):
        return ""
    mean = o.get("mean_error")
    lean = ""
    if _finite(mean) and round(100 * mean):
        lean = " (the simulated bound optimistic)" if mean > 0 else " (the simulated bound pessimistic)"
    return (f"the upper bound measured inside vLLM ({int(o['points'])} points): median |error| "
            f"{100 * o['median_abs_error']:.0f} %, worst {100 * o['worst_abs_error']:.0f} %"
            + (f", mean {signed_pct(mean)}{lean}" if _finite(mean) else ""))


def error_statement(path, sep: str = "; ", drafted=None) -> str:
    """How far the simulator is from this experiment's measured speedups (the closed loop): its size, its sign, its
    ordering beside the most-common-order baseline and, with ``drafted`` (``drafted.json``), the measured upper bound
    (:func:`measured_bound_text`) and the noise floor between jobs (:func:`noise_floor_text`), the clauses joined by
    ``sep`` (``";\n"`` for a figure's title on several lines)."""
    s = read_json(path)
    if not s.get("points"):
        return "Closed loop: no configuration both benchmarked and traced; the simulator is unchecked here."
    parts = [f"Checked against this run's measurements (closed loop): median |error| {100 * s['median_abs_error']:.0f} %, "
             f"worst {100 * s['worst_abs_error']:.0f} % over {s['points']} points"]
    d = read_json(drafted) if drafted else {}
    parts += [x for x in (signed_error_text(s), ordering_text(s), measured_bound_text(d), noise_floor_text(d)) if x]
    return sep.join(parts) + "."


def wrap_label(text: str) -> str:
    """A long panel title on two lines, before its parenthesis (``code editing\n(InstructCoder-shaped)``)."""
    head, sep, tail = text.partition(" (")
    return f"{head}\n({tail}" if sep and len(text) > 22 else text


def fmt(v, f="{:.2f}") -> str:
    return "--" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f.format(v)
