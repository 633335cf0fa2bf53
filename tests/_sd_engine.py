"""Shared vLLM runs for test_breakdown / test_costfit / test_memory (engine tests).

vLLM allows one ``LLM`` per process, so each scenario runs in its own Python subprocess, once per
test session (cached here), and leaves its results as files: the instrumentation plugin's step
records of one profiled ``generate`` (timing, phase intervals, acceptance), vLLM's own profiler
scopes of the same call (``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1``, an independent clock for the same
phases), vLLM's counters, per-step timings of a small cost-fit sweep, and vLLM's memory report.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

TINY = dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=2,
            intermediate_size=256, vocab_size=1024, max_position_embeddings=2048)

#: the breakdown run: draft_model SD (draft = target), k = 3, B = 2, 16 tokens
K, B_BREAKDOWN, P_BREAKDOWN, MAX_TOKENS_BREAKDOWN = 3, 2, 32, 16
SWEEP_B, SWEEP_P, SWEEP_MAX_TOKENS = (1, 2, 4), (16, 48), 12


def build_tiny_llama(out: Path) -> Path:
    """A random-weight LlamaForCausalLM (float32) with a tiny byte-level BPE tokenizer."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    import torch

    torch.manual_seed(0)
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=TINY["vocab_size"], special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([f"the quick brown fox jumps over the lazy dog {i} times" for i in range(300)], trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out)
    cfg = transformers.LlamaConfig(**TINY, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    transformers.LlamaForCausalLM(cfg).save_pretrained(out)
    return out


SCRIPT = r'''
import json, os, sys, time
from pathlib import Path
from vllm import LLM, SamplingParams
from specrepro.engine.run.profile import profile_prompts, profile_sweep
from specrepro.jobspec.counters import counter_delta, read_counters
from specrepro.engine.run.instrument import StepLog, rpc_status
from specrepro.core.io import write_parquet
from specrepro.engine.run.llm import vllm_reported_memory

model, out, method = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
cfg = json.loads(os.environ["SD_TEST_CFG"])
spec = None
if method == "draft_model":
    spec = {"method": "draft_model", "model": model, "num_speculative_tokens": cfg["k"]}
llm = LLM(model=model, enforce_eager=True, dtype="float32", gpu_memory_utilization=0.3, disable_log_stats=False,
          speculative_config=spec, max_num_batched_tokens=1024)
status = llm.collective_rpc(rpc_status)
log = StepLog(os.environ["SPECREPRO_INSTRUMENT_DIR"])
vocab = llm.llm_engine.vllm_config.model_config.get_vocab_size()
sp = SamplingParams(max_tokens=cfg["max_tokens_breakdown"], ignore_eos=True, temperature=0.0)
llm.generate(profile_prompts(cfg["b"], cfg["p"], vocab, offset=7), sp, use_tqdm=False)  # warm-up
log.new()
import torch.profiler
before = read_counters(llm.get_metrics())
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    t0 = time.perf_counter()
    outs = llm.generate(profile_prompts(cfg["b"], cfg["p"], vocab), sp, use_tqdm=False)
    wall = time.perf_counter() - t0
records = log.new()
counters = counter_delta(before, read_counters(llm.get_metrics()))
scopes = [[e.name[len("gpu_model_runner: "):], float(e.time_range.start), float(e.time_range.end - e.time_range.start)]
          for e in prof.events() if e.name.startswith("gpu_model_runner: ")]
steps = profile_sweep(llm, log, batch_sizes=cfg["sweep_b"], prompt_lens=cfg["sweep_p"], max_tokens=cfg["sweep_max_tokens"],
                      method=method, k=cfg["k"] if method != "none" else None, warmup=False)
write_parquet(out / "steps.parquet", steps)
(out / "result.json").write_text(json.dumps({
    "output_lengths": [len(o.outputs[0].token_ids) for o in outs], "wall_s": wall, "records": records,
    "scopes": scopes, "counters": counters, "status": status, "memory": vllm_reported_memory(llm),
}))
os._exit(0)  # skip the slow engine teardown
'''


def _tempdir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.lru_cache(maxsize=None)
def _model_dir() -> Path:
    return build_tiny_llama(_tempdir("specrepro-tiny-") / "tiny-llama")


@functools.lru_cache(maxsize=None)
def scenario(method: str) -> Path:
    """Run one scenario (``none`` or ``draft_model``) in a subprocess; its output directory."""
    pytest.importorskip("vllm")
    model = _model_dir()
    out = _tempdir(f"specrepro-{method}-")
    env = dict(os.environ, VLLM_CUSTOM_SCOPES_FOR_PROFILING="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
               SPECREPRO_INSTRUMENT="timing,intervals,accept", SPECREPRO_INSTRUMENT_DIR=str(out / "records"),
               VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
               PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               SD_TEST_CFG=json.dumps({"k": K, "b": B_BREAKDOWN, "p": P_BREAKDOWN,
                                       "max_tokens_breakdown": MAX_TOKENS_BREAKDOWN, "sweep_b": SWEEP_B,
                                       "sweep_p": SWEEP_P, "sweep_max_tokens": SWEEP_MAX_TOKENS}))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(model), str(out), method], env=env, cwd=out,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"vLLM scenario {method} failed:\n{proc.stderr[-6000:]}")
    return out


def result(method: str) -> dict:
    return json.loads((scenario(method) / "result.json").read_text())


def model_config() -> dict:
    return json.loads((_model_dir() / "config.json").read_text())
