"""Acceptance traces from greedy outputs (specrepro.engine.traces): the run-length rule by hand,
a draft identical to the target, the CLI, and (engine) agreement with vLLM's own counters."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_smoke import K, MAX_TOKENS, engine_run, prompts, tiny_models  # noqa: E402

from specrepro.engine.traces import (  # noqa: E402
    acc_from_draft_argmax, acc_from_drafts, add_cli, engine_traces, llama_forward, run_lengths, simulate_steps, _Model,
)
from specrepro.io import SpecReproError, write_json, write_parquet  # noqa: E402
from specrepro.ngram import NgramParams, ngram_acc_lens  # noqa: E402
from specrepro.traces import TraceRecord, read_trace  # noqa: E402


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


def _requests(n_tokens=30):
    d = tiny_models()
    t = _Model(d["target"])
    reqs = []
    for i, p in enumerate(prompts()):
        seq = list(p)
        for _ in range(n_tokens):
            seq.append(int(llama_forward(t, seq)[0][-1].argmax()))
        reqs.append({"id": f"r{i}", "prompt_token_ids": list(p), "generated_token_ids": seq[len(p):]})
    return reqs


def test_copy_of_target_accepts_everything():
    d = tiny_models()
    reqs = _requests()
    for k in (3, 20):
        tr = engine_traces(reqs, "draft_model", target_dir=d["target"], drafter_dir=d["copy"], k=k)
        for r in tr:
            L = len(r["generated_token_ids"])
            assert r["acc_draft_model"]["acc_len"] == [min(k + 1, L - i + 1) for i in range(L)]


def test_draft_model_matches_transformers_and_traces_vary():
    import torch
    from transformers import AutoModelForCausalLM

    d = tiny_models()
    reqs = _requests()
    hf = AutoModelForCausalLM.from_pretrained(d["draft"], dtype=torch.float32)
    tr = engine_traces(reqs, "draft_model", target_dir=d["target"], drafter_dir=d["draft"], k=5)
    for r, t in zip(reqs, tr):
        P, out = len(r["prompt_token_ids"]), np.array(r["generated_token_ids"])
        with torch.no_grad():
            lg = hf(torch.tensor([r["prompt_token_ids"] + r["generated_token_ids"]])).logits[0]
        guess = lg[P - 1: P - 1 + out.size].argmax(-1).numpy()
        assert t["acc_draft_model"]["acc_len"] == acc_from_draft_argmax(guess, out, 5).tolist()
    allv = np.concatenate([t["acc_draft_model"]["acc_len"] for t in tr])
    assert 1 < allv.mean() < 6
    for method, head in (("eagle", "eagle"), ("eagle3", "eagle3")):
        tr = engine_traces(reqs, method, target_dir=d["target"], drafter_dir=d[head], k=20)
        v = np.concatenate([t[f"acc_{method}"]["acc_len"] for t in tr])
        assert v.min() >= 1 and v.max() <= 21 and (v > 1).any(), method


def test_ngram_method_is_specrepro_ngram():
    reqs = [{"id": "a", "prompt_token_ids": [1, 2, 3, 4, 1, 2], "generated_token_ids": [3, 4, 1, 2, 3, 9, 9]}]
    tr = engine_traces(reqs, "ngram", k=4, ngram=(2, 3))
    rec = TraceRecord("a", np.array(reqs[0]["prompt_token_ids"]), np.array(reqs[0]["generated_token_ids"]))
    assert tr[0]["acc_ngram"]["acc_len"] == ngram_acc_lens([rec], NgramParams(2, 3, 4))[0].tolist()
    with pytest.raises(SpecReproError, match="needs the drafter"):
        engine_traces(reqs, "eagle")


def test_cli_engine_trace(tmp_path):
    d = tiny_models()
    reqs = _requests(12)
    df = pd.DataFrame({
        "dataset": ["x", "y"], "request_id": [r["id"] for r in reqs],
        "prompt_token_ids": [r["prompt_token_ids"] for r in reqs],
        "output_token_ids": [r["generated_token_ids"] for r in reqs],
    })
    write_parquet(tmp_path / "outputs.parquet", df)
    write_json(tmp_path / "t.json", {"path": d["target"]})
    write_json(tmp_path / "d.json", {"path": d["eagle3"]})
    p = argparse.ArgumentParser()
    add_cli(p.add_subparsers(dest="verb"))
    a = p.parse_args(["engine-trace", "--method", "eagle3", "--outputs", str(tmp_path / "outputs.parquet"),
                      "--target-manifest", str(tmp_path / "t.json"), "--drafter-manifest", str(tmp_path / "d.json"),
                      "--k", "4", "--dataset", "y", "-o", str(tmp_path / "trace.jsonl")])
    a.func(a)
    recs = read_trace(tmp_path / "trace.jsonl", aligned=["eagle3"])
    assert [r.id for r in recs] == ["r1"] and recs[0].acc_len["eagle3"].max() <= 5


def _per_pos(steps: list[int], k: int) -> list[int]:
    return [sum(1 for n in steps if n - 1 > j) for j in range(k)]


@pytest.mark.engine
def test_traces_agree_with_vllm_counters():
    """Walk each greedy output with the trace (cap k+1, starting after the prefill's token): the
    number of drafts, accepted tokens and accepted tokens per draft position equal vLLM's counters.

    vLLM schedules full k-token drafts up to the last step and counts the rejection sampler's
    accepted tokens before truncating them at ``max_tokens``, so a last step's drafts that match
    the target's continuation past the output's end still count as accepted. The traces are
    therefore computed on the greedy output extended by k tokens (same engine, larger
    ``max_tokens``) and walked over the first ``MAX_TOKENS`` positions only."""
    pytest.importorskip("vllm")
    d = tiny_models()
    base = engine_run("none")["outputs"]
    ext = engine_run("none", max_tokens=MAX_TOKENS + K)["outputs"]
    assert [o[:MAX_TOKENS] for o in ext] == base and all(len(o) == MAX_TOKENS + K for o in ext)
    reqs = [{"id": str(i), "prompt_token_ids": list(p), "generated_token_ids": o} for i, (p, o) in enumerate(zip(prompts(), ext))]
    cases = {"draft_model": ("draft_model", d["draft"]), "copy": ("draft_model", d["copy"]),
             "eagle": ("eagle", d["eagle"]), "eagle3": ("eagle3", d["eagle3"]), "ngram": ("ngram", None)}
    seen_accepts = {}
    for run, (method, drafter) in cases.items():
        m = engine_run(run)["metrics"]
        tr = engine_traces(reqs, method, target_dir=d["target"], drafter_dir=drafter, k=K, ngram=(1, 3))
        steps = [n for r in tr for n in simulate_steps(r[f"acc_{method}"]["acc_len"][:MAX_TOKENS], K + 1)]
        got = (m["vllm:spec_decode_num_drafts"], m["vllm:spec_decode_num_accepted_tokens"],
               m["vllm:spec_decode_num_accepted_tokens_per_pos"])
        want = (len(steps), sum(n - 1 for n in steps), _per_pos(steps, K))
        print(run, "engine", got, "trace", want)
        if method != "ngram":  # ngram proposes nothing when no n-gram matches: no draft counted
            assert got[0] == want[0], run
        assert got[1:] == want[1:], run
        seen_accepts[run] = got[2]
    # not vacuous: every learned drafter gets drafts accepted, EAGLE-1 past the first position too
    assert all(seen_accepts[r][0] > 0 for r in ("draft_model", "eagle", "eagle3")), seen_accepts
    assert seen_accepts["eagle"][1] > 0, seen_accepts
