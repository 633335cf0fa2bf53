"""Tiny random-weight models the pipeline builds itself for the CPU run (Hugging Face format).

Kinds (``build_model(kind, out_dir, ...)``):

``tiny-llama``
    A ``LlamaForCausalLM``. Without ``target_dir`` it is a target: a byte-level BPE tokenizer is
    trained on the prompt files' text (``corpus``) with Llama-3-style special tokens and chat
    template. With ``target_dir`` it is a draft model: it reuses the target's tokenizer files and
    vocabulary, and (when the widths match) starts as a *layer-skip* copy of the target (the
    target's embeddings, first layers, final norm and LM head), so that its greedy proposals agree
    with the target some of the time but not always.
``tiny-eagle``
    An EAGLE-1 head for ``target_dir`` (``fc [H, 2H]``, ``embed_tokens``, one decoder layer without
    ``input_layernorm``; the LM head is the target's), loaded by vLLM for method ``eagle``.
``tiny-eagle3``
    An EAGLE-3 head for ``target_dir`` (architecture ``LlamaForCausalLMEagle3``; ``fc [H, 3H]`` over
    three (two for a one-layer target) auxiliary hidden states of the target, ``midlayer.*`` with a ``2H``-wide attention input,
    ``norm``, ``lm_head``), loaded by vLLM for method ``eagle3``. The target's layers the head reads
    are in ``eagle_config.eagle_aux_hidden_state_layer_ids`` of its config.
``copy-of-target``
    A byte copy of ``target_dir`` (a draft identical to the target: every draft token is accepted).

Weights are float32, drawn from a seeded NumPy generator in a fixed order, so the same seed and
corpus give byte-identical files. The init scale is large (std 0.2 for matrices) so that logits are
peaked and greedy outputs vary with the context. Drafters are built to agree with the target part
of the time: a tiny-llama drafter is the target's first layers plus noise; the EAGLE heads' decoder
layer is the target's first layer plus noise, fed (EAGLE-1) the token embedding through ``fc``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ...core.io import SpecReproError, atomic_dir, dumps_json, write_json

from .families import EMBED_STD, INIT_STD, SIZE_KEYS, STANDINS, _sizes as standin_sizes, build_standin, random_weights

#: the generic tiny kinds (tests, the self-draft check) and the stand-ins shaped like the paper's models
KINDS = ("tiny-llama", "tiny-eagle", "tiny-eagle3", "copy-of-target") + tuple(STANDINS)

BOS = "<|begin_of_text|>"
EOS = "<|eot_id|>"
SPECIAL_TOKENS = (BOS, EOS, "<|start_header_id|>", "<|end_header_id|>")

#: Llama-3-style chat template (no system-prompt defaults, no tools).
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)

DEFAULT_SIZES = {
    "hidden_size": 128,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 2,
    "intermediate_size": 256,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
}
ROPE_THETA = 10000.0
RMS_EPS = 1e-5
#: EAGLE heads: weight of the random part next to the layer-skip part (see _eagle_weights)
EAGLE_MIX = 0.03
#: draft models: relative size of the random perturbation of the copied target layers
DRAFT_NOISE = 0.1
#: targets: scale of the output projections of layers after the first
LATER_LAYER_SCALE = 0.3


# --- corpus and tokenizer ----------------------------------------------------------------------


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def corpus_texts(files: Sequence[str | os.PathLike]) -> list[str]:
    """Every string value (nested ones too) of every JSON record of the given JSONL files, in order."""
    texts: list[str] = []
    for f in files:
        path = Path(f)
        if not path.exists():
            raise SpecReproError(f"{path}: corpus file not found")
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecReproError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            texts.extend(_strings(obj))
    return texts


def train_tokenizer(texts: Sequence[str], vocab_size: int):
    """A byte-level BPE ``tokenizers.Tokenizer`` with the Llama-3 special tokens (ids 0-3)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    # Training on a single thread keeps the merge order independent of scheduling.
    old = os.environ.get("RAYON_NUM_THREADS")
    os.environ["RAYON_NUM_THREADS"] = "1"
    try:
        tok.train_from_iterator(list(texts), trainer=trainer)
    finally:
        if old is None:
            os.environ.pop("RAYON_NUM_THREADS", None)
        else:
            os.environ["RAYON_NUM_THREADS"] = old
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tok


def _tokenizer_config(tok, max_len: int) -> dict:
    added = {
        str(tok.token_to_id(t)): {
            "content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    return {
        "added_tokens_decoder": added,
        "bos_token": BOS,
        "eos_token": EOS,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": max_len,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def write_tokenizer(out: Path, texts: Sequence[str], vocab_size: int, max_len: int) -> int:
    """Train and write tokenizer.json, tokenizer_config.json, special_tokens_map.json; return the vocab size."""
    if not texts:
        raise SpecReproError("tiny-llama target: the corpus is empty (give --corpus prompt files)")
    tok = train_tokenizer(texts, vocab_size)
    (out / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    (out / "tokenizer_config.json").write_text(dumps_json(_tokenizer_config(tok, max_len)), encoding="utf-8")
    (out / "special_tokens_map.json").write_text(dumps_json({"bos_token": BOS, "eos_token": EOS}), encoding="utf-8")
    return tok.get_vocab_size()


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


# --- configs and weights -----------------------------------------------------------------------


def _sizes(overrides: Mapping[str, Any], num_layers_default: int) -> dict:
    unknown = sorted(set(overrides) - set(DEFAULT_SIZES))
    if unknown:
        raise SpecReproError(f"unknown size {unknown[0]!r}; known: {', '.join(DEFAULT_SIZES)}")
    s = dict(DEFAULT_SIZES, num_layers=num_layers_default)
    for k, v in overrides.items():
        try:
            s[k] = int(v)
        except (TypeError, ValueError):
            raise SpecReproError(f"size {k}={v!r}: expected an integer") from None
        if s[k] < 1:
            raise SpecReproError(f"size {k}={v!r}: must be positive")
    if s["hidden_size"] % s["num_heads"]:
        raise SpecReproError(f"hidden_size {s['hidden_size']} is not a multiple of num_heads {s['num_heads']}")
    if s["num_heads"] % s["num_kv_heads"]:
        raise SpecReproError(f"num_heads {s['num_heads']} is not a multiple of num_kv_heads {s['num_kv_heads']}")
    return s


def llama_config(s: Mapping[str, int], vocab_size: int, bos_id: int, eos_id: int, **extra: Any) -> dict:
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "head_dim": s["hidden_size"] // s["num_heads"],
        "hidden_act": "silu",
        "hidden_size": s["hidden_size"],
        "initializer_range": INIT_STD,
        "intermediate_size": s["intermediate_size"],
        "max_position_embeddings": s["max_position_embeddings"],
        "mlp_bias": False,
        "num_attention_heads": s["num_heads"],
        "num_hidden_layers": s["num_layers"],
        "num_key_value_heads": s["num_kv_heads"],
        "pretraining_tp": 1,
        "rms_norm_eps": RMS_EPS,
        "rope_scaling": None,
        "rope_theta": ROPE_THETA,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    cfg.update(extra)
    return cfg


def _layer_shapes(prefix: str, s: Mapping[str, int], attn_in: int | None = None, input_norm: bool = True,
                  hidden_norm: bool = False) -> dict[str, tuple[int, ...]]:
    h, hd = s["hidden_size"], s["hidden_size"] // s["num_heads"]
    a = attn_in or h
    shapes = {
        f"{prefix}self_attn.q_proj.weight": (s["num_heads"] * hd, a),
        f"{prefix}self_attn.k_proj.weight": (s["num_kv_heads"] * hd, a),
        f"{prefix}self_attn.v_proj.weight": (s["num_kv_heads"] * hd, a),
        f"{prefix}self_attn.o_proj.weight": (h, s["num_heads"] * hd),
        f"{prefix}mlp.gate_proj.weight": (s["intermediate_size"], h),
        f"{prefix}mlp.up_proj.weight": (s["intermediate_size"], h),
        f"{prefix}mlp.down_proj.weight": (h, s["intermediate_size"]),
        f"{prefix}post_attention_layernorm.weight": (h,),
    }
    if input_norm:
        shapes[f"{prefix}input_layernorm.weight"] = (h,)
    if hidden_norm:
        shapes[f"{prefix}hidden_norm.weight"] = (h,)
    return shapes


def _save(out: Path, tensors: Mapping[str, np.ndarray], config: dict) -> None:
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(tensors[k]) for k in sorted(tensors)}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    os.chmod(out / "model.safetensors", 0o644)
    (out / "config.json").write_text(dumps_json(config), encoding="utf-8")
    gen = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"], "do_sample": False}
    (out / "generation_config.json").write_text(dumps_json(gen), encoding="utf-8")


def load_weights(model_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


def _target(target_dir: str | os.PathLike | None, kind: str) -> tuple[Path, dict]:
    if target_dir is None:
        raise SpecReproError(f"{kind}: needs the target model (--target-manifest)")
    target = Path(target_dir)
    if not (target / "config.json").exists():
        raise SpecReproError(f"{target}: no config.json (not a model directory)")
    return target, json.loads((target / "config.json").read_text(encoding="utf-8"))


def _target_sizes(tcfg: Mapping[str, Any]) -> dict:
    return {
        "hidden_size": tcfg["hidden_size"], "num_heads": tcfg["num_attention_heads"],
        "num_kv_heads": tcfg["num_key_value_heads"], "intermediate_size": tcfg["intermediate_size"],
        "vocab_size": tcfg["vocab_size"], "max_position_embeddings": tcfg["max_position_embeddings"],
    }


def _copy_tokenizer(target: Path, out: Path) -> None:
    for name in TOKENIZER_FILES:
        if (target / name).exists():
            shutil.copyfile(target / name, out / name)


def _build_llama(out: Path, seed: int, corpus: Sequence[str | os.PathLike], target_dir, sizes: Mapping[str, Any]) -> None:
    if target_dir is None:
        s = _sizes(sizes, DEFAULT_SIZES["num_layers"])
        vocab = write_tokenizer(out, corpus_texts(corpus), s["vocab_size"], s["max_position_embeddings"])
        bos, eos = SPECIAL_TOKENS.index(BOS), SPECIAL_TOKENS.index(EOS)
        base: dict[str, np.ndarray] = {}
    else:
        target, tcfg = _target(target_dir, "tiny-llama drafter")
        s = _sizes({**_target_sizes(tcfg), **sizes}, 1)
        vocab, bos, eos = tcfg["vocab_size"], tcfg["bos_token_id"], tcfg["eos_token_id"]
        if s["vocab_size"] != vocab:
            raise SpecReproError(f"a draft model must use the target's vocabulary ({vocab} tokens), not {s['vocab_size']}")
        _copy_tokenizer(target, out)
        base = load_weights(target)
    s["vocab_size"] = vocab
    shapes = {"model.embed_tokens.weight": (vocab, s["hidden_size"]), "model.norm.weight": (s["hidden_size"],),
              "lm_head.weight": (vocab, s["hidden_size"])}
    for i in range(s["num_layers"]):
        shapes.update(_layer_shapes(f"model.layers.{i}.", s))
    tensors = random_weights(shapes, seed)
    if target_dir is None:
        # later layers make smaller updates, so that a layer-skip draft agrees with the target often
        for name in tensors:
            if name.startswith("model.layers.") and not name.startswith("model.layers.0.") and (
                    name.endswith("o_proj.weight") or name.endswith("down_proj.weight")):
                tensors[name] = (tensors[name] * LATER_LAYER_SCALE).astype(np.float32)
    # A drafter starts as the target with its later layers skipped, where the shapes allow it.
    for name, shape in shapes.items():
        if name in base and tuple(base[name].shape) == shape:
            noise = 0 if name.endswith("norm.weight") or "embed_tokens" in name else DRAFT_NOISE * tensors[name]
            tensors[name] = (base[name] + noise).astype(np.float32)
    _save(out, tensors, llama_config(s, vocab, bos, eos))


def _eagle_weights(shapes: Mapping[str, tuple[int, ...]], seed: int, base: Mapping[str, np.ndarray],
                   h: int, eagle3: bool) -> dict[str, np.ndarray]:
    """Random head weights mixed with the target's layer 0, so that the head's guesses are right
    some of the time: ``fc`` mostly passes the token embedding through (EAGLE-1) and the decoder
    layer is the target's first layer plus a small random part."""
    rng_w = random_weights(shapes, seed)
    out = dict(rng_w)
    prefix = "midlayer." if eagle3 else "layers.0."
    for name, shape in shapes.items():
        if name.startswith(prefix) and not name.endswith("norm.weight"):
            src = base.get("model.layers.0." + name[len(prefix):])
            if src is None:
                continue
            if src.shape == shape:
                out[name] = (src + EAGLE_MIX * rng_w[name]).astype(np.float32)
            elif eagle3 and shape[1] == 2 * src.shape[1]:
                # attention input is [input_layernorm(embedding), hidden_norm(fc(aux))]
                mixed = EAGLE_MIX * rng_w[name]
                mixed[:, : src.shape[1]] += src
                out[name] = mixed.astype(np.float32)
    if eagle3:
        out["fc.weight"] = (EAGLE_MIX * rng_w["fc.weight"]).astype(np.float32)
    else:
        # the token embedding, scaled to RMS 1 (what the target's input_layernorm would give)
        # (the head's own hidden state, fed back while drafting, is large: keep its part small)
        fc = EAGLE_MIX * rng_w["fc.weight"]
        fc[:, h:] *= 0.1
        fc[:, :h] += np.eye(h, dtype=np.float32) / EMBED_STD
        out["fc.weight"] = fc.astype(np.float32)
    out["embed_tokens.weight"] = base["model.embed_tokens.weight"].astype(np.float32)
    if "lm_head.weight" in shapes:
        out["lm_head.weight"] = base["lm_head.weight"].astype(np.float32)
    return out


def aux_layer_ids(num_target_layers: int) -> list[int]:
    """Target hidden states an EAGLE-3 head reads (vLLM's numbering: 0 = the embeddings, j = the
    residual stream after layer j-1). vLLM's default ``(2, L // 2, L - 3)`` needs L >= 4; the
    tiny targets use three spread-out states instead."""
    L = num_target_layers
    if L >= 6:
        return [2, L // 2, L - 3]
    return sorted({0, (L + 1) // 2, L})


def _build_eagle(out: Path, seed: int, target_dir, sizes: Mapping[str, Any], eagle3: bool) -> None:
    kind = "tiny-eagle3" if eagle3 else "tiny-eagle"
    target, tcfg = _target(target_dir, kind)
    s = _sizes({**_target_sizes(tcfg), **sizes}, 1)
    if s["hidden_size"] != tcfg["hidden_size"] or s["vocab_size"] != tcfg["vocab_size"]:
        raise SpecReproError(f"{kind}: hidden_size and vocab_size must be the target's")
    if s["num_layers"] != 1:
        raise SpecReproError(f"{kind}: the head has exactly one decoder layer (num_layers=1)")
    h, vocab = s["hidden_size"], s["vocab_size"]
    base = load_weights(target)
    _copy_tokenizer(target, out)
    if eagle3:
        ids = aux_layer_ids(tcfg["num_hidden_layers"])
        shapes = {"fc.weight": (h, len(ids) * h), "embed_tokens.weight": (vocab, h), "norm.weight": (h,),
                  "lm_head.weight": (vocab, h)}
        shapes.update(_layer_shapes("midlayer.", s, attn_in=2 * h, hidden_norm=True))
        cfg = llama_config(
            s, vocab, tcfg["bos_token_id"], tcfg["eos_token_id"], architectures=["LlamaForCausalLMEagle3"],
            draft_vocab_size=vocab, target_hidden_size=h,
            eagle_config={"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
        )
    else:
        shapes = {"fc.weight": (h, 2 * h), "embed_tokens.weight": (vocab, h)}
        shapes.update(_layer_shapes("layers.0.", s, input_norm=False))
        cfg = llama_config(s, vocab, tcfg["bos_token_id"], tcfg["eos_token_id"])
    _save(out, _eagle_weights(shapes, seed, base, h, eagle3), cfg)


def build_model(kind: str, out_dir: str | os.PathLike, *, seed: int = 0, corpus: Sequence[str | os.PathLike] = (),
                target_dir: str | os.PathLike | None = None, **sizes: Any) -> None:
    """Build a model of ``kind`` (see the module docstring) into ``out_dir`` (created; must not exist or be empty)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise SpecReproError(f"{out}: not empty")
    if kind in STANDINS:
        texts = corpus_texts(corpus)
        build_standin(kind, out, seed=seed, texts=texts, target_dir=target_dir, sizes=sizes)
    elif kind == "tiny-llama":
        _build_llama(out, seed, corpus, target_dir, sizes)
    elif kind in ("tiny-eagle", "tiny-eagle3"):
        _build_eagle(out, seed, target_dir, sizes, kind == "tiny-eagle3")
    elif kind == "copy-of-target":
        target, _ = _target(target_dir, kind)
        if sizes:
            raise SpecReproError("copy-of-target takes no sizes")
        for p in sorted(target.rglob("*")):
            if p.is_file() and ".cache" not in p.relative_to(target).parts:
                dest = out / p.relative_to(target)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, dest)
    else:
        raise SpecReproError(f"unknown model kind {kind!r}; known: {', '.join(KINDS)}")


# --- CLI ---------------------------------------------------------------------------------------


def _parse_sizes(items: Sequence[str], kind: str = "tiny-llama") -> dict[str, int]:
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecReproError(f"--size {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    if kind in STANDINS:
        standin_sizes(STANDINS[kind], out)
    else:
        _sizes(out, 1)  # validates names and values
    return {k: int(v) for k, v in out.items()}


def run(args: argparse.Namespace) -> None:
    from ...core.hub import manifest
    from ...core.io import read_json

    sizes = _parse_sizes(args.size, args.kind)
    output = Path(args.output)
    final = output.parent / "model"
    target_dir = None
    if args.target_manifest:
        tm = read_json(args.target_manifest)
        if not isinstance(tm, dict) or "path" not in tm:
            raise SpecReproError(f"{args.target_manifest}: no 'path' field (not a model manifest)")
        target_dir = tm["path"]
    with atomic_dir(final) as tmp:
        build_model(args.kind, tmp, seed=args.seed, corpus=args.corpus or (), target_dir=target_dir, **sizes)
    kind = "drafter" if "/drafters/" in args.name else "model"
    build = {"kind": args.kind, "seed": args.seed, "corpus": [str(c) for c in args.corpus or ()],
             "target_manifest": args.target_manifest, "target_path": target_dir, "sizes": sizes}
    if args.kind in STANDINS:
        build["shaped_like"] = STANDINS[args.kind].shaped_like
    write_json(output, manifest(args.name, kind, "build", final, build=build))


def add_cli(sub) -> None:
    p = sub.add_parser("build-model", help="build a tiny random-weight model (CPU run) and write its manifest")
    p.add_argument("--name", required=True, help="model name, e.g. tiny/target or tiny/drafters/eagle")
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus", nargs="*", default=[], help="JSONL prompt files the tokenizer is trained on")
    p.add_argument("--target-manifest", help="manifest.json of the target model (drafters)")
    p.add_argument("--size", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help=f"override a size ({', '.join(DEFAULT_SIZES)}; stand-ins: {', '.join(SIZE_KEYS)}); repeatable")
    p.add_argument("-o", "--output", required=True, help="resources/models/<name>/manifest.json (model in ./model/)")
    p.set_defaults(func=run)
