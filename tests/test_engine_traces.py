"""Acceptance traces computed by vLLM (k = 20, one token kept per step; specrepro.engine.run.traces): the
record-to-trace rules by hand, then real engines against the PyTorch oracle (specrepro.engine.models.oracle)
and against vLLM's own counters, for Llama targets and for targets shaped like Llama-3.1 (rope scaling
llama3) and Qwen3 (q/k norms); and the paper DAG's trace jobs on the experiment's GPUs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_smoke import K, MAX_TOKENS, engine_run, prompts, tiny_models  # noqa: E402

from specrepro.engine.models.oracle import (  # noqa: E402
    acc_from_draft_argmax, acc_from_drafts, llama_forward, oracle_traces, run_lengths, _Model,
)
from specrepro.engine.run.traces import (  # noqa: E402
    acc_from_records, counters_from_records, merge_trace_records, simulate_steps,
)
from specrepro.core.io import SpecReproError  # noqa: E402
from specrepro.core.ngram import NgramParams, ngram_acc_lens  # noqa: E402
from specrepro.core.traces import TraceRecord  # noqa: E402

TRACE_K = 20


# --- the oracle's rules by hand -----------------------------------------------------------------------


def test_run_lengths_by_hand():
    assert run_lengths(np.array([1, 1, 0, 1, 1, 1, 0, 0, 1], bool)).tolist() == [2, 1, 0, 3, 2, 1, 0, 0, 1]
    assert run_lengths(np.zeros(0, bool)).tolist() == []
    out = np.array([5, 6, 7, 8, 9])
    guess = np.array([5, 6, 0, 8, 9])  # guess[i] = drafter's argmax for out[i] given out[:i]
    assert acc_from_draft_argmax(guess, out, k=20).tolist() == [3, 2, 1, 3, 2]
    assert acc_from_draft_argmax(guess, out, k=1).tolist() == [2, 2, 1, 2, 2]
    assert acc_from_draft_argmax(out, out, k=3).tolist() == [4, 4, 4, 3, 2]  # tail: L - i + 1


def test_acc_from_drafts_by_hand():
    out = np.array([1, 2, 3, 4])
    drafts = np.array([[1, 2, 9], [2, 3, 4], [9, 4, 4], [4, 7, 7]])
    assert acc_from_drafts(drafts, out).tolist() == [3, 4, 1, 2]
    assert simulate_steps([9, 4, 1, 2, 1, 3], cap=4) == [4, 3]  # from i=1: 4 -> i=5: 3 (runs past the end)


def test_oracle_ngram_is_specrepro_ngram():
    reqs = [{"id": "a", "prompt_token_ids": [1, 2, 3, 4, 1, 2], "generated_token_ids": [3, 4, 1, 2, 3, 9, 9]}]
    tr = oracle_traces(reqs, "ngram", k=4, ngram=(2, 3))
    rec = TraceRecord("a", np.array(reqs[0]["prompt_token_ids"]), np.array(reqs[0]["generated_token_ids"]))
    assert tr[0]["acc_ngram"]["acc_len"] == ngram_acc_lens([rec], NgramParams(2, 3, 4))[0].tolist()
    with pytest.raises(SpecReproError, match="needs the drafter"):
        oracle_traces(reqs, "eagle")


# --- step records -> traces, counters, merged files (by hand) -----------------------------------------


def _step(*reqs):
    """reqs: (engine id, computed, scheduled, drafts, produced)."""
    ids, c, n, d, v = zip(*reqs)
    return {"req": {"id": list(ids), "computed": list(c), "scheduled": list(n), "drafts": list(d), "valid": list(v),
                    "prompt_len": [-1] * len(ids)}}


def test_positions_of_keep_one_records_by_hand():
    # request "0" (engine id "0-1a2b3c4d"): 5 prompt tokens prefilled in two chunks, then one token per step
    recs = [
        _step(("0-1a2b3c4d", 0, 3, 0, 1)),                                    # prefill chunk: no token
        _step(("0-1a2b3c4d", 3, 2, 0, 1), ("7", 0, 4, 0, 1)),                 # i = 0 (prefill); "7" i = 0
        _step(("0-1a2b3c4d", 5, 21, 20, 3), ("7", 4, 3, 2, 2)),               # i = 1 -> 3; "7" i = 1 -> 2
        _step(("0-1a2b3c4d", 6, 21, 20, 1), ("7", 5, 1, 0, 1)),               # i = 2 -> 1; "7" i = 2 undrafted
        _step(("0-1a2b3c4d", 6, 21, 20, 5)),                                  # i = 2 again (recomputed): kept
        _step(("0-1a2b3c4d", 8, 21, 20, 2)),                                  # i = 4: past the 4-token output
        _step(("99-ffffffff", 0, 4, 0, 1)),                                   # not a request of this call
    ]
    acc, stats = acc_from_records(recs, {"0": (5, 4), "7": (4, 3)}, k=20)
    assert acc["0"].tolist() == [1, 3, 5, 1] and acc["7"].tolist() == [1, 2, 1]
    assert stats == {"missing": 1, "duplicate": 1, "undrafted": 1, "beyond_output": 1}
    with pytest.raises(SpecReproError, match="produced 4 tokens from 2 drafts"):
        acc_from_records([_step(("0", 5, 3, 2, 4))], {"0": (5, 4)}, k=20)


def test_counters_from_records_by_hand():
    recs = [_step(("a", 0, 5, 0, 1), ("b", 9, 4, 3, 4)), _step(("a", 5, 4, 3, 2), ("b", 13, 1, 0, 1)),
            _step(("a", 7, 4, 3, 0))]  # a produced nothing: not counted (as vLLM's scheduler)
    assert counters_from_records(recs, k=3) == {"num_drafts": 2, "num_draft_tokens": 6, "num_accepted_tokens": 4,
                                                "accepted_per_pos": [2, 1, 1]}


def test_merge_keeps_requests_whose_outputs_agree():
    def rec(rid, out, method, ds="x"):
        return {"id": rid, "dataset": ds, "prompt_token_ids": [1], "generated_token_ids": out,
                f"acc_{method}": {"acc_len": [1] * len(out)}}

    files = {"ngram.jsonl": [rec("a", [1, 2], "ngram"), rec("b", [3, 4, 5], "ngram"), rec("c", [7], "ngram", ds="y")],
             "eagle.jsonl": [rec("b", [3, 9, 5], "eagle"), rec("a", [1, 2], "eagle"), rec("c", [7], "eagle", ds="y")]}
    merged, dropped = merge_trace_records(files, "x")
    assert [m["id"] for m in merged] == ["a"] and set(merged[0]) == {"id", "prompt_token_ids", "generated_token_ids",
                                                                      "acc_ngram", "acc_eagle"}
    assert dropped == ["request b: the output of eagle.jsonl differs from ngram.jsonl's from token 1 on"]
    with pytest.raises(SpecReproError, match="no request with the same output"):
        merge_trace_records({"n.jsonl": [rec("b", [3], "ngram")], "e.jsonl": [rec("b", [4], "eagle")]}, "x")


# --- real engines -------------------------------------------------------------------------------------


def _check(res):
    cc = res["summary"]["counter_check"]
    assert cc["equal"] and cc["plugin"] == cc["vllm"] and cc["family"] == "vllm-0.32", cc
    assert cc["vllm"]["num_drafts"] > 0
    s = res["summary"]
    assert s["missing"] == 0 and s["beyond_output"] == 0, s
    return {r["id"]: r for r in res["records"]}


@pytest.mark.engine
@pytest.mark.parametrize("method", ["ngram", "draft_model", "eagle", "eagle3"])
def test_keep_one_traces_equal_the_pytorch_oracle(method):
    """k = 20 keep-one traces from vLLM equal the teacher-forced PyTorch recomputation at every position
    of the output (position 0 is the prefill: 1), and the engine's outputs are the greedy outputs.

    vLLM verifies drafts against the target's continuation past ``max_tokens`` too, so the oracle runs
    on the greedy output extended by k tokens; its first ``MAX_TOKENS`` positions are compared."""
    from _trace_engine import trace_run

    d = tiny_models()
    drafter = {"ngram": None, "draft_model": d["draft"], "eagle": d["eagle"], "eagle3": d["eagle3"]}[method]
    res = trace_run(d["target"], method, drafter, prompts(), MAX_TOKENS, TRACE_K, ignore_eos=True)
    recs = _check(res)
    greedy = engine_run("none")["outputs"]
    ext = engine_run("none", max_tokens=MAX_TOKENS + TRACE_K)["outputs"]
    assert [recs[f"r{i}"]["generated_token_ids"] for i in range(len(greedy))] == greedy
    reqs = [{"id": f"r{i}", "prompt_token_ids": list(p), "generated_token_ids": o} for i, (p, o) in enumerate(zip(prompts(), ext))]
    oracle = oracle_traces(reqs, method, target_dir=d["target"], drafter_dir=drafter, k=TRACE_K, ngram=(1, 3))
    seen = []
    for o in oracle:
        got = recs[o["id"]][f"acc_{method}"]["acc_len"]
        want = o[f"acc_{method}"]["acc_len"][:MAX_TOKENS]
        assert got[0] == 1 and got[1:] == want[1:], (o["id"], got, want)
        seen += got
    assert max(seen) > 1, seen  # not vacuous: some drafts accepted


def _walk_counters(traces, k):
    steps = [n for acc in traces for n in simulate_steps(acc, k + 1)]
    return len(steps), sum(n - 1 for n in steps), [sum(1 for n in steps if n - 1 > j) for j in range(k)]


@pytest.mark.engine
@pytest.mark.parametrize("kind", ["llama31", "qwen3"])
def test_traces_of_paper_shaped_targets_agree_with_vllm_counters(kind):
    """Defect 6: a Llama-3.1-shaped target (rope_scaling llama3) stopped the old host-side traces and a
    Qwen3 target (q/k norms) made them silently wrong. Computed by vLLM, both traces (k = 20, keep one)
    (1) pass the record-only check against vLLM's counters (inside the trace job) and (2) walked with
    at most k + 1 = 4 tokens a step, reproduce an ordinary k = 3 run's counters: drafts, accepted tokens,
    accepted tokens per draft position; the trace outputs are that run's (lossless) outputs."""
    from _trace_engine import ordinary_run, paper_shaped, trace_run

    m = paper_shaped(kind)
    res = trace_run(m["target"], "draft_model", m["draft"], prompts(), MAX_TOKENS, TRACE_K)
    recs = _check(res)
    run = ordinary_run(m["target"], {"method": "draft_model", "model": m["draft"], "num_speculative_tokens": K},
                       prompts(), MAX_TOKENS)
    outs = [recs[f"r{i}"]["generated_token_ids"] for i in range(len(prompts()))]
    assert outs == run["outputs"]
    traces = [recs[f"r{i}"]["acc_draft_model"]["acc_len"] for i in range(len(prompts()))]
    got = (run["metrics"]["vllm:spec_decode_num_drafts"], run["metrics"]["vllm:spec_decode_num_accepted_tokens"],
           run["metrics"]["vllm:spec_decode_num_accepted_tokens_per_pos"])
    print(kind, "engine k=3", got, "walked trace", _walk_counters(traces, K))
    assert _walk_counters(traces, K) == (got[0], got[1], list(got[2]))
    assert got[1] > 0  # the layer-skip draft gets tokens accepted


def test_paper_trace_jobs_run_on_the_experiments_gpus(dry_run):
    """Defect 6: the 70B trace held bf16 and fp32 copies on the host (~423 GB, above its request). Every
    engine_trace job of the paper DAG now asks for what its experiment's bench job asks (the model's
    GPUs, the same host memory), and a time limit from the plan's trace row."""
    proc = dry_run()
    assert proc.returncode == 0, proc.stderr[-2000:]
    blocks = re.split(r"\n(?=rule \w+:)", proc.stdout)
    res: dict[tuple[str, str], dict[str, str]] = {}
    for b in blocks:
        rule = re.match(r"rule (\w+):", b)
        wc = re.search(r"wildcards: (.*)", b)
        rs = re.search(r"resources: (.*)", b)
        if rule and wc and rs and rule.group(1) in ("engine_trace", "engine_bench"):
            w = dict(kv.split("=", 1) for kv in wc.group(1).split(", "))
            res[(rule.group(1), w["exp"] + "/" + w.get("method", w.get("config", "")))] = dict(
                kv.split("=", 1) for kv in rs.group(1).split(", "))
    traces = {k[1]: v for k, v in res.items() if k[0] == "engine_trace"}
    bench = {k[1].split("/")[0]: v for k, v in res.items() if k[0] == "engine_bench"}
    assert "llama3-70b/eagle" in traces and "glm-4.5-air/mtp" in traces, sorted(traces)
    for job, r in traces.items():
        b = bench[job.split("/")[0]]
        assert r["gpu"] == b["gpu"] and int(r["mem_mb"]) == int(b["mem_mb"]), (job, r, b)
        assert int(r["runtime"]) > 0
    assert traces["llama3-70b/eagle"]["gpu"] == "4" and int(traces["llama3-70b/eagle"]["mem_mb"]) < 384_000


def test_trace_job_estimate_by_hand():
    """specrepro.plan.trace_seconds on made-up coefficients: 2 requests of 10 prompt tokens, 3 kept tokens,
    k = 2, cap 4: prefill + 3 steps of both requests + the tail step of one request to the cap."""
    from types import SimpleNamespace

    from specrepro.plan import trace_seconds

    cm = SimpleNamespace(c_kv=1.0, c_compute=10.0, c_fixed=100.0, d_kv=0.5, d_spec=7.0, d_fixed=3.0, d_tok=0.0,
                         overhead=1000.0)
    cm.target = lambda kv, n: cm.c_kv * kv + cm.c_compute * n + cm.c_fixed
    # prefill 300 + 1000; steps j = 1..3, kv 2*(10 + j) = 22, 24, 26: target 72 + 3*(10*2*3 + 100), drafts
    # 2*(0.5*72 + 3*(7 + 3)), overhead 3*1000; tail j = 4, one request: kv 14: 14 + 130 + 2*(7 + 10) + 1000
    want = 300 + 1000 + (72 + 480) + 132 + 3000 + (14 + 130 + 34 + 1000)
    assert trace_seconds(cm, 2, 10, 3, k=2, cap=4) == pytest.approx(want, rel=1e-12)
    assert trace_seconds(cm, 2, 10, 3, k=2, cap=4, drafter=False) == pytest.approx(want - 132 - 34, rel=1e-12)
    assert trace_seconds(cm, 300, 10, 3, k=2) == pytest.approx(2 * trace_seconds(cm, 256, 10, 3, k=2), rel=1e-12)
    # a drafter token over the batch (d_tok): each of the k passes takes every request's token, 2 * 3 * 2 in the
    # three steps of both requests, 2 * 1 * 1 in the tail step
    cm.d_tok = 0.25
    assert trace_seconds(cm, 2, 10, 3, k=2, cap=4) == pytest.approx(want + 0.25 * (12 + 2), rel=1e-12)


def test_plan_has_a_trace_row_per_experiment_and_method():
    import yaml

    from conftest import REPO
    from specrepro.plan import plan_jobs

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    t = plan_jobs(cfg)
    tr = t[t["job"] == "trace"].set_index(["exp", "config"])
    assert tr.loc[("llama3-70b", "eagle-k20"), "gpus"] == 4 and tr.loc[("glm-4.5-air", "mtp-k20"), "gpus"] == 4
    assert len(tr) == 13 and (tr["est_hours"] > 0).all()
    assert tr.loc[("llama3.1-8b", "ngram-k20"), "points"] == 4 * 500


def test_merge_names_a_failed_trace_engine(tmp_path, capsys):
    """A trace job whose engine failed leaves an empty trace and a check record saying so: the merge names that
    file and the way out (the next run leaves the method out of the trace set) instead of "no request"."""
    from specrepro import cli

    ok = tmp_path / "ngram.jsonl"
    ok.write_text(json.dumps({"id": "a", "dataset": "x", "prompt_token_ids": [1], "generated_token_ids": [2],
                              "acc_ngram": {"acc_len": [1]}}) + "\n")
    bad = tmp_path / "eagle.jsonl"
    bad.write_text("")
    (tmp_path / "eagle.check.json").write_text(json.dumps({"status": "failed", "error": "ValueError: no head"}))
    (tmp_path / "ngram.check.json").write_text(json.dumps({"status": "ok"}))
    out = tmp_path / "merged.jsonl"
    assert cli.main(["merge-traces", str(ok), str(bad), "--dataset", "x", "-o", str(out)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{bad} (its engine failed: ValueError: no head)" in err[0]
    assert "run snakemake again" in err[0] and not out.exists()
    bad.write_text(ok.read_text().replace("ngram", "eagle"))
    (tmp_path / "eagle.check.json").write_text(json.dumps({"status": "ok"}))
    assert cli.main(["merge-traces", str(ok), str(bad), "--dataset", "x", "-o", str(out)]) == 0
    assert set(json.loads(out.read_text())) >= {"acc_ngram", "acc_eagle"}
