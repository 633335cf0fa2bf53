"""n-gram traces recomputed from tokens: hand cases, a plain reference rule, the released traces."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from specrepro.core.ngram import NgramParams, agreement, ngram_acc_lens, read_token_trace
from specrepro.core.traces import TraceRecord, read_trace

from conftest import REPO, SHARED_TRACES as TRACES

DATASETS = ("cnn", "gsm8k", "instructcoder", "sharegpt")


def record(prompt, output, rid="r"):
    return TraceRecord(rid, np.array(prompt, dtype=np.int64), np.array(output, dtype=np.int64), {})


def plain_rule(prompt, output, min_n=3, max_n=7, k=20):
    """vLLM's n-gram proposer written as plainly as possible (the test oracle)."""
    out = []
    for i in range(len(output)):
        ctx = list(prompt) + list(output[:i])
        proposal = []
        for n in range(min(max_n, len(ctx)), min_n - 1, -1):
            suffix = ctx[-n:]
            starts = [s for s in range(len(ctx) - n) if ctx[s:s + n] == suffix]  # earlier occurrences
            if starts:
                start = starts[0] + n
                proposal = ctx[start:start + k]
                break
        m = 0
        while m < len(proposal) and i + m < len(output) and proposal[m] == output[i + m]:
            m += 1
        out.append(1 + m)
    return out


def test_hand_case_longest_earliest_and_capped():
    # context ... 1 2 3 | proposal after the earliest "1 2 3" is 4 5 6 1 2 3 (capped at the context end)
    prompt = [1, 2, 3, 4, 5, 6, 1, 2, 3]
    output = [4, 5, 6, 9, 9]
    acc = ngram_acc_lens([record(prompt, output)])[0]
    # i=0: suffix 1 2 3 (n=3; 4-gram "6 1 2 3" never occurred) -> proposal 4 5 6 1 2 3 -> accepts 4 5 6, then 1 != 9
    assert acc[0] == 4
    # i=1: context ends "2 3 4": occurred at 1..3 -> proposal 5 6 1 2 3 4 -> accepts 5 6
    assert acc[1] == 3
    # i=2: "2 3 4 5" (n=4) -> proposal 6 1 2 ... -> accepts 6
    assert acc[2] == 2
    # i=3: "4 5 6" -> proposal "1 2 3 4 5 6" -> 1 != 9
    assert acc[3] == 1
    assert list(acc) == plain_rule(prompt, output)


def test_longer_ngram_beats_earlier_shorter_one():
    # "7 8 9" occurs twice; the 4-gram "5 7 8 9" only at the second place, which must win
    prompt = [7, 8, 9, 1, 5, 7, 8, 9, 2, 3, 5, 7, 8, 9]
    output = [2, 3]
    assert ngram_acc_lens([record(prompt, output)])[0][0] == 3
    assert plain_rule(prompt, output)[0] == 3


def test_no_match_below_min_n_and_k_cap():
    rec = record([1, 2, 1, 2], [1, 2, 1, 2, 1, 2, 1, 2])
    assert list(ngram_acc_lens([rec], NgramParams(min_n=3, max_n=7, k=2))[0]) == plain_rule(
        [1, 2, 1, 2], [1, 2, 1, 2, 1, 2, 1, 2], 3, 7, 2
    )
    # a 2-gram match is not enough with min_n = 3
    short = record([5, 6, 0, 5, 6], [0])
    assert ngram_acc_lens([short])[0][0] == 1
    assert ngram_acc_lens([short], NgramParams(min_n=2, max_n=7, k=20))[0][0] == 2


@pytest.mark.parametrize("seed", range(6))
def test_matches_plain_rule_on_random_tokens(seed):
    rng = np.random.default_rng(seed)
    recs, expected = [], []
    for j in range(8):
        vocab = int(rng.integers(2, 6))  # small vocabularies give many matches and ties
        prompt = rng.integers(0, vocab, int(rng.integers(0, 30))).tolist()
        output = rng.integers(0, vocab, int(rng.integers(0, 40))).tolist()
        recs.append(record(prompt, output, str(j)))
        expected.append(plain_rule(prompt, output, 3, 5, 6))
    got = ngram_acc_lens(recs, NgramParams(min_n=3, max_n=5, k=6))
    assert [g.tolist() for g in got] == expected


def test_params_are_checked():
    from specrepro.core.io import SpecReproError

    with pytest.raises(SpecReproError, match="smaller than --min-n"):
        NgramParams(min_n=5, max_n=3)


needs_traces = pytest.mark.skipif(not TRACES.exists(), reason=f"released traces not found at {TRACES}")


@needs_traces
@pytest.mark.parametrize("dataset", DATASETS)
def test_agrees_with_released_traces(dataset):
    records = read_trace(TRACES / f"combined_{dataset}.jsonl")
    ag = agreement([r.acc_len["ngram"] for r in records], ngram_acc_lens(records))
    assert ag.on_fitting >= 0.9999, ag
    assert ag.overall >= 0.998, ag
    # released values that run past the recorded output lie in the last k + 1 = 21 positions
    for r in records:
        ref = r.acc_len["ngram"]
        i = np.arange(ref.size)
        assert np.all(i[i + ref - 1 > ref.size] >= ref.size - 21)


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "specrepro", *args], capture_output=True, text=True,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )


def test_cli_round_trip_keeps_other_fields(tmp_path):
    src = tmp_path / "in.jsonl"
    objs = [
        {"id": "a", "prompt_token_ids": [1, 2, 3, 4, 1, 2, 3], "generated_token_ids": [4, 9],
         "acc_ngram": {"acc_len": [1, 1]}, "acc_eagle": {"acc_len": [2, 1, 1]}, "extra": "kept"},
        {"id": "b", "prompt_token_ids": [5], "generated_token_ids": [6, 7]},  # tokens only
    ]
    src.write_text("".join(json.dumps(o) + "\n" for o in objs))
    out, stats = tmp_path / "out.jsonl", tmp_path / "stats.json"
    proc = run_cli("ngram-trace", str(src), "-o", str(out), "--stats", str(stats))
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert got[0]["acc_ngram"]["acc_len"] == [2, 1]
    assert got[0]["acc_eagle"] == objs[0]["acc_eagle"] and got[0]["extra"] == "kept"
    assert got[1]["acc_ngram"]["acc_len"] == [1, 1]
    assert "agreement" not in json.loads(stats.read_text())  # record b had no trace to compare with


def test_cli_malformed_trace_is_one_line(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps({"id": "a", "prompt_token_ids": [1], "generated_token_ids": [2]}) + "\n{not json\n")
    proc = run_cli("ngram-trace", str(src), "-o", str(tmp_path / "o.jsonl"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and f"{src}:2: not valid JSON" in proc.stderr
    src.write_text(json.dumps({"id": "a", "prompt_token_ids": [1], "generated_token_ids": ["x"]}) + "\n")
    proc = run_cli("ngram-trace", str(src), "-o", str(tmp_path / "o.jsonl"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "generated_token_ids" in proc.stderr


def test_read_token_trace_rejects_duplicate_ids(tmp_path):
    from specrepro.core.traces import TraceFormatError

    src = tmp_path / "dup.jsonl"
    line = json.dumps({"id": "a", "prompt_token_ids": [1], "generated_token_ids": [2]})
    src.write_text(line + "\n" + line + "\n")
    with pytest.raises(TraceFormatError, match="repeats line 1"):
        read_token_trace(src)
