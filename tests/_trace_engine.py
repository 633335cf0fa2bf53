"""Engine traces in a subprocess (one vLLM per process), and tiny targets shaped like the paper's
Llama-3.1 (rope scaling ``llama3``) and Qwen3 (q/k norms) with a layer-skip draft model each.

``trace_run`` runs the trace job's command, ``specrepro engine-trace`` (keep-one traces with k drafts,
then the record-only check against vLLM's counters), and returns its records and summary;
``ordinary_run`` an ordinary engine (``engine_smoke.py``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: the engine settings of engine_smoke.py's runs (the greedy outputs the traces are compared with)
ENGINE = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.3, "seed": 0, "max_model_len": 1024,
          "ngram": {"prompt_lookup_min": 1, "prompt_lookup_max": 3}}

def _env() -> dict:
    return dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
                PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))


@functools.lru_cache(maxsize=None)
def trace_run(model: str, method: str, drafter: str | None, prompts: tuple, max_tokens: int, k: int = 20,
              ignore_eos: bool = False) -> dict:
    """``specrepro engine-trace`` (the rule's command) on one dataset of ``prompts``: keep-one traces of
    ``method`` with k drafts, and the record-only check against vLLM's counters. Returns {records, summary}."""
    import pandas as pd

    from specrepro.core.io import write_json, write_parquet

    work = Path(tempfile.mkdtemp(prefix="specrepro-trace-"))
    spec = {"exp": "test", "model": "m", "method": method, "k": k, "datasets": {"d": max_tokens}, "batch_sizes": [1],
            "num_requests": len(prompts), "engine": {**ENGINE, "ignore_eos": ignore_eos}, "drafter": {}}
    write_parquet(work / "prompts.parquet", pd.DataFrame({
        "dataset": "d", "request_index": range(len(prompts)), "request_id": [f"r{i}" for i in range(len(prompts))],
        "prompt_token_ids": [list(p) for p in prompts]}))
    write_json(work / "target.json", {"path": model})
    cmd = [sys.executable, "-m", "specrepro", "engine-trace", "--spec", json.dumps(spec), "--prompts",
           str(work / "prompts.parquet"), "--target-manifest", str(work / "target.json"), "--k", str(k),
           "--check", str(work / "check.json"), "-o", str(work / "trace.jsonl")]
    if drafter:
        write_json(work / "drafter.json", {"path": drafter})
        cmd += ["--drafter-manifest", str(work / "drafter.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=900, cwd=work)
    if proc.returncode != 0:
        raise RuntimeError(f"engine-trace {method} failed (rc {proc.returncode}):\n{proc.stderr[-5000:]}")
    records = [json.loads(line) for line in (work / "trace.jsonl").read_text().splitlines()]
    return {"records": records, "summary": json.loads((work / "check.json").read_text()), "log": proc.stderr}


def ordinary_run(model: str, speculative_config: dict | None, prompts: tuple, max_tokens: int) -> dict:
    """An ordinary vLLM run (engine_smoke.py): greedy outputs and the spec-decode counters."""
    spec = {"model": model, "prompts": [list(p) for p in prompts], "max_tokens": max_tokens, "ignore_eos": False,
            "speculative_config": speculative_config}
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "engine_smoke.py"), json.dumps(spec)],
                          capture_output=True, text=True, env=_env(), timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"engine run failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")


def _save(model, tok_dir: Path, out: Path, rope: dict) -> str:
    model.save_pretrained(out)
    cfg = json.loads((out / "config.json").read_text())
    cfg.pop("rope_parameters", None)
    cfg.update(rope)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in tok_dir.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")) or f.name == "chat_template.jinja":
            shutil.copy(f, out / f.name)
    return str(out)


@functools.lru_cache(maxsize=None)
def paper_shaped(kind: str) -> dict[str, str]:
    """``{"target", "draft"}`` of a tiny ``llama31`` (LlamaForCausalLM, rope_scaling llama3, theta 5e5) or
    ``qwen3`` (Qwen3ForCausalLM with q_norm/k_norm) target; the draft is the target without its last
    layer, so it agrees with the target part of the time. Tokenizer: the tiny Llama's of engine_smoke."""
    import torch
    import transformers

    from engine_smoke import tiny_models

    tok_dir = Path(tiny_models()["target"])
    tc = json.loads((tok_dir / "config.json").read_text())
    common = dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=2, head_dim=64, num_hidden_layers=3,
                  intermediate_size=256, vocab_size=tc["vocab_size"], max_position_embeddings=2048,
                  bos_token_id=tc.get("bos_token_id"), eos_token_id=tc.get("eos_token_id"), tie_word_embeddings=False)
    if kind == "llama31":
        # Llama-3.1-8B-Instruct's rope entries, in the Hub's config.json format (rope_scaling + rope_theta)
        rope = {"rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                "rope_theta": 500000.0, "max_position_embeddings": 131072}
        cfg = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    elif kind == "qwen3":
        rope = {"rope_scaling": None, "rope_theta": 1000000.0, "max_position_embeddings": 40960}
        cfg = transformers.Qwen3Config(**common, rms_norm_eps=1e-6)
        cls = transformers.Qwen3ForCausalLM
    else:
        raise ValueError(kind)
    torch.manual_seed(7)
    target = cls(cfg)
    with torch.no_grad():  # peaked logits: greedy outputs vary with the context
        for name, p in target.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    root = Path(tempfile.mkdtemp(prefix=f"specrepro-{kind}-"))
    out = {"target": _save(target, tok_dir, root / "target", rope)}
    dcfg = cls.config_class(**{k: v for k, v in cfg.to_dict().items() if k != "layer_types"} | {"num_hidden_layers": 2})
    draft = cls(dcfg)
    draft.load_state_dict({k: v for k, v in target.state_dict().items() if ".layers.2." not in k})
    out["draft"] = _save(draft, tok_dir, root / "draft", rope)
    return out
