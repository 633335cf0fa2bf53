"""Run ONE vLLM engine (CPU) in this process and print a JSON result; the tests call it as a subprocess.

    python tests/engine_smoke.py '{"model": DIR, "prompts": [[ids...], ...], "max_tokens": 24,
                                   "speculative_config": {...} | null, "ignore_eos": false}'

Prints one line ``RESULT {"outputs": [[ids...], ...], "metrics": {name: value}}`` (counters summed;
vector counters such as ``vllm:spec_decode_num_accepted_tokens_per_pos`` as lists).
"""

from __future__ import annotations

import json
import os
import sys


def main(spec: dict) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=spec["model"], enforce_eager=True, dtype="float32", gpu_memory_utilization=0.3,
              disable_log_stats=False, max_model_len=spec.get("max_model_len", 1024), seed=0,
              speculative_config=spec.get("speculative_config"))
    sp = SamplingParams(temperature=0.0, max_tokens=spec.get("max_tokens", 24), ignore_eos=spec.get("ignore_eos", False))
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in spec["prompts"]], sp, use_tqdm=False)
    metrics: dict = {}
    for m in llm.get_metrics():
        if not m.name.startswith("vllm:spec_decode"):
            continue
        if hasattr(m, "values"):
            metrics[m.name] = list(m.values)
        elif hasattr(m, "value"):
            metrics[m.name] = metrics.get(m.name, 0) + m.value
    return {"outputs": [list(o.outputs[0].token_ids) for o in outs], "metrics": metrics}


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]))
    print("RESULT " + json.dumps(result), flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip slow engine teardown


# --- helpers the tests import (shared, cached per pytest session) ------------------------------

import functools
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
K = 3
MAX_TOKENS = 24
MESSAGES = ("Write a short poem about the sea at night.", "Tom has 3 boxes with 12 apples each. How many apples?")


@functools.lru_cache(maxsize=None)
def tiny_models() -> dict[str, str]:
    """target, draft (tiny-llama), eagle, eagle3, copy: built once per session in a temp dir."""
    from specrepro.engine.models.standins import build_model

    root = Path(tempfile.mkdtemp(prefix="specrepro-tiny-"))
    corpus = sorted((REPO / "config" / "prompts").glob("*.jsonl"))
    dirs = {n: str(root / n) for n in ("target", "draft", "eagle", "eagle3", "copy")}
    build_model("tiny-llama", dirs["target"], corpus=corpus)
    build_model("tiny-llama", dirs["draft"], target_dir=dirs["target"], seed=1)
    build_model("tiny-eagle", dirs["eagle"], target_dir=dirs["target"], seed=2)
    build_model("tiny-eagle3", dirs["eagle3"], target_dir=dirs["target"], seed=3)
    build_model("copy-of-target", dirs["copy"], target_dir=dirs["target"])
    return dirs


@functools.lru_cache(maxsize=None)
def prompts() -> tuple[tuple[int, ...], ...]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models()["target"])
    out = []
    for m in MESSAGES:
        ids = tok.apply_chat_template([{"role": "user", "content": m}], add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        out.append(tuple(int(t) for t in ids))
    return tuple(out)


def spec_config(method: str) -> dict | None:
    d = tiny_models()
    if method == "none":
        return None
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    model = {"draft_model": d["draft"], "copy": d["copy"], "eagle": d["eagle"], "eagle3": d["eagle3"]}[method]
    return {"method": "draft_model" if method == "copy" else method, "model": model, "num_speculative_tokens": K}


@functools.lru_cache(maxsize=None)
def engine_run(method: str, max_tokens: int = MAX_TOKENS) -> dict:
    """One vLLM engine in a subprocess: greedy outputs of prompts() and the spec-decode counters."""
    spec = {"model": tiny_models()["target"], "prompts": [list(p) for p in prompts()], "max_tokens": max_tokens,
            "ignore_eos": True, "speculative_config": spec_config(method)}
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    proc = subprocess.run([sys.executable, __file__, json.dumps(spec)], capture_output=True, text=True, env=env,
                          timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"engine run {method} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
