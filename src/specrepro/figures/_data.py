"""Loading the tidy trace tables that figure scripts read."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..core.io import read_parquet


def load_concat(paths: Sequence[str | Path]) -> pd.DataFrame:
    """Concatenate tables (one per dataset) in the given order."""
    return pd.concat([read_parquet(p) for p in paths], ignore_index=True)


def length_order(requests: pd.DataFrame, dataset: str) -> np.ndarray:
    """Request ``order`` values of ``dataset`` sorted by output length, shortest first (stable)."""
    sub = requests[requests["dataset"] == dataset]
    return sub.sort_values(["output_len", "order"], kind="mergesort")["order"].to_numpy()


def position_matrix(
    positions: pd.DataFrame, dataset: str, proposer: str, rows: np.ndarray, max_position: int
) -> np.ndarray:
    """``acc_len`` as a requests x positions matrix (NaN where the trace has no value)."""
    sub = positions[(positions["dataset"] == dataset) & (positions["proposer"] == proposer)]
    sub = sub[sub["position"] < max_position]
    row_of = {int(o): i for i, o in enumerate(rows)}
    m = np.full((len(rows), max_position), np.nan)
    r = sub["order"].map(row_of)
    keep = r.notna().to_numpy()
    m[r[keep].astype(int).to_numpy(), sub["position"].to_numpy()[keep]] = sub["acc_len"].to_numpy()[keep]
    return m
