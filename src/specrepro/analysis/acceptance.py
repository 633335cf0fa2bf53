"""Acceptance behaviour per position, request and dataset, from tidy trace tables.

Inputs are positions tables as built by :func:`specrepro.core.traces.positions_table`
(``dataset, order, request_id, proposer, position, acc_len, aligned``).

Every statistic comes with its 95 % bootstrap interval over requests (``<stat>_ci_low``, ``<stat>_ci_high``;
:mod:`specrepro.core.uncertainty`): statistics over positions (mean, median, p90, wins) resample whole requests
with all their positions; statistics over per-request means resample the means.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ..core.uncertainty import (
    Interval, bootstrap_pooled_quantiles_ci, bootstrap_pooled_ratio_ci, bootstrap_quantiles_ci, interval_metrics,
)

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

    Columns: ``dataset, proposer, wins, paired_positions``; the rest are ties (and, with three or more proposers,
    positions where another proposer is ahead).
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


#: the authors' generation cap: the released traces' longest outputs end at exactly this many tokens
OUTPUT_CAP = 8192


def capped_outputs(positions: pd.DataFrame, proposers: Sequence[str], cap: int = OUTPUT_CAP) -> pd.DataFrame:
    """Per dataset x proposer: the outputs of that proposer's trace that run to the generation cap (``cap``
    positions: cut off, not finished; ``capped_requests``), the share of that trace's positions they hold
    (``capped_share``), the mean acceptance length without them (``mean_uncapped``), and, the same on every row of a
    dataset, how many distinct requests are capped in at least one proposer's trace (``capped_requests_any``: the
    traces need not cap the same requests, so it is no sum or maximum of the per-proposer counts)."""
    sub = positions[positions["proposer"].isin(list(proposers))]
    rows, capped_ids = [], {}
    for (ds, prop), g in sub.groupby(["dataset", "proposer"], sort=True, observed=True):
        per = g.groupby("request_id", observed=True)["acc_len"].agg(["size", "sum"])
        capped = per["size"] >= cap
        rest = per[~capped]
        capped_ids.setdefault(str(ds), set()).update(str(r) for r in per.index[capped])
        rows.append({"dataset": str(ds), "proposer": str(prop), "capped_requests": int(capped.sum()),
                     "capped_share": float(per.loc[capped, "size"].sum() / per["size"].sum()),
                     "mean_uncapped": float(rest["sum"].sum() / rest["size"].sum()) if len(rest) else float("nan")})
    for r in rows:
        r["capped_requests_any"] = len(capped_ids[r["dataset"]])
    return pd.DataFrame(rows, columns=["dataset", "proposer", "capped_requests", "capped_share", "mean_uncapped",
                                       "capped_requests_any"])


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
    ci = stats_intervals(sub, proposers)
    return out.merge(ci, on=["dataset", "proposer"], how="left") if len(ci) else out


#: statistics of :func:`acceptance_stats` that get an interval
STATS_WITH_CI = ("mean", "median", "p90", "request_mean_median", "wins")


def _by_request(sub: pd.DataFrame) -> list[np.ndarray]:
    """acc_len of each request (in request order) of one dataset x proposer."""
    sub = sub.sort_values(["order", "position"], kind="mergesort")
    order = sub["order"].to_numpy()
    cuts = np.flatnonzero(order[1:] != order[:-1]) + 1
    return np.split(sub["acc_len"].to_numpy(dtype=np.int64), cuts) if len(sub) else []


def stats_intervals(positions: pd.DataFrame, proposers: Sequence[str]) -> pd.DataFrame:
    """Per dataset x proposer: ``<stat>_ci_low`` and ``<stat>_ci_high`` of :data:`STATS_WITH_CI`."""
    rows = []
    sub = positions[positions["proposer"].isin(list(proposers))]
    pairs = paired(sub, proposers)
    for (dataset, proposer), g in sub.groupby(["dataset", "proposer"], sort=True, observed=True):
        reqs = _by_request(g)
        ivs = {"mean": bootstrap_pooled_ratio_ci([r.sum() for r in reqs], [r.size for r in reqs])}
        ivs["median"], ivs["p90"] = bootstrap_pooled_quantiles_ci(reqs, [0.5, 0.9])
        (ivs["request_mean_median"],) = bootstrap_quantiles_ci([r.mean() for r in reqs], [50])
        ivs["wins"] = win_share_interval(pairs[pairs["dataset"] == dataset], proposers, str(proposer))
        row = {"dataset": str(dataset), "proposer": str(proposer)}
        for k, iv in ivs.items():
            row[f"{k}_ci_low"], row[f"{k}_ci_high"] = iv.low, iv.high
        rows.append(row)
    return pd.DataFrame(rows, columns=["dataset", "proposer"] + [f"{k}_ci_{e}" for k in STATS_WITH_CI
                                                                  for e in ("low", "high")])


def win_share_interval(pairs: pd.DataFrame, proposers: Sequence[str], proposer: str) -> Interval:
    """Interval of one proposer's win share (:func:`win_shares`) over the requests of ``pairs`` (one dataset)."""
    if pairs.empty:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    values = pairs[list(proposers)].to_numpy()
    j = list(proposers).index(proposer)
    won = (values[:, j][:, None] > np.delete(values, j, axis=1)).all(axis=1)
    per = pd.DataFrame({"order": pairs["order"].to_numpy(), "won": won.astype(float)}).groupby("order")["won"]
    return bootstrap_pooled_ratio_ci(per.sum().to_numpy(), per.size().to_numpy(dtype=float))


def request_mean_percentiles(positions: pd.DataFrame) -> pd.DataFrame:
    """Percentiles (5, 25, 50, 75, 95) of the per-request mean span, per dataset and proposer, with their
    intervals (``p<q>_ci_low``, ``p<q>_ci_high``) and the number of requests ``n``."""
    rm = request_means(positions)
    rows = []
    for (dataset, proposer), grp in rm.groupby(["dataset", "proposer"], sort=True, observed=True):
        ivs = bootstrap_quantiles_ci(grp["mean_acc_len"].to_numpy(), BOX_PERCENTILES)
        rows.append((str(dataset), str(proposer), *[iv.estimate for iv in ivs], len(grp),
                     *[x for iv in ivs for x in (iv.low, iv.high)]))
    return pd.DataFrame(rows, columns=["dataset", "proposer", *[f"p{p}" for p in BOX_PERCENTILES], "n",
                                       *[f"p{p}_ci_{e}" for p in BOX_PERCENTILES for e in ("low", "high")]])


def metrics(positions: pd.DataFrame, stats: pd.DataFrame, traceset: str) -> dict[str, float]:
    """Measured values for the claims table, keyed ``traces.<set>.<dataset>.<proposer>.<quantity>``."""
    out: dict[str, float] = {}
    has_ci = "mean_ci_low" in stats.columns
    for row in stats.itertuples(index=False):
        base = f"traces.{traceset}.{row.dataset}.{row.proposer}"
        for q in STATS_WITH_CI:
            v = getattr(row, q)
            if pd.notna(v):
                lo, hi = (getattr(row, f"{q}_ci_low"), getattr(row, f"{q}_ci_high")) if has_ci else (v, v)
                out.update(interval_metrics(f"{base}.{q}", Interval(float(v), lo, hi, int(row.requests))))
    for row in request_mean_percentiles(positions).itertuples(index=False):
        base = f"traces.{traceset}.{row.dataset}.{row.proposer}.request_mean"
        for p in BOX_PERCENTILES:
            out.update(interval_metrics(f"{base}.p{p}", Interval(float(getattr(row, f"p{p}")),
                                                                 getattr(row, f"p{p}_ci_low"),
                                                                 getattr(row, f"p{p}_ci_high"), int(row.n))))
    return dict(sorted(out.items()))
