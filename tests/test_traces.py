"""The trace loader against the released files and against malformed input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specrepro.core.traces import TraceFormatError, load_tables, read_trace, record_to_json

from conftest import DATASETS, RELEASED_FACTS, released_trace, small_record, write_jsonl


@pytest.mark.parametrize("dataset", DATASETS)
def test_released_trace_matches_source_facts(dataset):
    records = read_trace(released_trace(dataset))
    facts = RELEASED_FACTS[dataset]
    assert len(records) == facts["records"]
    assert sum(r.output_len for r in records) == facts["output_tokens"]
    assert sum(r.acc_len["eagle"].size == r.output_len for r in records) == facts["eagle_equal_length"]
    assert all(r.acc_len["ngram"].size == r.output_len for r in records)
    assert max(int(r.acc_len["ngram"].max()) for r in records) == 21  # k = 20 plus the bonus token


def test_tidy_tables_carry_every_value(tmp_path):
    path = released_trace("gsm8k")
    requests, positions = load_tables(path, "gsm8k")
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert list(requests["request_id"]) == [r["id"] for r in raw]
    assert requests["output_len"].sum() == RELEASED_FACTS["gsm8k"]["output_tokens"]
    ng = positions[positions["proposer"] == "ngram"]
    assert len(ng) == RELEASED_FACTS["gsm8k"]["output_tokens"]
    # a spot check against the raw JSON: request 7, every position
    r7 = ng[ng["order"] == 7].sort_values("position")
    assert r7["acc_len"].tolist() == raw[7]["acc_ngram"]["acc_len"]
    ea = positions[positions["proposer"] == "eagle"]
    assert len(ea) == sum(len(r["acc_eagle"]["acc_len"]) for r in raw)
    aligned = ea.groupby("order")["aligned"].first()
    assert aligned.sum() == RELEASED_FACTS["gsm8k"]["eagle_equal_length"]


def test_round_trip(tmp_path):
    rec = small_record("a", [5, 6, 7], [2, 1, 1], [1, 1])
    path = write_jsonl(tmp_path / "t.jsonl", [rec])
    (back,) = read_trace(path)
    assert record_to_json(back) == rec


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda r: r.pop("generated_token_ids"), "missing field 'generated_token_ids'"),
        (lambda r: r["acc_ngram"].pop("acc_len"), "missing field 'acc_ngram.acc_len'"),
        (lambda r: r["acc_ngram"].__setitem__("acc_len", [1, 1]), "'acc_ngram.acc_len' has 2 values but 'generated_token_ids' has 3 tokens (length mismatch)"),
        (lambda r: r["acc_eagle"].__setitem__("acc_len", [1, 0, 2]), "'acc_eagle.acc_len' has non-positive value 0 at position 1"),
        (lambda r: r["acc_ngram"].__setitem__("acc_len", [1, -3, 2]), "'acc_ngram.acc_len' has non-positive value -3 at position 1"),
        (lambda r: r.__setitem__("prompt_token_ids", [1, "x"]), "field 'prompt_token_ids': expected integers, found 'x'"),
        (lambda r: r.pop("acc_ngram"), "missing field 'acc_ngram.acc_len'"),
    ],
)
def test_malformed_record_names_file_line_and_field(tmp_path, mutate, expected):
    good = small_record("a", [5, 6, 7], [2, 1, 1], [1, 1, 1])
    bad = small_record("b", [5, 6, 7], [2, 1, 1], [1, 1, 1])
    mutate(bad)
    path = write_jsonl(tmp_path / "t.jsonl", [good, bad])
    with pytest.raises(TraceFormatError) as exc:
        read_trace(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}:2: ")
    assert expected in msg
    assert "\n" not in msg


def test_invalid_json_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(small_record("a", [1], [1], [1])) + "\n" + '{"id": "b", "prompt_token_ids": [1,\n')
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:2: not valid JSON"):
        read_trace(path)


def test_duplicate_id_and_empty_file(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [small_record("a", [1], [1], [1])] * 2)
    with pytest.raises(TraceFormatError, match=r":2: field 'id' value 'a' repeats line 1"):
        read_trace(path)
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    with pytest.raises(TraceFormatError, match="no records"):
        read_trace(empty)
    with pytest.raises(TraceFormatError, match="trace file not found"):
        read_trace(tmp_path / "missing.jsonl")


def test_unaligned_proposer_may_differ_in_length(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [small_record("a", [1, 2, 3], [1, 1, 1], [3, 1, 1, 1, 2])])
    (rec,) = read_trace(path)
    assert rec.acc_len["eagle"].size == 5
    np.testing.assert_array_equal(rec.acc_len["ngram"], [1, 1, 1])
