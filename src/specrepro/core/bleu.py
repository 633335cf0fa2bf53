"""Token-level BLEU-4 between a request's prompt and its output (the paper's Fig. 9 x-axis).

Sentence BLEU (Papineni et al. 2002) with the output as hypothesis and the prompt as
the single reference: the geometric mean of the clipped 1- to 4-gram precisions times
the brevity penalty ``exp(1 - len(prompt) / len(output))`` when the output is shorter;
0 when some precision is 0 (no smoothing). High values mean the output copies the
prompt, where n-gram lookup shines.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def _ngram_keys(tokens: np.ndarray, n: int) -> np.ndarray:
    """Each n-gram as one row of a 2-D array (for counting with np.unique)."""
    if tokens.size < n:
        return np.zeros((0, n), dtype=np.int64)
    return np.lib.stride_tricks.sliding_window_view(tokens.astype(np.int64), n)


def _clipped_matches(hyp: np.ndarray, ref: np.ndarray, n: int) -> tuple[int, int]:
    """(matches clipped by the reference counts, n-grams in the hypothesis)."""
    h = _ngram_keys(hyp, n)
    if h.shape[0] == 0:
        return 0, 0
    r = _ngram_keys(ref, n)
    both = np.concatenate([h, r]) if r.shape[0] else h
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.ravel()
    size = int(inv.max()) + 1
    h_count = np.bincount(inv[: h.shape[0]], minlength=size)
    r_count = np.bincount(inv[h.shape[0]:], minlength=size)
    return int(np.minimum(h_count, r_count).sum()), int(h.shape[0])


def bleu4(hypothesis: Sequence[int] | np.ndarray, reference: Sequence[int] | np.ndarray) -> float:
    """Sentence BLEU-4 of one hypothesis against one reference (token ids)."""
    hyp, ref = np.asarray(hypothesis), np.asarray(reference)
    if hyp.size == 0:
        return 0.0
    log_p = 0.0
    for n in range(1, 5):
        matches, total = _clipped_matches(hyp, ref, n)
        if matches == 0 or total == 0:
            return 0.0
        log_p += math.log(matches / total) / 4
    bp = 1.0 if hyp.size > ref.size else math.exp(1 - ref.size / hyp.size)
    return bp * math.exp(log_p)


def bleu_table(records, dataset: str) -> "pd.DataFrame":
    """``dataset, request_id, prompt_len, output_len, bleu4``: one row per record."""
    import pandas as pd

    return pd.DataFrame(
        [(dataset, r.id, r.prompt_token_ids.size, r.output_len, bleu4(r.generated_token_ids, r.prompt_token_ids))
         for r in records],
        columns=["dataset", "request_id", "prompt_len", "output_len", "bleu4"],
    )


def bucket_of(values, edges) -> np.ndarray:
    """Index of the ``[edges[k], edges[k+1])`` bucket of each value; the last bucket includes its top."""
    edges = np.asarray(edges, dtype=float)
    return np.clip(np.searchsorted(edges, np.asarray(values, dtype=float), side="right") - 1, 0, len(edges) - 2)


def bucket_metrics(table, traceset: str, edges) -> dict[str, int]:
    """Requests per BLEU-4 bucket: ``traces.<trace set>.<dataset>.prompt.bleu4_requests_<lo>_<hi>``."""
    out = {}
    for ds, g in table.groupby("dataset", sort=False):
        counts = np.bincount(bucket_of(g["bleu4"], edges), minlength=len(edges) - 1)
        for k, n in enumerate(counts):
            out[f"traces.{traceset}.{ds}.prompt.bleu4_requests_{edges[k]:g}_{edges[k + 1]:g}"] = int(n)
    return out
