"""Memory overhead of SD: parameter counts against transformers, the paper's KV ratio, vLLM's report."""

from __future__ import annotations

import math

import pytest

from specrepro.core.io import SpecReproError
from specrepro.engine.results.memory import (
    MEMORY_COLUMNS, count_parameters, drafter_parameters, kv_bytes_per_token, memory_table, model_memory,
)

QWEN3_8B = dict(model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                tie_word_embeddings=False, torch_dtype="bfloat16")
QWEN3_06B = dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                 tie_word_embeddings=True, torch_dtype="bfloat16")
LLAMA31_8B = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False)
EAGLE_L31_8B = dict(LLAMA31_8B, num_hidden_layers=1)  # yuhuili/EAGLE-LLaMA3.1-Instruct-8B
EAGLE3_L31_8B = dict(LLAMA31_8B, num_hidden_layers=1, draft_vocab_size=32000)


def _hf_numel(cls_name: str, config_cls: str, cfg: dict) -> int:
    transformers = pytest.importorskip("transformers")
    import torch

    kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "torch_dtype")}
    with torch.device("meta"):
        model = getattr(transformers, cls_name)(getattr(transformers, config_cls)(**kwargs))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("tied", [False, True])
def test_llama_count_equals_transformers(tied):
    cfg = dict(model_type="llama", hidden_size=96, intermediate_size=200, num_hidden_layers=3,
               num_attention_heads=6, num_key_value_heads=2, vocab_size=500, tie_word_embeddings=tied)
    hand = (500 * 96                                             # embed_tokens
            + 3 * (96 * 96 + 2 * 96 * (2 * 16) + 96 * 96        # q, k, v (GQA: 2 kv heads of 16), o
                   + 3 * 96 * 200 + 2 * 96)                     # gate/up/down, two RMSNorms
            + 96                                                 # final norm
            + (0 if tied else 500 * 96))                         # lm_head
    assert count_parameters(cfg)["total"] == hand
    assert hand == _hf_numel("LlamaForCausalLM", "LlamaConfig", cfg)


def test_llama_with_biases_and_qwen_variants_equal_transformers():
    llama = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300, attention_bias=True, mlp_bias=True, head_dim=32)
    assert count_parameters(llama)["total"] == _hf_numel("LlamaForCausalLM", "LlamaConfig", llama)
    qwen3 = dict(QWEN3_06B, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, vocab_size=300)
    assert count_parameters(qwen3)["total"] == _hf_numel("Qwen3ForCausalLM", "Qwen3Config", qwen3)
    qwen2 = dict(model_type="qwen2", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300, tie_word_embeddings=False)
    assert count_parameters(qwen2)["total"] == _hf_numel("Qwen2ForCausalLM", "Qwen2Config", qwen2)


def test_qwen3_models_have_their_published_sizes():
    assert count_parameters(QWEN3_8B)["total"] == 8_190_735_360
    assert count_parameters(QWEN3_06B)["total"] == 596_049_920
    assert model_memory(QWEN3_8B, "auto")["weight_bytes"] == 2 * 8_190_735_360


def test_qwen3_draft_raises_per_token_kv_by_64_over_36():
    assert kv_bytes_per_token(QWEN3_8B, "bfloat16") == 2 * 36 * 8 * 128 * 2 == 147_456
    assert kv_bytes_per_token(QWEN3_06B, "bfloat16") == 2 * 28 * 8 * 128 * 2 == 114_688
    row = memory_table([dict(target="Qwen3-8B", target_config=QWEN3_8B, kind="draft_model", drafter="Qwen3-0.6B",
                             drafter_config=QWEN3_06B)]).iloc[0]
    assert row["kv_ratio_per_token"] == pytest.approx(64 / 36, abs=1e-12)
    # the paper's 1.77x is this ratio truncated to two decimals (rounded it is 1.78)
    assert math.floor(row["kv_ratio_per_token"] * 100) / 100 == 1.77
    assert round(row["kv_ratio_per_token"], 2) == 1.78
    assert row["weight_ratio"] == pytest.approx(1 + 596_049_920 / 8_190_735_360)


def test_eagle_heads_add_under_ten_percent_and_ngram_nothing():
    t = memory_table([
        dict(target="L3.1-8B", target_config=LLAMA31_8B, kind="ngram"),
        dict(target="L3.1-8B", target_config=LLAMA31_8B, kind="eagle", drafter_config=EAGLE_L31_8B),
        dict(target="L3.1-8B", target_config=LLAMA31_8B, kind="eagle3", drafter_config=EAGLE3_L31_8B),
    ])
    assert list(t.columns) == list(MEMORY_COLUMNS)
    ng, ea, e3 = t.to_dict("records")
    assert ng["drafter_params"] == 0 and ng["kv_ratio_per_token"] == 1.0 and ng["weight_ratio"] == 1.0
    H, I = 4096, 14336
    layer = H * 4096 + 2 * H * 1024 + 4096 * H + 3 * H * I + 2 * H
    assert ea["drafter_params"] == layer - H + 2 * H * H  # no input_layernorm, fc [H, 2H]; shared embed/lm_head
    assert e3["drafter_params"] == (layer + (2 * H) * (4096 + 2 * 1024) - H * (4096 + 2 * 1024) + H  # 2H qkv, hidden_norm
                                    + 3 * H * H + H + 32000 * H)                             # fc, norm, lm_head
    for r in (ea, e3):
        assert r["kv_ratio_per_token"] == pytest.approx(33 / 32)
        assert r["weight_ratio"] < 1.10
    assert drafter_parameters("eagle", EAGLE_L31_8B, shares_embeddings=False) == ea["drafter_params"] + 128256 * H


def test_bad_inputs_are_clear_errors():
    with pytest.raises(SpecReproError, match="unknown dtype"):
        model_memory(LLAMA31_8B, "int3")
    with pytest.raises(SpecReproError, match="names no torch_dtype"):
        model_memory(LLAMA31_8B, "auto")
    with pytest.raises(SpecReproError, match="lacks 'hidden_size'"):
        model_memory({"num_hidden_layers": 2}, "bf16")
    with pytest.raises(SpecReproError, match="needs the drafter's config"):
        memory_table([dict(target_config=LLAMA31_8B, kind="eagle")])


@pytest.mark.engine
@pytest.mark.parametrize("method", ["none", "draft_model"])
def test_vllm_reports_the_architecture_kv_bytes_and_params(method):
    import _sd_engine as eng

    cfg = eng.model_config()
    rep = eng.result(method)["memory"]
    print(rep)
    copies = 2 if method == "draft_model" else 1  # the draft model is the target itself
    assert rep["dtype"] == "float32"
    assert rep["kv_bytes_per_token"] == copies * kv_bytes_per_token(cfg, "float32") == copies * 2 * 2 * 2 * 64 * 4
    assert rep["kv_layers"] == copies * cfg["num_hidden_layers"]
    assert rep["target_params"] == count_parameters(cfg)["total"]
    assert rep["params"] == copies * count_parameters(cfg)["total"]
    assert rep["weight_bytes"] == 4 * rep["params"]
