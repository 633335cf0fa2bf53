"""Memory overhead of speculative decoding: weights and per-token KV cache of a target and its drafter.

The paper (Sec. "Memory") states: n-gram needs no GPU memory; EAGLE/EAGLE-3 heads add < 10 % to the
weights and per-token KV; a Qwen3-0.6B draft model next to Qwen3-8B "raises per-token KV memory 1.77x",
with per-token KV = 2 x layers x KV heads x head dim x 2 bytes.

Accounting used here (all from the Hugging Face ``config.json`` of each model):

* **Parameters** of a Llama/Qwen-style decoder (``count_parameters``):
  embeddings ``V*H``; per layer q/k/v/o projections with grouped-query attention
  (``H*nq*hd + 2*H*nkv*hd + nq*hd*H``, plus biases where the architecture has them: Qwen2 q/k/v
  biases, ``attention_bias``/``mlp_bias`` flags), Qwen3's per-head ``q_norm``/``k_norm`` (``2*hd``),
  the gated MLP ``3*H*I``, two RMSNorms ``2*H``; the final norm ``H``; the LM head ``V*H`` unless
  ``tie_word_embeddings``. Rotary frequencies are buffers, not parameters. MoE layers (GLM-4.5:
  ``n_routed_experts``) have a router ``E*H + E`` and ``E + n_shared_experts`` gated MLPs of
  ``moe_intermediate_size`` instead, after ``first_k_dense_replace`` dense layers.
* **KV bytes per token** = ``2 * layers * kv_heads * head_dim * bytes(dtype)`` (K and V of every
  attention layer).
* **Drafters** (``drafter_parameters``), as vLLM 0.32 loads them:

  - ``draft_model``: the full draft model (its own embeddings, LM head and KV cache).
  - ``eagle`` (EAGLE-1, ``vllm/model_executor/models/llama_eagle.py``): ``num_hidden_layers``
    decoder layers (1 in released heads) whose first layer has no ``input_layernorm``, plus
    ``fc: Linear(2H -> H, bias=False)``. ``embed_tokens`` is shared with the target when the
    checkpoint has none (vLLM ties it to the target's), and the LM head is always the target's;
    neither is counted as drafter weight. No final norm is loaded.
  - ``eagle3`` (``llama_eagle3.py``): ``num_hidden_layers`` decoder layers (1 in released heads);
    the first one's q/k/v read ``2H`` (input embedding concatenated with the fused hidden state) and
    it has an extra ``hidden_norm`` (H); ``fc: Linear(3*tH -> H, bias=False)`` fusing three target
    layers (``tH`` = ``target_hidden_size`` if set, plus ``fc_norm`` when ``norm_before_fc``); a
    final norm; its own LM head over ``draft_vocab_size`` (the ``d2t`` mapping is a buffer).
    Embeddings shared with the target unless the checkpoint has them.

  An EAGLE head's KV cache covers its own (1) layer(s) at the target's context length.

**Which accounting gives 1.77x.** For Qwen3-0.6B drafting Qwen3-8B the per-token KV ratio is
``(36 + 28) / 36 = 1.7778`` (147 456 + 114 688 bytes over 147 456 in bf16): it is 1.78 rounded and
1.77 *truncated* to two decimals. No other layer/head accounting from the two configs gives 1.77
(both models have 8 KV heads of dim 128; counting the draft's extra prefill token or vLLM's shared
block pool changes nothing per token), so the paper's number is the same ratio truncated;
:func:`memory_table` reports the exact ratio.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd

from ...core.errors import SpecReproError
from ..run.llm import vllm_reported_memory

#: bytes per element of the dtypes a config or vLLM may name
DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "fp8": 1, "float8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1,
}

DRAFTER_KINDS = ("none", "ngram", "eagle", "eagle3", "draft_model")


def dtype_bytes(dtype: str, config: Mapping[str, Any] | None = None) -> int:
    """Bytes per element; ``"auto"`` takes the config's ``torch_dtype``/``dtype``."""
    name = str(dtype).replace("torch.", "").lower()
    if name == "auto":
        cfg_dtype = (config or {}).get("torch_dtype") or (config or {}).get("dtype")
        if not cfg_dtype:
            raise SpecReproError("dtype 'auto' but the config names no torch_dtype")
        name = str(cfg_dtype).replace("torch.", "").lower()
    if name not in DTYPE_BYTES:
        raise SpecReproError(f"unknown dtype {dtype!r} (known: {', '.join(sorted(DTYPE_BYTES))})")
    return DTYPE_BYTES[name]


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal wrappers keep the language model under ``text_config``."""
    return config.get("text_config", config) if isinstance(config.get("text_config"), Mapping) else config


def _dims(config: Mapping[str, Any]) -> dict:
    c = _text_config(config)
    try:
        H = int(c["hidden_size"])
        L = int(c["num_hidden_layers"])
        nq = int(c["num_attention_heads"])
        V = int(c["vocab_size"])
    except KeyError as exc:
        raise SpecReproError(f"model config lacks {exc.args[0]!r}") from None
    nkv = int(c.get("num_key_value_heads") or nq)
    hd = int(c.get("head_dim") or H // nq)
    I = int(c.get("intermediate_size") or 4 * H)
    return {"H": H, "L": L, "nq": nq, "nkv": nkv, "hd": hd, "I": I, "V": V}


def _model_type(config: Mapping[str, Any]) -> str:
    return str(_text_config(config).get("model_type", "llama")).lower()


def _attention_params(c: Mapping[str, Any], d: dict, in_dim: int | None = None) -> int:
    H, nq, nkv, hd = d["H"], d["nq"], d["nkv"], d["hd"]
    in_dim = H if in_dim is None else in_dim
    n = in_dim * nq * hd + 2 * in_dim * nkv * hd + nq * hd * H
    mt = _model_type(c)
    if mt == "qwen2" or (mt == "glm4_moe" and c.get("attention_bias")):  # q/k/v carry biases, o_proj does not
        n += nq * hd + 2 * nkv * hd
    elif c.get("attention_bias"):
        n += nq * hd + 2 * nkv * hd + H
    if mt.startswith("qwen3"):  # per-head RMSNorm of q and k
        n += 2 * hd
    return n


def _mlp_params(c: Mapping[str, Any], d: dict) -> int:
    n = 3 * d["H"] * d["I"]
    if c.get("mlp_bias"):
        n += 2 * d["I"] + d["H"]
    return n


def count_parameters(config: Mapping[str, Any]) -> dict:
    """Parameter counts of a Llama/Qwen-style causal LM by part (``embed``, ``layers``, ``norm``,
    ``lm_head``, ``total``); the LM head is 0 when tied to the embeddings."""
    c = _text_config(config)
    d = _dims(c)
    layer = _attention_params(c, d) + _mlp_params(c, d) + 2 * d["H"]
    layers = d["L"] * layer
    if c.get("n_routed_experts"):
        # DeepSeek-style MoE (GLM-4.5): the first first_k_dense_replace layers are dense; the others have
        # a router (weight + e_score_correction_bias), routed experts and shared experts of
        # moe_intermediate_size. The MTP layers (num_nextn_predict_layers) are not part of the target.
        E, H, mI = int(c["n_routed_experts"]), d["H"], int(c["moe_intermediate_size"])
        moe = E * H + E + (E + int(c.get("n_shared_experts") or 0)) * 3 * H * mI
        n_moe = max(d["L"] - int(c.get("first_k_dense_replace", 0)), 0)
        layers += n_moe * (moe - _mlp_params(c, d))
    embed = d["V"] * d["H"]
    lm_head = 0 if c.get("tie_word_embeddings", False) else d["V"] * d["H"]
    parts = {"embed": embed, "layers": layers, "norm": d["H"], "lm_head": lm_head}
    parts["total"] = sum(parts.values())
    return parts


def kv_bytes_per_token(config: Mapping[str, Any], dtype: str, layers: int | None = None) -> int:
    """``2 * layers * kv_heads * head_dim * bytes``: K and V of one token in every attention layer."""
    d = _dims(config)
    return 2 * (d["L"] if layers is None else layers) * d["nkv"] * d["hd"] * dtype_bytes(dtype, config)


def model_memory(config_json: Mapping[str, Any], dtype: str) -> dict:
    """Weights and per-token KV cache of a full model from its ``config.json`` dict.

    Returns ``params``, ``weight_bytes``, ``kv_bytes_per_token``, ``layers``, ``kv_heads``,
    ``head_dim``, ``dtype_bytes`` and the parameter parts (``params_embed``, ``params_layers``,
    ``params_norm``, ``params_lm_head``).
    """
    d = _dims(config_json)
    b = dtype_bytes(dtype, config_json)
    parts = count_parameters(config_json)
    out = {
        "params": parts["total"],
        "weight_bytes": parts["total"] * b,
        "kv_bytes_per_token": kv_bytes_per_token(config_json, dtype),
        "layers": d["L"], "kv_heads": d["nkv"], "head_dim": d["hd"], "dtype_bytes": b,
    }
    out.update({f"params_{k}": v for k, v in parts.items() if k != "total"})
    return out


def drafter_parameters(kind: str, drafter_config: Mapping[str, Any] | None,
                       target_config: Mapping[str, Any] | None = None,
                       shares_embeddings: bool = True) -> int:
    """Parameters a drafter adds on top of the target, as vLLM loads it (see the module docstring).

    ``shares_embeddings``: the EAGLE checkpoint has no ``embed_tokens`` of its own, so vLLM uses the
    target's (the released EAGLE/EAGLE-3 Llama heads); set False if it ships its own.
    """
    if kind in ("none", "ngram"):
        return 0
    if drafter_config is None:
        raise SpecReproError(f"drafter kind {kind!r} needs the drafter's config")
    c = _text_config(drafter_config)
    d = _dims(c)
    H = d["H"]
    if kind == "draft_model":
        return count_parameters(c)["total"]
    embed = 0 if shares_embeddings else d["V"] * H
    if kind == "eagle":
        layer = _attention_params(c, d) + _mlp_params(c, d) + 2 * H
        # the first layer has no input_layernorm (EAGLE-1 feeds fc's output straight in)
        return embed + d["L"] * layer - H + 2 * H * H
    if kind == "eagle3":
        tH = int(c.get("target_hidden_size") or (_dims(target_config)["H"] if target_config else H))
        aux = c.get("eagle_aux_hidden_state_layer_ids") or (c.get("eagle_config") or {}).get(
            "eagle_aux_hidden_state_layer_ids") or ()
        n_aux = len(aux) or 3
        first = _attention_params(c, d, in_dim=2 * H) + _mlp_params(c, d) + 3 * H  # + hidden_norm
        rest = (d["L"] - 1) * (_attention_params(c, d) + _mlp_params(c, d) + 2 * H)
        draft_vocab = int(c.get("draft_vocab_size") or d["V"])
        fc = n_aux * tH * H + (n_aux * tH if c.get("norm_before_fc") else 0)
        return embed + first + rest + fc + H + draft_vocab * H
    raise SpecReproError(f"unknown drafter kind {kind!r} (known: {', '.join(DRAFTER_KINDS)})")


def drafter_kv_bytes_per_token(kind: str, drafter_config: Mapping[str, Any] | None, dtype: str) -> int:
    """Per-token KV of a drafter: 0 for n-gram, its own attention layers otherwise."""
    if kind in ("none", "ngram"):
        return 0
    if drafter_config is None:
        raise SpecReproError(f"drafter kind {kind!r} needs the drafter's config")
    return kv_bytes_per_token(drafter_config, dtype)


MEMORY_COLUMNS = (
    "target", "drafter", "kind", "dtype",
    "target_params", "drafter_params", "target_weight_bytes", "drafter_weight_bytes", "weight_ratio",
    "target_kv_bytes_per_token", "drafter_kv_bytes_per_token", "kv_ratio_per_token",
)


def memory_table(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per (target, drafter) pair.

    Each input row: ``target`` (name), ``target_config`` (config dict), ``kind`` (none / ngram /
    eagle / eagle3 / draft_model), ``drafter`` (name, optional), ``drafter_config`` (dict, not for
    n-gram), ``dtype`` (default bfloat16), optional ``shares_embeddings`` (EAGLE, default True).

    Columns: :data:`MEMORY_COLUMNS`; ``weight_ratio`` = (target + drafter weights) / target weights,
    ``kv_ratio_per_token`` = (target + drafter KV bytes per token) / target KV bytes per token.
    """
    out = []
    for r in rows:
        dtype = r.get("dtype", "bfloat16")
        kind = r.get("kind", "none")
        tgt = model_memory(r["target_config"], dtype)
        dcfg = r.get("drafter_config")
        dparams = drafter_parameters(kind, dcfg, r["target_config"], r.get("shares_embeddings", True))
        b = dtype_bytes(dtype, r["target_config"])
        dkv = drafter_kv_bytes_per_token(kind, dcfg, dtype)
        out.append({
            "target": r.get("target", ""), "drafter": r.get("drafter", kind), "kind": kind, "dtype": dtype,
            "target_params": tgt["params"], "drafter_params": dparams,
            "target_weight_bytes": tgt["weight_bytes"], "drafter_weight_bytes": dparams * b,
            "weight_ratio": (tgt["params"] + dparams) / tgt["params"],
            "target_kv_bytes_per_token": tgt["kv_bytes_per_token"], "drafter_kv_bytes_per_token": dkv,
            "kv_ratio_per_token": (tgt["kv_bytes_per_token"] + dkv) / tgt["kv_bytes_per_token"],
        })
    return pd.DataFrame(out, columns=list(MEMORY_COLUMNS))


def compare_with_vllm(llm, config_json: Mapping[str, Any], dtype: str | None = None,
                      drafter_kind: str = "none", drafter_config: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Architecture count next to vLLM's report: rows ``kv_bytes_per_token`` and ``params``
    (target + drafter), columns ``quantity, architecture, vllm, ratio``."""
    rep = vllm_reported_memory(llm)
    dtype = dtype or rep["dtype"]
    kv_dtype = dtype if rep["kv_cache_dtype"] in ("auto", None) else rep["kv_cache_dtype"]
    kv = kv_bytes_per_token(config_json, kv_dtype) + drafter_kv_bytes_per_token(drafter_kind, drafter_config, kv_dtype)
    params = count_parameters(config_json)["total"] + drafter_parameters(drafter_kind, drafter_config, config_json)
    rows = [("kv_bytes_per_token", kv, rep["kv_bytes_per_token"]), ("params", params, rep["params"])]
    return pd.DataFrame(
        [{"quantity": q, "architecture": a, "vllm": v, "ratio": (v / a if v is not None and a else None)}
         for q, a, v in rows],
        columns=["quantity", "architecture", "vllm", "ratio"],
    )
