"""The speedup simulator: hand-computed cases, fast == per-copy reference, the paper's draw."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest

from specrepro.core.costmodel import load_cost_model
from specrepro.core.io import SpecReproError
from specrepro.sim.simulator import (
    NGRAM_MATCH_PROB, PAPER_POLICIES, SimSpec, Workload, build_specs, draw_requests, metric_key,
    simulate, simulate_reference, walk, _numpy_stream,
)
from specrepro.core.traces import TraceRecord, read_trace

from conftest import REPO, ROUND_COST, SHARED_TRACES as TRACES, needs_traces

DATASETS = ("instructcoder", "sharegpt", "gsm8k", "cnn")

def one_request(ngram, eagle, prompt_len=2):
    out = len(ngram)
    rec = TraceRecord("r0", np.arange(prompt_len), np.arange(out),
                      {"ngram": np.array(ngram), "eagle": np.array(eagle)})
    return Workload.from_records([rec], "tiny")


def speedups(workload, spec, batch_sizes, cost):
    return simulate(workload, spec, batch_sizes, cost).summary["speedup"].to_numpy()


# --- hand-computed cases (cost model with round numbers; prompt 2 tokens, output 4) ---------------
# baseline, B=1: prefill T(0,2)=0.12, +o; three one-token steps at kv=3,4,5: 0.113+0.114+0.115, +o each
BASE_B1 = 0.12 + 1 + (0.113 + 1) + (0.114 + 1) + (0.115 + 1)  # 4.462
# baseline, B=2: prefill T(0,4)=0.14, +o; steps of 2 tokens at kv=6,8,10
BASE_B2 = 0.14 + 1 + (0.126 + 1) + (0.128 + 1) + (0.130 + 1)  # 4.524


def test_cost_model_formulas(round_cost):
    assert round_cost.target(3, 2) == pytest.approx(0.123)
    assert round_cost.eagle_draft(5, 2) == pytest.approx(0.0125)
    assert round_cost.ngram_draft(0.124) == pytest.approx(0.062)
    assert round_cost.overhead == 1.0


def test_builtin_cost_model_is_the_authors_fit():
    c = load_cost_model("llama3.1-8b-h100")
    assert (c.c_kv, c.c_compute, c.c_fixed) == (3.92645679e-08, 2.10103129e-05, 5.88590713e-03)
    assert (c.d_kv, c.d_spec, c.d_fixed) == (2.37768493e-09, 8.41429603e-07, 2.13526175e-03)
    assert (c.ngram_fraction, c.overhead) == (0.005875, 1.20683946e-03)


def test_eagle_oracle_one_step(round_cost):
    w = one_request([1, 2, 1, 1], [3, 1, 2, 1])
    # one step from kv=3 verifying 3 tokens: T(3,3)=0.133, EAGLE draft 0.0003+0.003+0.01, +o
    sd = 0.12 + 1 + (0.133 + 0.0133 + 1)
    got = speedups(w, SimSpec("eagle", "oracle", num_requests=1), [1], round_cost)
    assert got[0] == pytest.approx(BASE_B1 / sd, rel=1e-12)


def test_eagle_fixed1_batch_of_two(round_cost):
    w = one_request([1, 2, 1, 1], [3, 1, 2, 1])
    # B=1: steps at kv=3 (T=0.123, draft 0.0123) and kv=5 (T=0.125, draft 0.0125)
    sd1 = 0.12 + 1 + (0.123 + 0.0123 + 1) + (0.125 + 0.0125 + 1)
    # B=2, step 1 at kv=6 over 4 tokens (T=0.146): copy 0 drafts at kv 6, copy 1 at kv 8 (after copy 0's 2
    # tokens); step 2 at kv=10 (T=0.150): copy 0 drafts at kv 10, finishes and frees 5+2, copy 1 drafts at kv 5
    c0 = 0.14 + 1 + (0.146 + 0.0126 + 1) + (0.150 + 0.0130 + 1)
    c1 = 0.14 + 1 + (0.146 + 0.0128 + 1) + (0.150 + 0.0125 + 1)
    got = speedups(w, SimSpec("eagle", "fixed-1", num_requests=1), [1, 2], round_cost)
    assert got[0] == pytest.approx(BASE_B1 / sd1, rel=1e-12)
    assert got[1] == pytest.approx(BASE_B2 / ((c0 + c1) / 2), rel=1e-12)


def test_ngram_fixed1_match_probability(round_cost):
    w = one_request([1, 2, 1, 1], [3, 1, 2, 1])
    # p=0: position 0 (acc 1) finds no match: 1 token, no drafting; position 1 (acc 2) verifies 2 at kv=4
    never = 0.12 + 1 + (0.113 + 1) + (0.124 + 0.062 + 1)
    # p=1: position 0 drafts 1 token anyway (T(3,2)=0.123, draft 0.0615) and still produces 1
    always = 0.12 + 1 + (0.123 + 0.0615 + 1) + (0.124 + 0.062 + 1)
    for p, sd in ((0.0, never), (1.0, always)):
        got = speedups(w, SimSpec("ngram", "fixed-1", ngram_match_prob=p, num_requests=1), [1], round_cost)
        assert got[0] == pytest.approx(BASE_B1 / sd, rel=1e-12)


def test_combined_takes_the_longer_trace_at_ngram_cost(round_cost):
    w = one_request([1, 3, 1, 1], [1, 1, 2, 1])
    # max per position: [1, 3, 2, 1]; oracle: pos 0 verifies 1 (T(3,1)=0.113), pos 1 verifies 3 (T(4,3)=0.134);
    # n-gram cost is charged at every step, also where only 1 token is verified
    sd = 0.12 + 1 + (0.113 + 0.0565 + 1) + (0.134 + 0.067 + 1)
    got = speedups(w, SimSpec("combined", "oracle", num_requests=1), [1], round_cost)
    assert got[0] == pytest.approx(BASE_B1 / sd, rel=1e-12)


def test_walk_visits_positions_by_capped_jumps():
    req, pos = walk([np.array([3, 1, 2, 1, 5, 1, 1]), np.array([1]), np.array([2, 2, 2, 2])], cap=2)
    # request 0 (L=7): 0 -> 2 -> 4 -> 6 = L-1 (done); request 1 has no decode step; request 2: 0 -> 2 -> 4 > 3
    assert req.tolist() == [0, 0, 0, 2, 2]
    assert pos.tolist() == [0, 2, 4, 0, 2]


# --- the paper's draw and random stream ---------------------------------------------------------


def test_numpy_stream_continues_python_random():
    rng = random.Random(42)
    rng.sample(range(500), 300)
    state = rng.getstate()
    expected = [rng.random() for _ in range(1000)]
    clone = random.Random()
    clone.setstate(state)
    assert _numpy_stream(clone).random_sample(1000).tolist() == expected


@needs_traces
def test_draw_is_random_sample_of_the_records():
    records = read_trace(TRACES / "combined_instructcoder.jsonl")
    w = Workload.from_records(records, "instructcoder")
    idx, _ = draw_requests(w, SimSpec("ngram", "oracle"))
    expected = random.Random(42).sample([r for r in records if r.acc_len["ngram"].size], 300)
    assert [w.ids[i] for i in idx] == [r.id for r in expected]


# --- fast == reference ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workloads():
    if not TRACES.exists():
        pytest.skip(f"released traces not found at {TRACES}")
    return {d: Workload.from_records(read_trace(TRACES / f"combined_{d}.jsonl"), d) for d in DATASETS}


def all_specs(dataset, **modes):
    specs = [SimSpec(p, pol, ngram_match_prob=NGRAM_MATCH_PROB[dataset], **modes)
             for p in ("ngram", "eagle") for pol in PAPER_POLICIES]
    return specs + [SimSpec("combined", "oracle", **modes),
                    SimSpec("combined", "adaptive", ngram_match_prob=NGRAM_MATCH_PROB[dataset], **modes)]


@pytest.mark.parametrize("dataset", DATASETS)
def test_fast_equals_reference_paper_mode(workloads, dataset):
    cost = load_cost_model("llama3.1-8b-h100")
    for spec in all_specs(dataset, num_requests=12):
        fast = simulate(workloads[dataset], spec, [1, 3, 16], cost).summary
        ref = simulate_reference(workloads[dataset], spec, [1, 3, 16], cost).summary
        np.testing.assert_allclose(fast["speedup"], ref["speedup"], rtol=1e-12, err_msg=str(spec))
        np.testing.assert_allclose(fast["sd_throughput"], ref["sd_throughput"], rtol=1e-12, err_msg=str(spec))
        # total tokens over total time (continuous batching's averaging), from each request's own time
        np.testing.assert_allclose(fast["pooled_speedup"], ref["pooled_speedup"], rtol=1e-12, err_msg=str(spec))


def test_fast_equals_reference_full_draw_and_large_batch(workloads):
    cost = load_cost_model("llama3.1-8b-h100")
    w = workloads["gsm8k"]
    for spec in (SimSpec("ngram", "fixed-3", ngram_match_prob=0.2), SimSpec("combined", "oracle")):
        fast = simulate(w, spec, [1], cost).summary["speedup"]
        ref = simulate_reference(w, spec, [1], cost).summary["speedup"]
        np.testing.assert_allclose(fast, ref, rtol=1e-12)
    spec = SimSpec("ngram", "fixed-5", ngram_match_prob=0.2, num_requests=3)
    np.testing.assert_allclose(simulate(w, spec, [128], cost).summary["speedup"],
                               simulate_reference(w, spec, [128], cost).summary["speedup"], rtol=1e-12)


@pytest.mark.parametrize("modes", [
    {"combine_cost": "winner"}, {"combine_cost": "both"}, {"pairing": "equal-length"}, {"batching": "continuous"},
])
def test_fast_equals_reference_beyond_paper(workloads, modes):
    cost = load_cost_model("llama3.1-8b-h100")
    w = workloads["cnn"]
    specs = [SimSpec("combined", "oracle", num_requests=10, **modes)]
    if "combine_cost" not in modes:
        specs += [SimSpec("ngram", "fixed-3", ngram_match_prob=0.4, num_requests=10, **modes),
                  SimSpec("eagle", "oracle", num_requests=10, **modes),
                  SimSpec("combined", "adaptive", num_requests=10, **modes),
                  SimSpec("combined", "adaptive", ngram_match_prob=0.4, num_requests=10, **modes)]
    for spec in specs:
        fast = simulate(w, spec, [1, 4, 32], cost).summary["speedup"]
        ref = simulate_reference(w, spec, [1, 4, 32], cost).summary["speedup"]
        np.testing.assert_allclose(fast, ref, rtol=1e-12, err_msg=str(spec))


# --- options and errors --------------------------------------------------------------------------


def test_equal_length_pairing_keeps_only_equal_traces(workloads):
    w = workloads["cnn"]
    idx, _ = draw_requests(w, SimSpec("combined", "oracle", pairing="equal-length"))
    assert idx.size == int(w.equal_length().sum()) < 300
    assert all(w.eagle[i].size == w.output_len[i] for i in idx)


def test_build_specs_skips_pairs_and_needs_match_probability():
    specs = build_specs("cnn", ["ngram", "combined"], ["fixed-3", "oracle"])
    assert [(s.proposer, s.policy) for s in specs] == [("ngram", "fixed-3"), ("ngram", "oracle"), ("combined", "oracle")]
    assert specs[0].ngram_match_prob == 0.4
    with pytest.raises(SpecReproError, match="give --ngram-match-prob"):
        build_specs("mydata", ["ngram"], ["fixed-3"])
    assert build_specs("mydata", ["ngram"], ["fixed-3"], 0.3)[0].ngram_match_prob == 0.3
    assert build_specs("mydata", ["eagle"], ["fixed-3"])[0].policy == "fixed-3"  # no n-gram draw needed
    with pytest.raises(SpecReproError, match="combined"):
        build_specs("cnn", ["combined"], ["fixed-3"])


def test_metric_keys():
    row = {"dataset": "cnn", "proposer": "combined", "policy": "oracle", "batch_size": 8, "combine_cost": "ngram",
           "pairing": "index", "batching": "replicate"}
    assert metric_key("h100-llama3.1-8b", row) == "sim.h100-llama3.1-8b.cnn.combined.oracle.b8"
    row.update(combine_cost="winner", batching="continuous")
    assert metric_key("ts", row) == "sim.ts.cnn.combined.oracle-cost-winner-continuous.b8"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "specrepro", *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})


def tiny_trace(tmp_path):
    path = tmp_path / "t.jsonl"
    rec = {"id": "0", "prompt_token_ids": [1, 2], "generated_token_ids": [3, 4, 5, 6],
           "acc_ngram": {"acc_len": [1, 2, 1, 1]}, "acc_eagle": {"acc_len": [3, 1, 2, 1]}}
    path.write_text(json.dumps(rec) + "\n")
    return path


def test_cli_simulate_writes_the_columns(tmp_path):
    out = tmp_path / "o.csv"
    proc = run_cli("simulate", "--trace", str(tiny_trace(tmp_path)), "--dataset", "cnn", "--proposer", "eagle",
                   "--policy", "oracle", "--batch-sizes", "1", "2", "--num-requests", "1", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    header = out.read_text().splitlines()[0].split(",")
    assert header[:5] == ["dataset", "proposer", "policy", "batch_size", "speedup"]
    assert len(out.read_text().splitlines()) == 3


def assert_one_line_error(proc, message, output):
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not output.exists()


def test_cli_unknown_dataset_needs_match_probability(tmp_path):
    out = tmp_path / "o.csv"
    proc = run_cli("simulate", "--trace", str(tiny_trace(tmp_path)), "--dataset", "mydata", "--proposer", "ngram",
                   "--policy", "fixed-3", "--output", str(out))
    assert_one_line_error(proc, "dataset 'mydata' has no n-gram match probability", out)


def test_cli_cost_model_missing_a_coefficient(tmp_path):
    broken, out = tmp_path / "broken.yaml", tmp_path / "o.csv"
    broken.write_text(ROUND_COST.replace("d_spec: 0.001, ", ""))
    proc = run_cli("simulate", "--trace", str(tiny_trace(tmp_path)), "--dataset", "cnn", "--proposer", "eagle",
                   "--policy", "oracle", "--cost-model", str(broken), "--output", str(out))
    assert_one_line_error(proc, f"{broken}: missing coefficient 'eagle.d_spec'", out)


@pytest.mark.parametrize("line, message", [
    ('{"id": "0", "prompt_token_ids": [1], "generated_token_ids": [2], "acc_ngram": {"acc_len": [0]}, '
     '"acc_eagle": {"acc_len": [1]}}', ":1: field 'acc_ngram.acc_len' has non-positive value 0"),
    ('{"id": "0", "prompt_token_ids": [1], "generated_token_ids": [2], "acc_ngram": {"acc_len": [1]}}',
     "has no 'acc_eagle.acc_len' trace"),
    ("[1, 2]", ":1: expected a JSON object"),
])
def test_cli_malformed_trace(tmp_path, line, message):
    trace, out = tmp_path / "bad.jsonl", tmp_path / "o.csv"
    trace.write_text(line + "\n")
    proc = run_cli("simulate", "--trace", str(trace), "--dataset", "cnn", "--proposer", "eagle", "--policy",
                   "oracle", "--output", str(out))
    assert_one_line_error(proc, message, out)


# --- intervals over the drawn requests ---------------------------------------------------------------


def test_speedup_interval_is_the_paired_bootstrap_of_the_batches(workloads):
    from specrepro.core.uncertainty import bootstrap_ratio_ci

    cost = load_cost_model("llama3.1-8b-h100")
    spec = SimSpec("ngram", "fixed-3", ngram_match_prob=0.4, num_requests=40)
    res = simulate(workloads["cnn"], spec, [1, 16], cost)
    for b, row in res.summary.set_index("batch_size").iterrows():
        batches = res.batches[res.batches["batch_size"] == b]
        iv = bootstrap_ratio_ci(batches["sd_throughput"], batches["baseline_throughput"])
        assert (row["speedup"], row["ci_low"], row["ci_high"]) == pytest.approx((iv.estimate, iv.low, iv.high))
        assert row["ci_low"] < row["speedup"] < row["ci_high"]
    ref = simulate_reference(workloads["cnn"], spec, [1, 16], cost).summary
    np.testing.assert_allclose(ref[["ci_low", "ci_high"]], res.summary[["ci_low", "ci_high"]], rtol=1e-9)


def test_continuous_batching_has_no_interval(workloads):
    cost = load_cost_model("llama3.1-8b-h100")
    s = simulate(workloads["gsm8k"], SimSpec("eagle", "oracle", num_requests=8, batching="continuous"), [2], cost)
    assert s.summary[["ci_low", "ci_high"]].isna().all().all()


def test_metrics_carry_intervals_and_the_paper_draw():
    from specrepro.sim.simulator import PAPER_DRAW, metrics_from_summaries

    assert PAPER_DRAW == {"num_requests": 300, "seed": 42}
    row = {"dataset": "cnn", "proposer": "eagle", "policy": "oracle", "batch_size": 1, "speedup": 2.0,
           "batching": "replicate", "pairing": "index", "combine_cost": "ngram", "requests": 300, "ci_low": 1.9,
           "ci_high": 2.1}
    import pandas as pd

    eq = dict(row, pairing="equal-length", requests=80)
    m = metrics_from_summaries("ts", [pd.DataFrame([row, eq])], same_sample=True)
    key = "sim.ts.cnn.eagle.oracle.b1"
    assert (m[key], m[f"{key}.ci_low"], m[f"{key}.ci_high"], m[f"{key}.n"], m[f"{key}.same_sample"]) == \
        (2.0, 1.9, 2.1, 300, 1)
    assert "sim.ts.cnn.eagle.oracle-equal-length.b1.same_sample" not in m  # another subset of requests
    assert f"{key}.same_sample" not in metrics_from_summaries("ts", [pd.DataFrame([row])])


@pytest.mark.parametrize("charge", ["first-pass", "full"])
def test_fast_equals_reference_with_the_engines_drafter_charge(workloads, charge):
    """The adaptive policy charged as the engine pays (core.policy.AdaptiveParams.drafter_charge): the fast
    simulator and the step-by-step reference agree, and the charge lowers the speedup."""
    from specrepro.core.policy import AdaptiveParams

    cost = load_cost_model("llama3.1-8b-h100")
    w = workloads["instructcoder"]
    spec = SimSpec("combined", "adaptive", num_requests=8, ngram_match_prob=0.8,
                   adaptive=AdaptiveParams(eagle_k_max=5, drafter_charge=charge))
    fast = simulate(w, spec, [1, 4, 32], cost).summary["speedup"]
    ref = simulate_reference(w, spec, [1, 4, 32], cost).summary["speedup"]
    np.testing.assert_allclose(fast, ref, rtol=1e-12)
    chosen = simulate(w, SimSpec("combined", "adaptive", num_requests=8, ngram_match_prob=0.8,
                                 adaptive=AdaptiveParams(eagle_k_max=5)),
                      [1, 4, 32], cost).summary["speedup"]
    assert (fast.to_numpy() < chosen.to_numpy()).all()


def test_fast_equals_reference_with_per_token_drafting(workloads):
    """A cost model whose drafting grows with the batch's tokens (d_tok, fitted where profiled passes span k and B):
    the fast simulator and the step-by-step reference charge it alike in every batching mode, and it costs more at
    larger B, never at B = 1 beyond d_tok per verified token."""
    from dataclasses import replace

    base = load_cost_model("llama3.1-8b-h100")
    cost = replace(base, d_tok=2e-4)
    w = workloads["instructcoder"]
    specs = [SimSpec("eagle", "fixed-3", num_requests=8), SimSpec("eagle", "oracle", num_requests=8),
             SimSpec("combined", "oracle", num_requests=8, combine_cost="both"),
             SimSpec("combined", "adaptive", num_requests=8, ngram_match_prob=0.8),
             SimSpec("eagle", "fixed-3", num_requests=8, batching="continuous")]
    for spec in specs:
        fast = simulate(w, spec, [1, 4, 32], cost).summary["speedup"]
        ref = simulate_reference(w, spec, [1, 4, 32], cost).summary["speedup"]
        np.testing.assert_allclose(fast, ref, rtol=1e-12, err_msg=str(spec))
    spec = SimSpec("eagle", "fixed-3", num_requests=8)
    with_tok = simulate(w, spec, [1, 32], cost).summary["speedup"].to_numpy()
    without = simulate(w, spec, [1, 32], base).summary["speedup"].to_numpy()
    loss = 1 - with_tok / without
    assert 0 < loss[0] < loss[1]


def test_fast_equals_reference_with_overhead_per_token(workloads):
    """A cost model with an overhead per scheduled token (fitted on CPU profiles): the fast simulator charges it as the
    step-by-step reference does, replicated and continuous, on every policy."""
    from dataclasses import replace

    cost = replace(load_cost_model("llama3.1-8b-h100"), overhead_per_token=2e-4, sd_overhead=0.004)
    w = workloads["cnn"]
    specs = [SimSpec(p, pol, ngram_match_prob=0.4, num_requests=8) for p in ("ngram", "eagle") for pol in ("fixed-3", "oracle")]
    specs += [SimSpec("combined", "oracle", num_requests=8), SimSpec("combined", "adaptive", num_requests=8),
              SimSpec("ngram", "fixed-3", ngram_match_prob=0.4, num_requests=8, batching="continuous"),
              SimSpec("combined", "oracle", num_requests=8, batching="continuous")]
    for spec in specs:
        fast = simulate(w, spec, [1, 4, 32], cost).summary
        ref = simulate_reference(w, spec, [1, 4, 32], cost).summary
        np.testing.assert_allclose(fast["speedup"], ref["speedup"], rtol=1e-12, err_msg=str(spec))
        np.testing.assert_allclose(fast["sd_throughput"], ref["sd_throughput"], rtol=1e-12, err_msg=str(spec))
    # and it costs something: the same runs without it are faster in absolute terms
    base = simulate(w, specs[0], [4], replace(cost, overhead_per_token=0.0)).summary
    assert (simulate(w, specs[0], [4], cost).summary["sd_throughput"] < base["sd_throughput"]).all()
