"""Tiny models the CPU run builds: deterministic, loadable by transformers, and (engine) by vLLM
for every speculative-decoding method, with lossless greedy outputs."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_smoke  # noqa: E402
from engine_smoke import K, MAX_TOKENS, engine_run, tiny_models  # noqa: E402

from specrepro.core.io import SpecReproError, read_json  # noqa: E402
from specrepro.engine.models.standins import SPECIAL_TOKENS, add_cli, build_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS = sorted((REPO / "config" / "prompts").glob("*.jsonl"))


def _files(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_build_is_deterministic(tmp_path):
    build_model("tiny-llama", tmp_path / "a", corpus=CORPUS)
    # a second process (hash seeds, thread pools) builds the same bytes
    code = (f"from specrepro.engine.models.standins import build_model; "
            f"build_model('tiny-llama', {str(tmp_path / 'b')!r}, corpus={[str(c) for c in CORPUS]!r})")
    subprocess.run([sys.executable, "-c", code], check=True)
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert set(a) >= {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
    assert a == b
    for kind in ("tiny-eagle", "tiny-eagle3", "tiny-llama"):
        build_model(kind, tmp_path / f"{kind}-1", target_dir=tmp_path / "a", seed=5)
        build_model(kind, tmp_path / f"{kind}-2", target_dir=tmp_path / "a", seed=5)
        assert _files(tmp_path / f"{kind}-1") == _files(tmp_path / f"{kind}-2")
    build_model("tiny-llama", tmp_path / "c", corpus=CORPUS, seed=1)
    assert _files(tmp_path / "c")["model.safetensors"] != a["model.safetensors"]
    assert _files(tmp_path / "c")["tokenizer.json"] == a["tokenizer.json"]


def test_sizes_and_errors(tmp_path):
    build_model("tiny-llama", tmp_path / "t", corpus=CORPUS, hidden_size=64, num_heads=1, num_kv_heads=1, num_layers=3)
    cfg = json.loads((tmp_path / "t" / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["head_dim"]) == (64, 3, 64)
    with pytest.raises(SpecReproError, match="unknown size"):
        build_model("tiny-llama", tmp_path / "x", corpus=CORPUS, hidden=3)
    with pytest.raises(SpecReproError, match="needs the target"):
        build_model("tiny-eagle", tmp_path / "y")
    with pytest.raises(SpecReproError, match="corpus is empty"):
        build_model("tiny-llama", tmp_path / "z")


def test_transformers_loads_each():
    import numpy as np
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    d = tiny_models()
    tok = AutoTokenizer.from_pretrained(d["target"])
    assert 500 <= len(tok) <= 1024
    assert tok.eos_token == "<|eot_id|>" and tok.bos_token == "<|begin_of_text|>"
    for t in SPECIAL_TOKENS:
        assert tok.convert_tokens_to_ids(t) < 4
    text = tok.apply_chat_template([{"role": "user", "content": "Hi there"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    ids = engine_smoke.prompts()[0]
    assert tok.decode(ids) .startswith("<|begin_of_text|><|start_header_id|>user")
    outs = {}
    for name in ("target", "draft", "copy"):
        m = AutoModelForCausalLM.from_pretrained(d[name], dtype=torch.float32)
        assert AutoTokenizer.from_pretrained(d[name]).get_vocab() == tok.get_vocab()
        out = m.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False)[0, len(ids):].tolist()
        outs[name] = out
    assert len(set(outs["target"])) >= 10, "greedy output of the random target should vary"
    assert outs["copy"] == outs["target"]
    for name, fc_in in (("eagle", 2), ("eagle3", 3)):
        cfg = AutoConfig.from_pretrained(d[name])
        w = load_file(str(Path(d[name]) / "model.safetensors"))
        assert w["fc.weight"].shape == (cfg.hidden_size, fc_in * cfg.hidden_size)
        assert all(v.dtype == np.float32 for v in w.values())
    assert not any(k.startswith("layers.0.input_layernorm") for k in load_file(str(Path(d["eagle"]) / "model.safetensors")))


def test_cli_build_model(tmp_path):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="verb")
    add_cli(sub)
    out_t = tmp_path / "resources/models/tiny/manifest.json"
    a = p.parse_args(["build-model", "--name", "tiny", "--kind", "tiny-llama", "--corpus", *map(str, CORPUS),
                      "--size", "intermediate_size=128", "-o", str(out_t)])
    a.func(a)
    m = read_json(out_t)
    assert m["kind"] == "model" and m["source"] == "build" and m["path"] == str(out_t.parent / "model")
    assert "model.safetensors" in m["files"] and m["build"]["sizes"] == {"intermediate_size": 128}
    assert json.loads((out_t.parent / "model/config.json").read_text())["intermediate_size"] == 128
    out_d = tmp_path / "resources/models/tiny/drafters/eagle3/manifest.json"
    a = p.parse_args(["build-model", "--name", "tiny/drafters/eagle3", "--kind", "tiny-eagle3",
                      "--target-manifest", str(out_t), "-o", str(out_d)])
    a.func(a)
    md = read_json(out_d)
    assert md["kind"] == "drafter" and md["build"]["target_path"] == m["path"]
    assert [x.name for x in out_d.parent.iterdir() if x.name.startswith(".")] == []  # no temp dir left


@pytest.mark.engine
def test_vllm_every_method_is_lossless():
    """no-SD greedy vs ngram / draft_model / eagle / eagle3 (k=3): identical token ids, drafts made;
    a draft identical to the target (copy-of-target) accepts every draft: acceptance length k+1."""
    pytest.importorskip("vllm")
    base = engine_run("none")["outputs"]
    assert [len(o) for o in base] == [MAX_TOKENS] * len(base)
    for method in ("ngram", "draft_model", "eagle", "eagle3", "copy"):
        r = engine_run(method)
        assert r["outputs"] == base, method
        assert r["metrics"]["vllm:spec_decode_num_drafts"] > 0, method
    m = engine_run("copy")["metrics"]
    drafts, accepted = m["vllm:spec_decode_num_drafts"], m["vllm:spec_decode_num_accepted_tokens"]
    assert m["vllm:spec_decode_num_draft_tokens"] == K * drafts
    assert 1 + accepted / drafts == K + 1
    assert m["vllm:spec_decode_num_accepted_tokens_per_pos"] == [drafts] * K
