"""Acceptance statistics on hand-computed cases and against a direct computation on released traces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specrepro.analysis import acceptance
from specrepro.core.traces import load_tables, positions_table, read_trace

from conftest import released_trace, small_record, write_jsonl


@pytest.fixture
def tiny(tmp_path):
    recs = [
        # request a: 4 tokens; n-gram wins at 0, eagle at 1, tie at 2 and 3
        small_record("a", [1, 2, 3, 4], [5, 1, 2, 1], [2, 3, 2, 1]),
        # request b: eagle trace shorter (diverged run): only positions 0-1 pair
        small_record("b", [1, 2, 3], [1, 4, 1], [3, 1]),
    ]
    path = write_jsonl(tmp_path / "t.jsonl", recs)
    return positions_table(read_trace(path), "toy")


def test_request_means(tiny):
    rm = acceptance.request_means(tiny).set_index(["proposer", "request_id"])["mean_acc_len"]
    assert rm[("ngram", "a")] == pytest.approx(9 / 4)
    assert rm[("ngram", "b")] == pytest.approx(2.0)
    assert rm[("eagle", "a")] == pytest.approx(2.0)
    assert rm[("eagle", "b")] == pytest.approx(2.0)


def test_pairing_and_win_shares(tiny):
    pairs = acceptance.paired(tiny, ["ngram", "eagle"])
    assert len(pairs) == 6  # 4 positions of a + 2 of b
    ws = acceptance.win_shares(pairs, ["ngram", "eagle"]).set_index("proposer")["wins"]
    # pairs: (5,2) n, (1,3) e, (2,2) t, (1,1) t, (1,3) e, (4,1) n
    assert ws["ngram"] == pytest.approx(2 / 6)
    assert ws["eagle"] == pytest.approx(2 / 6)


def test_stats_table(tiny):
    st = acceptance.acceptance_stats(tiny, ["ngram", "eagle"]).set_index("proposer")
    assert st.loc["ngram", "positions"] == 7
    assert st.loc["ngram", "mean"] == pytest.approx(15 / 7)
    assert st.loc["ngram", "median"] == 1
    assert st.loc["eagle", "positions"] == 6
    assert st.loc["eagle", "median"] == 2
    assert st.loc["eagle", "p90"] == pytest.approx(np.quantile([2, 3, 2, 1, 3, 1], 0.9))
    assert st.loc["ngram", "request_mean_median"] == pytest.approx((9 / 4 + 2) / 2)
    assert st.loc["ngram", "paired_positions"] == 6


def test_percentiles_against_direct_computation():
    path = released_trace("instructcoder")
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    _, positions = load_tables(path, "instructcoder")
    got = acceptance.request_mean_percentiles(positions).set_index("proposer")
    for proposer in ("ngram", "eagle"):
        means = [np.mean(r[f"acc_{proposer}"]["acc_len"]) for r in raw]
        expect = np.percentile(means, [5, 25, 50, 75, 95])
        np.testing.assert_allclose(got.loc[proposer, ["p5", "p25", "p50", "p75", "p95"]].to_numpy(float), expect)


def test_metrics_keys(tiny):
    stats = acceptance.acceptance_stats(tiny, ["ngram", "eagle"])
    m = acceptance.metrics(tiny, stats, "toy-set")
    assert m["traces.toy-set.toy.ngram.request_mean.p50"] == pytest.approx((9 / 4 + 2) / 2)
    assert m["traces.toy-set.toy.eagle.wins"] == pytest.approx(2 / 6)
    assert list(m) == sorted(m)


def test_intervals_resample_whole_requests(tiny):
    from specrepro.core.uncertainty import bootstrap_pooled_ratio_ci

    st = acceptance.acceptance_stats(tiny, ["ngram", "eagle"]).set_index("proposer")
    # n-gram: request a sums 9 over 4 positions, b 6 over 3: a resample is a, b or both
    iv = bootstrap_pooled_ratio_ci([9, 6], [4, 3])
    assert (st.loc["ngram", "mean_ci_low"], st.loc["ngram", "mean_ci_high"]) == pytest.approx((iv.low, iv.high))
    assert (st.loc["ngram", "mean_ci_low"], st.loc["ngram", "mean_ci_high"]) == pytest.approx((2.0, 9 / 4))
    for q in acceptance.STATS_WITH_CI:
        assert (st[f"{q}_ci_low"] <= st[q] + 1e-12).all() and (st[q] <= st[f"{q}_ci_high"] + 1e-12).all()
    m = acceptance.metrics(tiny, acceptance.acceptance_stats(tiny, ["ngram", "eagle"]), "toy-set")
    key = "traces.toy-set.toy.ngram.mean"
    assert m[f"{key}.n"] == 2 and m[f"{key}.ci_low"] == pytest.approx(2.0)
    assert "traces.toy-set.toy.ngram.request_mean.p50.ci_high" in m


def test_percentile_intervals_on_released_traces():
    path = released_trace("gsm8k")
    _, positions = load_tables(path, "gsm8k")
    got = acceptance.request_mean_percentiles(positions).set_index("proposer")
    for p in acceptance.BOX_PERCENTILES:
        assert (got[f"p{p}_ci_low"] < got[f"p{p}"]).all() and (got[f"p{p}"] < got[f"p{p}_ci_high"]).all()
    assert (got["n"] == 300).all()
