"""Per-position acceptance traces: the released format, validated, as tidy tables.

A trace file has one JSON object per line (one request)::

    {"id": "134", "prompt_token_ids": [...], "generated_token_ids": [...],
     "acc_ngram": {"acc_len": [...]}, "acc_eagle": {"acc_len": [...]}}

``acc_<proposer>.acc_len[i]`` is the number of tokens one verification step
produces when it starts with ``i`` output tokens already generated (1 = no draft
token accepted). Proposers in ``aligned`` must have exactly one value per output
token; others (the released EAGLE traces come from a separate engine run) may
have a different length, which is kept as data.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from .errors import SpecReproError

#: Proposers whose trace has one value per recorded output token in the released files.
DEFAULT_ALIGNED = ("ngram",)

REQUIRED_FIELDS = ("id", "prompt_token_ids", "generated_token_ids")


class TraceFormatError(SpecReproError):
    """A trace file does not follow the format; the message names file, line and field."""


@dataclass(frozen=True)
class TraceRecord:
    """One request of a trace file."""

    id: str
    prompt_token_ids: np.ndarray
    generated_token_ids: np.ndarray
    acc_len: dict[str, np.ndarray] = field(default_factory=dict)
    line: int = 0

    @property
    def output_len(self) -> int:
        return int(self.generated_token_ids.size)


def _int_array(value: object, where: str) -> np.ndarray:
    if not isinstance(value, list):
        raise TraceFormatError(f"{where}: expected a list of integers, got {type(value).__name__}")
    if value and not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        bad = next(v for v in value if not (isinstance(v, int) and not isinstance(v, bool)))
        raise TraceFormatError(f"{where}: expected integers, found {bad!r}")
    return np.asarray(value, dtype=np.int64)


def parse_record(obj: object, where: str, aligned: Sequence[str] = DEFAULT_ALIGNED) -> TraceRecord:
    """Validate one decoded JSON object; ``where`` is ``file:line`` for messages."""
    if not isinstance(obj, dict):
        raise TraceFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for name in REQUIRED_FIELDS:
        if name not in obj:
            raise TraceFormatError(f"{where}: missing field '{name}'")
    rid = obj["id"]
    if not isinstance(rid, (str, int)) or isinstance(rid, bool):
        raise TraceFormatError(f"{where}: field 'id' must be a string, got {type(rid).__name__}")
    prompt = _int_array(obj["prompt_token_ids"], f"{where}: field 'prompt_token_ids'")
    output = _int_array(obj["generated_token_ids"], f"{where}: field 'generated_token_ids'")
    acc: dict[str, np.ndarray] = {}
    for key in sorted(obj):
        if not key.startswith("acc_"):
            continue
        proposer = key[4:]
        entry = obj[key]
        if not isinstance(entry, dict) or "acc_len" not in entry:
            raise TraceFormatError(f"{where}: missing field '{key}.acc_len'")
        values = _int_array(entry["acc_len"], f"{where}: field '{key}.acc_len'")
        if values.size and values.min() < 1:
            pos = int(np.argmax(values < 1))
            raise TraceFormatError(
                f"{where}: field '{key}.acc_len' has non-positive value {int(values[pos])} at position {pos}"
                " (every step produces at least 1 token)"
            )
        if proposer in aligned and values.size != output.size:
            raise TraceFormatError(
                f"{where}: field '{key}.acc_len' has {values.size} values but "
                f"'generated_token_ids' has {output.size} tokens (length mismatch)"
            )
        acc[proposer] = values
    if not acc:
        raise TraceFormatError(f"{where}: no 'acc_<proposer>.acc_len' field (e.g. 'acc_ngram')")
    missing = [p for p in aligned if p not in acc]
    if missing:
        raise TraceFormatError(f"{where}: missing field 'acc_{missing[0]}.acc_len'")
    return TraceRecord(str(rid), prompt, output, acc)


def read_records(path: str | os.PathLike, parse) -> list[tuple[dict, TraceRecord]]:
    """(JSON object, record) of every non-blank line of a trace file, ``parse(obj, where)`` making the record (its
    ``line`` set here); a missing or empty file, a line that is not JSON and a repeated id raise
    :class:`TraceFormatError` naming file and line."""
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(f"{path}: trace file not found")
    out: list[tuple[dict, TraceRecord]] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceFormatError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
            rec = parse(obj, where)
            if rec.id in seen:
                raise TraceFormatError(f"{where}: field 'id' value {rec.id!r} repeats line {seen[rec.id]}")
            seen[rec.id] = lineno
            out.append((obj, replace(rec, line=lineno)))
    if not out:
        raise TraceFormatError(f"{path}: no records (empty trace file)")
    return out


def read_trace(path: str | os.PathLike, aligned: Sequence[str] = DEFAULT_ALIGNED) -> list[TraceRecord]:
    """Read and validate a whole trace file; raise :class:`TraceFormatError` on the first bad line."""
    return [rec for _, rec in read_records(path, lambda obj, where: parse_record(obj, where, aligned))]


def record_to_json(rec: TraceRecord) -> dict:
    """The released-format JSON object for a record (inverse of :func:`parse_record`)."""
    out: dict = {
        "id": rec.id,
        "prompt_token_ids": rec.prompt_token_ids.tolist(),
        "generated_token_ids": rec.generated_token_ids.tolist(),
    }
    for proposer in sorted(rec.acc_len):
        out[f"acc_{proposer}"] = {"acc_len": rec.acc_len[proposer].tolist()}
    return out


def requests_table(records: Iterable[TraceRecord], dataset: str) -> pd.DataFrame:
    """One row per request: ``dataset, order, request_id, prompt_len, output_len``."""
    rows = [
        (dataset, i, r.id, int(r.prompt_token_ids.size), r.output_len) for i, r in enumerate(records)
    ]
    return pd.DataFrame(rows, columns=["dataset", "order", "request_id", "prompt_len", "output_len"])


def positions_table(records: Iterable[TraceRecord], dataset: str) -> pd.DataFrame:
    """One row per (request, proposer, position).

    Columns: ``dataset, order, request_id, proposer, position, acc_len, aligned``;
    ``aligned`` is True where the proposer's trace has the output's length.
    """
    order, rid, prop, pos, acc, aligned = [], [], [], [], [], []
    for i, r in enumerate(records):
        for proposer in sorted(r.acc_len):
            values = r.acc_len[proposer]
            n = values.size
            order.append(np.full(n, i, dtype=np.int64))
            rid.append(np.full(n, r.id, dtype=object))
            prop.append(np.full(n, proposer, dtype=object))
            pos.append(np.arange(n, dtype=np.int64))
            acc.append(values.astype(np.int64))
            aligned.append(np.full(n, n == r.output_len))
    df = pd.DataFrame(
        {
            "dataset": pd.array(np.full(sum(a.size for a in acc), dataset, dtype=object), dtype="string"),
            "order": np.concatenate(order),
            "request_id": pd.array(np.concatenate(rid), dtype="string"),
            "proposer": pd.array(np.concatenate(prop), dtype="string"),
            "position": np.concatenate(pos),
            "acc_len": np.concatenate(acc),
            "aligned": np.concatenate(aligned),
        }
    )
    return df


def load_tables(path: str | os.PathLike, dataset: str, aligned: Sequence[str] = DEFAULT_ALIGNED):
    """``(requests, positions)`` tidy tables of one trace file."""
    records = read_trace(path, aligned)
    return requests_table(records, dataset), positions_table(records, dataset)


def first_trace_problem(path) -> str | None:
    """The first malformed line of a trace file, for a checksum-mismatch message (line-relative)."""
    try:
        read_trace(path, aligned=())
    except TraceFormatError as exc:
        text = str(exc)
        return "first problem: line" + text.split(str(path), 1)[1] if str(path) in text else text
    return None


def simulate_steps(acc_len: Sequence[int], cap: int, start: int = 1) -> list[int]:
    """Walk an output with a trace: from ``start`` generated tokens, each step produces
    ``min(acc_len[i], cap)`` tokens; returns the tokens per step (the last may overrun the end).
    ``start=1``: the engine's prefill produces the first output token without speculation."""
    steps, i = [], start
    while i < len(acc_len):
        n = min(int(acc_len[i]), cap)
        steps.append(n)
        i += n
    return steps
