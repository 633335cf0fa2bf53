"""n-gram (prompt-lookup) acceptance traces recomputed from tokens alone.

The rule is vLLM's n-gram proposer: with context ``c = prompt + output[:i]``, take
the longest ``n`` in ``[min_n, max_n]`` whose suffix n-gram ``c[-n:]`` occurred
earlier in ``c``; among its occurrences take the earliest; propose the up-to-``k``
tokens that followed it (never past the end of ``c``). ``acc_len[i]`` is then 1 +
the length of the common prefix of that proposal and ``output[i:]``; 1 when no
n-gram matches.

Vectorised over all requests of a file: every n-gram of every request gets a
dense id (built from the (n-1)-gram id and the next token, so ids are exact, not
hashes); the first occurrence of each id tells whether, and where, the suffix
n-gram at position ``i`` occurred before.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .io import SpecReproError, atomic_path
from .traces import TraceRecord, parse_record, read_records


@dataclass(frozen=True)
class NgramParams:
    """vLLM's ``prompt_lookup_min``, ``prompt_lookup_max`` and ``num_speculative_tokens``."""

    min_n: int = 3
    max_n: int = 7
    k: int = 20

    def __post_init__(self) -> None:
        if self.min_n < 1:
            raise SpecReproError(f"--min-n must be at least 1, got {self.min_n}")
        if self.max_n < self.min_n:
            raise SpecReproError(f"--max-n ({self.max_n}) is smaller than --min-n ({self.min_n})")
        if self.k < 1:
            raise SpecReproError(f"--k must be at least 1, got {self.k}")


def _concat(records: Sequence[TraceRecord]):
    """Prompt + output of every request back to back, with per-request offsets."""
    prompt_len = np.array([r.prompt_token_ids.size for r in records], dtype=np.int64)
    output_len = np.array([r.output_len for r in records], dtype=np.int64)
    seq_len = prompt_len + output_len
    start = np.concatenate([[0], np.cumsum(seq_len)[:-1]]).astype(np.int64)
    parts = []
    for r in records:
        parts += [r.prompt_token_ids, r.generated_token_ids]
    tokens = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    return tokens, start, prompt_len, output_len


def ngram_acc_lens(records: Sequence[TraceRecord], params: NgramParams = NgramParams()) -> list[np.ndarray]:
    """``acc_len`` per output position of every record, under the n-gram rule above."""
    if not records:
        return []
    tokens, start, prompt_len, output_len = _concat(records)
    total = tokens.size
    req_of = np.repeat(np.arange(len(records)), prompt_len + output_len)
    pos_in_req = np.arange(total) - start[req_of]
    seq_len = (prompt_len + output_len)[req_of]

    # One row per output position: b = global index of output[i], ctx = len(prompt) + i.
    n_out = int(output_len.sum())
    out_req = np.repeat(np.arange(len(records)), output_len)
    out_i = np.arange(n_out) - np.repeat(np.concatenate([[0], np.cumsum(output_len)[:-1]]), output_len)
    ctx = prompt_len[out_req] + out_i
    b = start[out_req] + ctx

    # Dense n-gram ids. An n-gram starting at j is valid if it stays inside its request;
    # id 1-grams by (request, token) so equal ids never span two requests.
    _, ids = np.unique(req_of * (int(tokens.max()) + 1) + tokens, return_inverse=True)
    ids = ids.astype(np.int64)
    valid = np.ones(total, dtype=bool)
    best_n = np.zeros(n_out, dtype=np.int64)
    best_first = np.zeros(n_out, dtype=np.int64)
    for n in range(2, params.max_n + 1):
        valid = valid & (pos_in_req + n <= seq_len)
        nxt = np.zeros(total, dtype=np.int64)
        nxt[: total - n + 1] = tokens[n - 1:]
        key = np.where(valid, ids * (int(tokens.max()) + 1) + nxt, -1 - np.arange(total))
        # return_index = first occurrence in array order = earliest start within the request
        _, first_idx, ids = np.unique(key, return_index=True, return_inverse=True)
        ids = ids.astype(np.int64)
        if n < params.min_n:
            continue
        first = first_idx[ids]  # earliest start of the n-gram that starts at each index
        s = b - n  # start of the suffix n-gram of the context
        ok = ctx >= n
        s_safe = np.where(ok, s, 0)
        matched = ok & (first[s_safe] < s_safe)
        # larger n overrides: the longest matching suffix wins
        best_n = np.where(matched, n, best_n)
        best_first = np.where(matched, first[s_safe], best_first)

    # Proposal = tokens after the earliest occurrence, capped by k and by the context end;
    # compared with the recorded output, which ends at the request's end.
    a = best_first + best_n
    room = np.where(best_n > 0, np.minimum(params.k, b - a), 0)
    room = np.minimum(room, (start[out_req] + prompt_len[out_req] + output_len[out_req]) - b)
    offs = np.arange(params.k)
    ia = np.minimum(a[:, None] + offs, total - 1)
    ib = np.minimum(b[:, None] + offs, total - 1)
    eq = (tokens[ia] == tokens[ib]) & (offs < room[:, None])
    prefix = np.where(eq.all(axis=1), params.k, np.argmin(eq, axis=1))
    acc = (1 + prefix).astype(np.int64)
    bounds = np.cumsum(output_len)[:-1]
    return np.split(acc, bounds)


def with_ngram_traces(records: Sequence[TraceRecord], params: NgramParams = NgramParams()) -> list[TraceRecord]:
    """The records with ``acc_len['ngram']`` replaced by the recomputed trace."""
    out = []
    for rec, acc in zip(records, ngram_acc_lens(records, params)):
        acc_len = dict(rec.acc_len)
        acc_len["ngram"] = acc
        out.append(TraceRecord(rec.id, rec.prompt_token_ids, rec.generated_token_ids, acc_len, rec.line))
    return out


@dataclass(frozen=True)
class Agreement:
    """Positions where a recomputed trace equals a reference trace."""

    positions: int
    equal: int
    fitting: int  #: reference value fits inside the recorded output (i + acc_len - 1 <= len)
    fitting_equal: int

    @property
    def overall(self) -> float:
        return self.equal / self.positions if self.positions else float("nan")

    @property
    def on_fitting(self) -> float:
        return self.fitting_equal / self.fitting if self.fitting else float("nan")


def agreement(reference: Sequence[np.ndarray], computed: Sequence[np.ndarray]) -> Agreement:
    """Compare per-position traces of equal length (one array per request)."""
    pos = eq = fit = fit_eq = 0
    for ref, new in zip(reference, computed):
        if ref.size != new.size:
            raise SpecReproError(f"trace lengths differ ({ref.size} vs {new.size}); cannot compare")
        i = np.arange(ref.size)
        same = ref == new
        fits = i + ref - 1 <= ref.size
        pos += ref.size
        eq += int(same.sum())
        fit += int(fits.sum())
        fit_eq += int((same & fits).sum())
    return Agreement(pos, eq, fit, fit_eq)


def read_token_trace(path: str | os.PathLike) -> tuple[list[dict], list[TraceRecord]]:
    """The raw JSON objects and validated records of a trace file whose records may lack any
    ``acc_*`` field (only tokens are needed here); errors name file, line and field."""
    def parse(obj, where: str) -> TraceRecord:
        if not (isinstance(obj, dict) and not any(k.startswith("acc_") for k in obj)):
            return parse_record(obj, where, aligned=())
        # a token-only record: validate its tokens; its n-gram trace is computed below
        out = obj.get("generated_token_ids")
        rec = parse_record({**obj, "acc_ngram": {"acc_len": [1] * len(out) if isinstance(out, list) else []}}, where,
                           aligned=())
        return TraceRecord(rec.id, rec.prompt_token_ids, rec.generated_token_ids, {})

    pairs = read_records(path, parse)
    return [obj for obj, _ in pairs], [rec for _, rec in pairs]


def write_ngram_trace(objs: Sequence[dict], acc: Sequence[np.ndarray], output: str | os.PathLike) -> None:
    """The input objects, every other field kept, with ``acc_ngram.acc_len`` replaced (JSONL)."""
    with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for obj, values in zip(objs, acc):
            out = dict(obj)
            entry = dict(obj.get("acc_ngram") or {})
            entry["acc_len"] = values.tolist()
            out["acc_ngram"] = entry
            fh.write(json.dumps(out) + "\n")


def agreement_stats(records: Sequence[TraceRecord], acc: Sequence[np.ndarray], dataset: str) -> dict:
    """Agreement with the input's own ``acc_ngram`` (if every record has one), as a flat dict."""
    out = {"dataset": dataset, "requests": len(records), "positions": int(sum(a.size for a in acc))}
    if all("ngram" in r.acc_len and r.acc_len["ngram"].size == a.size for r, a in zip(records, acc)):
        ag = agreement([r.acc_len["ngram"] for r in records], acc)
        out.update(
            compared_positions=ag.positions, equal=ag.equal, fitting=ag.fitting, fitting_equal=ag.fitting_equal,
            agreement=ag.overall, agreement_fitting=ag.on_fitting,
        )
    return out
