"""Shared pieces of the simulator figures and tables: loading summaries, labels, styles, paper values."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from ..core.errors import SpecReproError
from ..core.uncertainty import MIN_INTERVAL_REQUESTS, request_range
from ..analysis.claims import load_claims

#: policy -> (label, colour, marker, line style); the paper's Fig. 10 assignment
POLICY_STYLE = {
    "fixed-1": ("k=1", "#1f77b4", "o", "-"),
    "fixed-3": ("k=3", "#ff7f0e", "s", "-"),
    "fixed-5": ("k=5", "#2ca02c", "D", "-"),
    "oracle": ("Oracle", "#d62728", "*", ":"),
    "adaptive": ("Adaptive (online)", "#6a3d9a", "P", "-."),
}

#: proposer -> (label, colour); the paper's Fig. 12 assignment (n-gram green, EAGLE orange, combine red)
PROPOSER_STYLE = {
    "ngram": ("n-gram", "#2ca02c"),
    "eagle": ("EAGLE", "#ff7f0e"),
    "combined": ("Oracle Combine", "#d62728"),
}

PAPER_MODE = {"batching": "replicate", "pairing": "index", "combine_cost": "ngram"}


def load_summaries(paths: Sequence[str | Path]) -> pd.DataFrame:
    """Concatenated summary CSVs of ``specrepro simulate``."""
    frames = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise SpecReproError(f"{p}: file not found")
        frames.append(pd.read_csv(p))
    if not frames:
        raise SpecReproError("no simulator summaries given")
    return pd.concat(frames, ignore_index=True)


def paper_mode(df: pd.DataFrame) -> pd.DataFrame:
    mask = pd.Series(True, index=df.index)
    for k, v in PAPER_MODE.items():
        mask &= df[k] == v
    return df[mask]


def series(df: pd.DataFrame, dataset: str, proposer: str, policy: str, **modes) -> pd.DataFrame:
    """Rows of one curve, sorted by batch size (paper mode unless ``modes`` say otherwise)."""
    want = {**PAPER_MODE, **modes}
    m = (df["dataset"] == dataset) & (df["proposer"] == proposer) & (df["policy"] == policy)
    for k, v in want.items():
        m &= df[k] == v
    return df[m].sort_values("batch_size")


def paper_values(registry: str | Path | None, traceset: str) -> dict[str, float]:
    """The paper's simulator values by metric key, from the claims registry (empty without one)."""
    if not registry:
        return {}

    prefix = f"sim.{traceset}."
    return {c.measured_by: c.plotted_value for c in load_claims(registry)
            if c.evidence == "simulator" and c.measured_by and c.measured_by.startswith(prefix)
            and c.plotted_value is not None}


def bs_axis(ax, batch_sizes) -> None:
    """Batch sizes on a linear axis, labelled at the simulated points (as the paper plots them)."""
    ax.set_xticks(list(batch_sizes))
    ax.set_xticklabels([str(b) if b not in (8,) else "" for b in batch_sizes])
    ax.grid(True, linestyle="--", linewidth=0.3, color="#bbbbbb")
    ax.set_axisbelow(True)


def band(ax, s: pd.DataFrame, color: str, alpha: float = 0.15) -> None:
    """The rows' 95 % intervals (columns ci_low, ci_high) as a shaded band behind their curve; none at rows of fewer
    than MIN_INTERVAL_REQUESTS requests (column ``requests``: a CPU run's engine traces have 2 per dataset), which the
    figure says once, in a note above it (:func:`few_requests_note`)."""
    if "ci_low" not in s or not s["ci_low"].notna().any():
        return
    lo, hi = s["ci_low"], s["ci_high"]
    if "requests" in s:
        few = s["requests"].notna() & (s["requests"] < MIN_INTERVAL_REQUESTS)
        if few.any():
            few_requests_note(ax.figure, s.loc[few, "requests"])
        lo, hi = lo.where(~few), hi.where(~few)
    ok = lo.notna() & hi.notna()
    if not ok.any():
        return
    ax.fill_between(s.loc[ok, "batch_size"], lo[ok], hi[ok], color=color, alpha=alpha, linewidth=0, zorder=1)


#: gid of the note under a figure that some of its curves have no band
FEW_REQUESTS_GID = "few-requests-note"


def few_requests_note(fig, requests) -> None:
    """Say above ``fig``, once however many panels call it, that curves over these request counts have no band."""
    ns = set(getattr(fig, "_few_requests", set())) | {int(n) for n in requests}
    fig._few_requests = ns
    text = (f"No band for curves over {request_range(ns)} requests per point: too few for a 95 % interval "
            f"(at least {MIN_INTERVAL_REQUESTS}).")
    note = next((t for t in fig.texts if t.get_gid() == FEW_REQUESTS_GID), None)
    if note is None:
        # above the figure's top edge: the figures that call it keep their bottom for a legend of any width and their
        # top for the closed loop's lines (a suptitle inside the figure)
        fig.text(0.0, 1.005, text, ha="left", va="bottom", fontsize=6, color="#444444", gid=FEW_REQUESTS_GID)
    else:
        note.set_text(text)


def plot_policy(ax, s: pd.DataFrame, pol: str) -> None:
    """One policy's simulated speedup against batch size (Fig. 10's styles) over its 95 % band (:func:`band`)."""
    label, color, marker, ls = POLICY_STYLE[pol]
    ax.plot(s["batch_size"], s["speedup"], color=color, marker=marker, linestyle=ls,
            markersize=6 if marker == "*" else 3.5, label=label)
    band(ax, s, color)
