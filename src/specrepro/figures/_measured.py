"""The measured upper bound (vLLM's oracle drafters, :mod:`specrepro.analysis.drafted`) beside the simulated one, for
the per-experiment Figs. 10 and 12: ``measured_bounds.csv`` rows of ``oracle-<method>`` / ``oracle-combine``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.uncertainty import MIN_INTERVAL_REQUESTS

MEASURED_LABEL = "upper bound, measured"
SIMULATED_LABEL = "upper bound, simulated (same requests, engine's accounting)"


def load_bounds(path: str | None) -> pd.DataFrame:
    """The measured oracles of ``engine-drafted``'s bounds table (empty without one), at each config's largest k."""
    if not path or not Path(path).exists() or Path(path).stat().st_size == 0:
        return pd.DataFrame()
    t = pd.read_csv(path)
    t = t[t["mode"] == "oracle"] if "mode" in t else t.iloc[0:0]
    if t.empty:
        return t
    kmax = t.groupby(["dataset", "method"])["k"].transform("max")
    return t[t["k"] == kmax]


def plot_measured(ax, bounds: pd.DataFrame, dataset: str, method: str, color: str) -> bool:
    """Measured oracle ``method`` (``oracle-<m>``) on ``dataset``: filled diamonds with their 95 % interval (none
    over fewer than MIN_INTERVAL_REQUESTS requests), and the simulator's value for the same requests and B (engine
    accounting) as open diamonds beside them."""
    if bounds.empty:
        return False
    s = bounds[(bounds["dataset"] == dataset) & (bounds["method"] == method)].sort_values("batch_size")
    if s.empty:
        return False
    # an interval over too few requests is not a 95 % interval: no bar (the figure's note says so)
    shown = s["requests"] >= MIN_INTERVAL_REQUESTS if "requests" in s else pd.Series(True, index=s.index)
    ax.plot(s["batch_size"], s["measured"], color=color, marker="D", markersize=4, linestyle="none", zorder=5,
            label=MEASURED_LABEL)
    e = s[shown]
    if not e.empty:
        ax.errorbar(e["batch_size"], e["measured"], yerr=[(e["measured"] - e["measured_ci_low"]).clip(lower=0),
                                                          (e["measured_ci_high"] - e["measured"]).clip(lower=0)],
                    fmt="none", ecolor=color, capsize=2, elinewidth=0.8, zorder=5)
    ax.plot(s["batch_size"], s["simulated"], color=color, marker="D", markersize=4, markerfacecolor="white",
            linestyle="none", zorder=6, label=SIMULATED_LABEL)
    return True
