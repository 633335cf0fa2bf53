"""Acceptance behaviour per position, request and dataset, from tidy trace tables.

Inputs are positions tables as built by :func:`specrepro.traces.positions_table`
(``dataset, order, request_id, proposer, position, acc_len, aligned``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

#: percentiles of the per-request mean span that Fig. 7 draws (whiskers 5-95, box 25-75)
BOX_PERCENTILES = (5, 25, 50, 75, 95)


def request_means(positions: pd.DataFrame) -> pd.DataFrame:
    """Mean tokens per step of each request and proposer (the Fig. 7 quantity)."""
    g = positions.groupby(["dataset", "proposer", "order", "request_id"], sort=True, observed=True)
    out = g["acc_len"].agg(trace_len="size", mean_acc_len="mean").reset_index()
    return out


def paired(positions: pd.DataFrame, proposers: Sequence[str]) -> pd.DataFrame:
    """Positions where every proposer in ``proposers`` has a value, paired by index (as Oracle Combine pairs them).

    Columns: ``dataset, order, position`` and one column per proposer.
    """
    sub = positions[positions["proposer"].isin(list(proposers))]
    wide = sub.pivot_table(
        index=["dataset", "order", "position"], columns="proposer", values="acc_len", aggfunc="first", observed=True
    )
    wide = wide.dropna(subset=list(proposers)).astype(np.int64).reset_index()
    wide.columns.name = None
    return wide[["dataset", "order", "position", *proposers]]


def win_shares(pairs: pd.DataFrame, proposers: Sequence[str]) -> pd.DataFrame:
    """Per dataset: share of paired positions where each proposer yields strictly more tokens than all others.

    Columns: ``dataset, proposer, wins, paired_positions``; ties make up the rest.
    """
    rows = []
    for dataset, grp in pairs.groupby("dataset", sort=True):
        values = grp[list(proposers)].to_numpy()
        n = len(grp)
        for j, p in enumerate(proposers):
            others = np.delete(values, j, axis=1)
            wins = int((values[:, j][:, None] > others).all(axis=1).sum())
            rows.append((dataset, p, wins / n if n else float("nan"), n))
    return pd.DataFrame(rows, columns=["dataset", "proposer", "wins", "paired_positions"])


def acceptance_stats(positions: pd.DataFrame, proposers: Sequence[str]) -> pd.DataFrame:
    """The acceptance-statistics table: one row per dataset x proposer, sorted.

    Columns: dataset, proposer, requests, positions, mean, median, p90 (of acc_len over
    positions), request_mean_median (median over requests of the per-request mean),
    wins (share of index-paired positions where this proposer beats every other),
    paired_positions.
    """
    sub = positions[positions["proposer"].isin(list(proposers))]
    g = sub.groupby(["dataset", "proposer"], sort=True, observed=True)["acc_len"]
    base = pd.DataFrame(
        {
            "positions": g.size(),
            "mean": g.mean(),
            "median": g.median(),
            "p90": g.quantile(0.9),
        }
    )
    rm = request_means(sub).groupby(["dataset", "proposer"], observed=True)["mean_acc_len"]
    base["requests"] = rm.size()
    base["request_mean_median"] = rm.median()
    base = base.reset_index()
    ws = win_shares(paired(sub, proposers), proposers)
    out = base.merge(ws, on=["dataset", "proposer"], how="left")
    cols = [
        "dataset", "proposer", "requests", "positions", "mean", "median", "p90",
        "request_mean_median", "wins", "paired_positions",
    ]
    out = out[cols].sort_values(["dataset", "proposer"], kind="mergesort").reset_index(drop=True)
    out["dataset"] = out["dataset"].astype(str)
    out["proposer"] = out["proposer"].astype(str)
    out["paired_positions"] = out["paired_positions"].astype("Int64")
    return out


def request_mean_percentiles(positions: pd.DataFrame) -> pd.DataFrame:
    """Percentiles (5, 25, 50, 75, 95) of the per-request mean span, per dataset and proposer."""
    rm = request_means(positions)
    rows = []
    for (dataset, proposer), grp in rm.groupby(["dataset", "proposer"], sort=True, observed=True):
        q = np.percentile(grp["mean_acc_len"].to_numpy(), BOX_PERCENTILES)
        rows.append((str(dataset), str(proposer), *q))
    return pd.DataFrame(rows, columns=["dataset", "proposer", *[f"p{p}" for p in BOX_PERCENTILES]])


def metrics(positions: pd.DataFrame, stats: pd.DataFrame, traceset: str) -> dict[str, float]:
    """Measured values for the claims table, keyed ``traces.<set>.<dataset>.<proposer>.<quantity>``."""
    out: dict[str, float] = {}
    for row in stats.itertuples(index=False):
        base = f"traces.{traceset}.{row.dataset}.{row.proposer}"
        for q in ("mean", "median", "p90", "request_mean_median", "wins"):
            v = getattr(row, q)
            if pd.notna(v):
                out[f"{base}.{q}"] = float(v)
    for row in request_mean_percentiles(positions).itertuples(index=False):
        base = f"traces.{traceset}.{row.dataset}.{row.proposer}.request_mean"
        for p in BOX_PERCENTILES:
            out[f"{base}.p{p}"] = float(getattr(row, f"p{p}"))
    return dict(sorted(out.items()))
