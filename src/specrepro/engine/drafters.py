"""Drafters trained on CPU from the target's own generations (the CPU run's real model, SmolLM2).

Three steps, three verbs, each a rule:

``train-generate``
    The target's greedy outputs (vLLM, one batched ``generate``) on the training prompts (never the
    benchmark's), a seeded split of them held out for evaluation (stratified by workload).
``train-states``
    The target's final, normed hidden state at every position of prompt + output, computed by vLLM
    itself (pooling runner, ``token_embed`` task, ``ALL`` pooling): the hidden states vLLM hands an
    EAGLE-1 head while drafting.
``train-drafter``
    ``eagle``: an EAGLE-1 head in vLLM's Llama format (``fc [H, 2H]`` without bias, one decoder layer
    without ``input_layernorm``; the target's embeddings and LM head are shared, not stored). At
    position ``j`` it reads token ``s[j+1]`` and the target's hidden state ``h[j]``; it is trained
    to output ``h[j+1]`` (smooth L1, as EAGLE) and, through the target's LM head, the token
    ``s[j+2]`` (cross-entropy on a seeded sample of output positions), with Gaussian noise on the
    input hidden states (drafting feeds the head its own, imperfect outputs). Its decoder layer
    starts as a copy of the target's last layer with its output projections (``o_proj``,
    ``down_proj``) zeroed and ``fc`` as ``[0, I]`` plus small noise, so that it starts by passing the
    target's hidden state through (guessing the token just verified again): the *untrained head* is
    exactly that start.
    ``draft_model``: a shallow copy of the target (the layers named in ``layers``, the final norm,
    the tied embeddings) distilled on the target's outputs: cross-entropy on the target's greedy
    tokens at output positions plus the squared distance of its final hidden state to the target's
    at every position; embeddings frozen (tied: the LM head stays the target's).

Training is float32 on the host with a fixed seed (``torch.manual_seed``, one thread order), so
the same inputs give the same weights. Before and after training the held-out prompts' acceptance
length at ``k`` = 3 is computed with the trace code (``specrepro.engine.traces``: vLLM's greedy
acceptance rule, checked against vLLM's counters in the tests) and stored, with the training time
and losses, in the drafter's manifest under ``training``; the benchmark then measures the trained
drafter in vLLM (its counters) on the benchmark prompts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..io import SpecReproError, atomic_path, dumps_json, read_json, read_parquet, write_json, write_parquet

KINDS = ("eagle", "draft_model")
EVAL_K = 3


# --- training data (vLLM) ----------------------------------------------------------------------


def read_train_prompts(path: str | os.PathLike) -> list[dict]:
    """Records ``{"id", "workload", "prompt"}`` of a JSONL file (one line each)."""
    p = Path(path)
    if not p.is_file():
        raise SpecReproError(f"{p}: training prompts file not found")
    rows = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecReproError(f"{p}:{n}: not valid JSON ({exc.msg})") from None
        if not r.get("prompt") or not r.get("id"):
            raise SpecReproError(f"{p}:{n}: needs 'id' and 'prompt'")
        rows.append({"id": str(r["id"]), "workload": str(r.get("workload") or "all"), "prompt": str(r["prompt"])})
    if len(rows) < 4:
        raise SpecReproError(f"{p}: {len(rows)} prompts; at least 4 are needed (some are held out)")
    return rows


def heldout_split(workloads: Sequence[str], fraction: float, seed: int) -> list[str]:
    """``train``/``heldout`` per record: ``fraction`` of each workload (at least one) held out, seeded."""
    rng = random.Random(seed)
    split = ["train"] * len(workloads)
    for w in sorted(set(workloads)):
        idx = [i for i, x in enumerate(workloads) if x == w]
        n = max(1, round(fraction * len(idx))) if len(idx) > 1 else 0
        for i in rng.sample(idx, n):
            split[i] = "heldout"
    return split


def _engine_env(env: Mapping[str, str]) -> None:
    for k, v in env.items():
        os.environ[str(k)] = str(v)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def generate_train_data(target_dir: str, prompts: Sequence[Mapping[str, str]], *, max_tokens: int, engine: Mapping[str, Any],
                        heldout: float, seed: int) -> tuple[pd.DataFrame, float]:
    """The target's greedy outputs on every prompt (chat template on), and the wall time of generating them."""
    from ..prompts import chat_tokenizer
    from .args import import_vllm

    _engine_env(engine.get("env") or {})
    encode = chat_tokenizer(target_dir, thinking=False)
    ids = [encode(r["prompt"]) for r in prompts]
    vllm = import_vllm()
    llm = vllm.LLM(model=target_dir, tokenizer=target_dir, dtype=engine.get("dtype", "bfloat16"), seed=int(engine.get("seed", 42)),
                   enforce_eager=bool(engine.get("enforce_eager", True)), enable_prefix_caching=False,
                   gpu_memory_utilization=float(engine.get("gpu_memory_utilization", 0.3)))
    sp = vllm.SamplingParams(temperature=0, max_tokens=int(max_tokens))
    t0 = time.perf_counter()
    outs = llm.generate([vllm.TokensPrompt(prompt_token_ids=i) for i in ids], sp, use_tqdm=False)
    wall = time.perf_counter() - t0
    df = pd.DataFrame({
        "request_id": [r["id"] for r in prompts], "workload": [r["workload"] for r in prompts],
        "split": heldout_split([r["workload"] for r in prompts], heldout, seed),
        "prompt_token_ids": ids, "output_token_ids": [[int(t) for t in o.outputs[0].token_ids] for o in outs],
        "output_text": [o.outputs[0].text for o in outs],
    })
    return df, wall


def sequences(df: pd.DataFrame) -> list[np.ndarray]:
    return [np.concatenate([np.asarray(p, np.int64), np.asarray(o, np.int64)])
            for p, o in zip(df["prompt_token_ids"], df["output_token_ids"])]


def target_states(target_dir: str, seqs: Sequence[np.ndarray], engine: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    """``[sum of lengths, H]`` float32: the target's final normed hidden state at every position
    (vLLM pooling runner, ALL pooling, no normalisation), sequences concatenated in order."""
    from .args import import_vllm

    _engine_env(engine.get("env") or {})
    vllm = import_vllm()
    from vllm.config import PoolerConfig

    llm = vllm.LLM(model=target_dir, tokenizer=target_dir, runner="pooling", convert="embed",
                   dtype=engine.get("dtype", "bfloat16"), seed=int(engine.get("seed", 42)),
                   enforce_eager=bool(engine.get("enforce_eager", True)), enable_prefix_caching=False,
                   gpu_memory_utilization=float(engine.get("gpu_memory_utilization", 0.3)),
                   pooler_config=PoolerConfig(pooling_type="ALL", task="token_embed", use_activation=False))
    t0 = time.perf_counter()
    outs = llm.encode([vllm.TokensPrompt(prompt_token_ids=[int(t) for t in s]) for s in seqs],
                      pooling_task="token_embed", use_tqdm=False)
    wall = time.perf_counter() - t0
    states = []
    for s, o in zip(seqs, outs):
        h = o.outputs.data.float().numpy()
        if h.shape[0] != len(s):
            raise SpecReproError(f"vLLM returned {h.shape[0]} hidden states for a sequence of {len(s)} tokens")
        states.append(h.astype(np.float32))
    return np.concatenate(states, 0), wall


def split_states(states: np.ndarray, seqs: Sequence[np.ndarray]) -> list[np.ndarray]:
    lens = [len(s) for s in seqs]
    if states.shape[0] != sum(lens):
        raise SpecReproError(f"hidden states have {states.shape[0]} rows, the sequences {sum(lens)} tokens: rerun train-states")
    return np.split(states, np.cumsum(lens)[:-1])


# --- modules -----------------------------------------------------------------------------------


def _hf_config(target_cfg: Mapping[str, Any], num_layers: int):
    from transformers import LlamaConfig

    cfg = {k: v for k, v in target_cfg.items() if k not in ("architectures", "torch_dtype", "dtype")}
    cfg["num_hidden_layers"] = num_layers
    c = LlamaConfig(**cfg)
    c._attn_implementation = "sdpa"
    return c


def _rotary(cfg):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    return LlamaRotaryEmbedding(cfg)


class _Torch:
    """Lazy torch import for the module classes (analysis code never imports torch)."""

    @staticmethod
    def modules():
        import torch
        from torch import nn
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm

        class EagleHead(nn.Module):
            """vLLM's ``llama_eagle.py`` head: fc(cat(embed(token), hidden)) → one decoder layer (no input norm)."""

            def __init__(self, cfg, embed):
                super().__init__()
                h = cfg.hidden_size
                self.fc = nn.Linear(2 * h, h, bias=False)
                self.layer = LlamaDecoderLayer(cfg, layer_idx=0)
                self.layer.input_layernorm = nn.Identity()
                self.rotary = _rotary(cfg)
                self.register_buffer("embed", embed, persistent=False)

            def forward(self, next_ids, hidden):
                x = self.fc(torch.cat([self.embed[next_ids], hidden], -1))[None]
                pos = torch.arange(x.shape[1])[None]
                return self.layer(x, position_ids=pos, position_embeddings=self.rotary(x, pos))[0]

        class ShallowLlama(nn.Module):
            """A Llama with the target's embeddings (frozen, tied) and a subset of its layers."""

            def __init__(self, cfg, embed):
                super().__init__()
                self.layers = nn.ModuleList([LlamaDecoderLayer(cfg, layer_idx=i) for i in range(cfg.num_hidden_layers)])
                self.norm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
                self.rotary = _rotary(cfg)
                self.register_buffer("embed", embed, persistent=False)

            def forward(self, ids):
                x = self.embed[ids][None]
                pos = torch.arange(x.shape[1])[None]
                pe = self.rotary(x, pos)
                for layer in self.layers:
                    x = layer(x, position_ids=pos, position_embeddings=pe)
                return self.norm(x)[0]

        return EagleHead, ShallowLlama


def _layer_weights(target_w: Mapping[str, Any], src: int, prefix: str, input_norm: bool = True) -> dict:
    names = ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
             "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "post_attention_layernorm.weight"]
    if input_norm:
        names.append("input_layernorm.weight")
    return {prefix + n: target_w[f"model.layers.{src}.{n}"] for n in names}


def _load_target(target_dir: str):
    import torch
    from safetensors.torch import load_file

    d = Path(target_dir)
    cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    w = {}
    for f in sorted(d.glob("*.safetensors")):
        w.update(load_file(str(f)))
    w = {k: v.to(torch.float32) for k, v in w.items()}
    if "lm_head.weight" not in w:
        w["lm_head.weight"] = w["model.embed_tokens.weight"]
    return cfg, w


# --- training ----------------------------------------------------------------------------------


def _positions(P: int, N: int) -> tuple[int, int]:
    return P - 1, N - 2  # output region of the head's inputs (position j predicts s[j+2] via h[j+1])


def train_eagle(target_dir: str, df: pd.DataFrame, states: Sequence[np.ndarray], *, seed: int, epochs: int, lr: float,
                noise: float = 0.2, ce_weight: float = 0.1, ce_positions: int = 16, log=None) -> tuple[Any, Any, dict]:
    """(untrained head, trained head, training record) for the rows of ``df`` with split ``train``."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    cfg_d, w = _load_target(target_dir)
    cfg = _hf_config(cfg_d, 1)
    EagleHead, _ = _Torch.modules()
    head = EagleHead(cfg, w["model.embed_tokens.weight"])
    last = cfg_d["num_hidden_layers"] - 1
    sd = {("layer." + k): v.clone() for k, v in _layer_weights(w, last, "", input_norm=False).items()}
    # the layer's outputs start at zero, so the untrained head passes h[j] through (guesses s[j+1] again)
    for k in ("layer.self_attn.o_proj.weight", "layer.mlp.down_proj.weight"):
        sd[k] = torch.zeros_like(sd[k])
    h = cfg.hidden_size
    fc = torch.randn(h, 2 * h) * 0.01
    fc[:, h:] += torch.eye(h)
    sd["fc.weight"] = fc
    missing, unexpected = head.load_state_dict(sd, strict=False)
    if unexpected or [m for m in missing if not m.startswith("rotary")]:
        raise SpecReproError(f"EAGLE head init: missing {missing}, unexpected {unexpected}")
    untrained = {k: v.clone() for k, v in head.state_dict().items()}
    lm = w["lm_head.weight"]
    seqs = sequences(df)
    train = [i for i, s in enumerate(df["split"]) if s == "train"]
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    steps_total = epochs * len(train)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.05, 1 - s / max(1, steps_total)))
    rng = np.random.default_rng(seed)
    losses = []
    t0 = time.perf_counter()
    scale = float(np.sqrt(np.mean([np.mean(states[i] ** 2) for i in train])))
    for ep in range(epochs):
        order = rng.permutation(train)
        ep_loss = []
        for i in order:
            s = torch.as_tensor(seqs[i])
            hs = torch.as_tensor(states[i])
            P = len(df["prompt_token_ids"].iloc[i])
            N = s.numel()
            if N < 3:
                continue
            inp_h = hs[: N - 2] + noise * scale * torch.randn(N - 2, h)
            f = head(s[1: N - 1], inp_h)  # position j = 0..N-3
            reg = F.smooth_l1_loss(f, hs[1: N - 1])
            lo, hi = _positions(P, N)
            cand = np.arange(max(0, lo), hi)
            pick = torch.as_tensor(rng.choice(cand, size=min(ce_positions, cand.size), replace=False)) if cand.size else None
            loss = reg
            if pick is not None:
                logits = F.linear(f[pick], lm)
                loss = loss + ce_weight * F.cross_entropy(logits, s[pick + 2])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            sched.step()
            ep_loss.append(loss.item())
        losses.append(float(np.mean(ep_loss)) if ep_loss else None)
        if log:
            print(f"eagle epoch {ep + 1}/{epochs}: loss {losses[-1]:.4f} ({time.perf_counter() - t0:.1f} s)", file=log, flush=True)
    record = {"train_s": time.perf_counter() - t0, "epochs": epochs, "lr": lr, "noise": noise, "ce_weight": ce_weight,
              "ce_positions": ce_positions, "epoch_loss": losses, "train_sequences": len(train),
              "init": f"decoder layer = target layer {last} with o_proj, down_proj = 0; fc = [0, I] + N(0, 0.01)"}
    trained = {k: v.detach().clone() for k, v in head.state_dict().items()}
    return untrained, trained, record


def train_draft(target_dir: str, df: pd.DataFrame, states: Sequence[np.ndarray], *, layers: Sequence[int], seed: int,
                epochs: int, lr: float, ce_positions: int = 16, hidden_weight: float = 1.0, log=None) -> tuple[Any, Any, dict]:
    """(untrained, trained, record) of a shallow copy of the target with ``layers``, distilled on ``train`` rows."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    cfg_d, w = _load_target(target_dir)
    L = cfg_d["num_hidden_layers"]
    bad = [i for i in layers if not 0 <= i < L]
    if bad or not layers:
        raise SpecReproError(f"draft layers {list(layers)}: each must be a layer of the target (0..{L - 1})")
    cfg = _hf_config(cfg_d, len(layers))
    _, ShallowLlama = _Torch.modules()
    model = ShallowLlama(cfg, w["model.embed_tokens.weight"])
    sd = {"norm.weight": w["model.norm.weight"].clone()}
    for j, src in enumerate(layers):
        sd.update({k: v.clone() for k, v in _layer_weights(w, src, f"layers.{j}.").items()})
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or [m for m in missing if not m.startswith("rotary")]:
        raise SpecReproError(f"draft init: missing {missing}, unexpected {unexpected}")
    untrained = {k: v.clone() for k, v in model.state_dict().items()}
    lm = w["lm_head.weight"]
    seqs = sequences(df)
    train = [i for i, s in enumerate(df["split"]) if s == "train"]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    steps_total = epochs * len(train)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.05, 1 - s / max(1, steps_total)))
    rng = np.random.default_rng(seed)
    losses = []
    t0 = time.perf_counter()
    for ep in range(epochs):
        ep_loss = []
        for i in rng.permutation(train):
            s = torch.as_tensor(seqs[i])
            hs = torch.as_tensor(states[i])
            P, N = len(df["prompt_token_ids"].iloc[i]), s.numel()
            if N < 2:
                continue
            hd = model(s[: N - 1])  # predicts s[1:]
            loss = hidden_weight * F.mse_loss(hd, hs[: N - 1])
            cand = np.arange(P - 1, N - 1)
            if cand.size:
                pick = torch.as_tensor(rng.choice(cand, size=min(ce_positions, cand.size), replace=False))
                loss = loss + F.cross_entropy(F.linear(hd[pick], lm), s[pick + 1])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            ep_loss.append(loss.item())
        losses.append(float(np.mean(ep_loss)) if ep_loss else None)
        if log:
            print(f"draft epoch {ep + 1}/{epochs}: loss {losses[-1]:.4f} ({time.perf_counter() - t0:.1f} s)", file=log, flush=True)
    record = {"train_s": time.perf_counter() - t0, "epochs": epochs, "lr": lr, "ce_positions": ce_positions,
              "hidden_weight": hidden_weight, "epoch_loss": losses, "train_sequences": len(train),
              "init": f"target layers {list(layers)}, final norm, tied embeddings (frozen)"}
    trained = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return untrained, trained, record


# --- writing vLLM model directories ---------------------------------------------------------------


def _save_dir(out: Path, tensors: Mapping[str, Any], config: dict, target_dir: str) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: tensors[k].detach().to("cpu").contiguous().clone() for k in sorted(tensors)}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    os.chmod(out / "model.safetensors", 0o644)
    (out / "config.json").write_text(dumps_json(config), encoding="utf-8")
    t = Path(target_dir)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if (t / name).exists():
            shutil.copyfile(t / name, out / name)


def write_eagle(out: Path, state: Mapping[str, Any], target_dir: str) -> None:
    """vLLM's EAGLE-1 Llama layout: ``fc.weight``, ``layers.0.*`` (no input_layernorm), no embeddings or LM head (shared)."""
    cfg = json.loads((Path(target_dir) / "config.json").read_text(encoding="utf-8"))
    tensors = {"fc.weight": state["fc.weight"]}
    tensors.update({"layers.0." + k[len("layer."):]: v for k, v in state.items() if k.startswith("layer.")})
    cfg = dict(cfg, num_hidden_layers=1, architectures=["LlamaForCausalLM"], tie_word_embeddings=False)
    _save_dir(out, tensors, cfg, target_dir)


def write_draft(out: Path, state: Mapping[str, Any], target_dir: str, embed, lm_head=None) -> None:
    """A LlamaForCausalLM directory with the target's embeddings (and its LM head when not tied)."""
    cfg = json.loads((Path(target_dir) / "config.json").read_text(encoding="utf-8"))
    n = len({k.split(".")[1] for k in state if k.startswith("layers.")})
    tensors = {"model.embed_tokens.weight": embed, "model.norm.weight": state["norm.weight"]}
    if not cfg.get("tie_word_embeddings", False):
        if lm_head is None:
            raise SpecReproError(f"{target_dir}: the target's LM head is not tied to its embeddings: pass it")
        tensors["lm_head.weight"] = lm_head
    tensors.update({"model." + k: v for k, v in state.items() if k.startswith("layers.")})
    cfg = dict(cfg, num_hidden_layers=n)
    _save_dir(out, tensors, cfg, target_dir)


# --- held-out acceptance (the trace code's rule) ------------------------------------------------------


def heldout_acceptance(kind: str, drafter_dir: Path, target_dir: str, df: pd.DataFrame, states: Sequence[np.ndarray],
                       k: int = EVAL_K) -> dict:
    """Mean acceptance length (1 + accepted per step) over every output position of the held-out rows,
    and per draft position the share of steps whose first t drafts are all accepted."""
    import torch

    from .traces import _draft_model_acc, _EagleHead, _Model, acc_from_drafts

    rows = [i for i, s in enumerate(df["split"]) if s == "heldout"]
    accs = []
    with torch.inference_mode():
        drafter = _Model(drafter_dir)
        head = _EagleHead(drafter, _Model(target_dir), eagle3=False) if kind == "eagle" else None
        for i in rows:
            prompt = np.asarray(df["prompt_token_ids"].iloc[i], np.int64)
            out = np.asarray(df["output_token_ids"].iloc[i], np.int64)
            if out.size < 2:
                continue
            if kind == "eagle":
                hidden = torch.as_tensor(states[i][:-1])
                accs.append(acc_from_drafts(head.drafts(prompt, out, k, hidden=hidden), out)[1:])
            else:
                req = {"prompt_token_ids": prompt, "generated_token_ids": out}
                accs.append(_draft_model_acc(req, drafter, k)[1:])
    a = np.concatenate(accs) if accs else np.zeros(0)
    per_pos = [float(np.mean(a > t)) for t in range(1, k + 1)] if a.size else []
    return {"k": k, "requests": len(accs), "positions": int(a.size),
            "mean_acceptance_length": float(a.mean()) if a.size else None, "accepted_per_position": per_pos}


# --- CLI ---------------------------------------------------------------------------------------


def _target_path(manifest_path: str) -> str:
    m = read_json(manifest_path)
    if not isinstance(m, dict) or "path" not in m:
        raise SpecReproError(f"{manifest_path}: no 'path' field (not a model manifest)")
    return m["path"]


def _engine(blob: str | None) -> dict:
    return json.loads(blob) if blob else {}


def run_generate(a: argparse.Namespace) -> None:
    target = _target_path(a.target_manifest)
    prompts = read_train_prompts(a.prompts)
    df, wall = generate_train_data(target, prompts, max_tokens=a.max_tokens, engine=_engine(a.engine), heldout=a.heldout,
                                   seed=a.seed)
    write_parquet(a.output, df)
    write_json(Path(a.output).with_suffix(".json"), {
        "prompts": str(a.prompts), "requests": len(df), "heldout": int((df["split"] == "heldout").sum()),
        "output_tokens": int(df["output_token_ids"].map(len).sum()), "generate_s": wall, "max_tokens": a.max_tokens,
        "seed": a.seed,
    })


def run_states(a: argparse.Namespace) -> None:
    target = _target_path(a.target_manifest)
    df = read_parquet(a.data)
    states, wall = target_states(target, sequences(df), _engine(a.engine))
    with atomic_path(a.output) as tmp, open(tmp, "wb") as fh:
        np.save(fh, states)
    write_json(Path(a.output).with_suffix(".json"), {"positions": int(states.shape[0]), "hidden": int(states.shape[1]),
                                                     "encode_s": wall})


def run_train(a: argparse.Namespace) -> None:
    import sys

    import torch

    from ..hub import manifest

    torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))
    target = _target_path(a.target_manifest)
    df = read_parquet(a.data)
    try:
        states = split_states(np.load(a.states), sequences(df))
    except (OSError, ValueError) as exc:
        raise SpecReproError(f"{a.states}: unreadable hidden states ({exc}): rerun train-states") from None
    if a.kind == "eagle":
        untrained, trained, record = train_eagle(target, df, states, seed=a.seed, epochs=a.epochs, lr=a.lr, log=sys.stderr)
    else:
        layers = [int(x) for x in a.layers.split(",")] if a.layers else []
        untrained, trained, record = train_draft(target, df, states, layers=layers, seed=a.seed, epochs=a.epochs, lr=a.lr,
                                                 log=sys.stderr)
    output = Path(a.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    final = output.parent / "model"
    tmp = Path(tempfile.mkdtemp(prefix=".model.", dir=output.parent))
    try:
        _, w = _load_target(target)
        for name, state in (("untrained", untrained), ("model", trained)):
            d = tmp / name
            if a.kind == "eagle":
                write_eagle(d, state, target)
            else:
                write_draft(d, state, target, w["model.embed_tokens.weight"], w["lm_head.weight"])
            record[f"heldout_{'trained' if name == 'model' else 'untrained'}"] = heldout_acceptance(a.kind, d, target, df, states)
        print(f"held-out acceptance length (k={EVAL_K}): untrained {record['heldout_untrained']['mean_acceptance_length']:.3f},"
              f" trained {record['heldout_trained']['mean_acceptance_length']:.3f}", file=sys.stderr)
        shutil.rmtree(tmp / "untrained")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp / "model", final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record.update(kind=a.kind, seed=a.seed, layers=a.layers, data=str(a.data), target_manifest=str(a.target_manifest))
    write_json(output, manifest(a.name, "drafter", "train", final, training=record))


def add_cli(sub) -> None:
    p = sub.add_parser("train-generate", help="the target's greedy outputs on the drafters' training prompts (vLLM)")
    p.add_argument("--target-manifest", required=True)
    p.add_argument("--prompts", required=True, help="JSONL of {id, workload, prompt}")
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--heldout", type=float, default=0.2, help="share of each workload held out (default 0.2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", help="JSON: dtype, seed, enforce_eager, gpu_memory_utilization, env")
    p.add_argument("-o", "--output", required=True, help="Parquet (+ .json with the generation time)")
    p.set_defaults(func=run_generate)

    p = sub.add_parser("train-states", help="the target's final hidden states at every position (vLLM pooling runner)")
    p.add_argument("--target-manifest", required=True)
    p.add_argument("--data", required=True, help="Parquet of train-generate")
    p.add_argument("--engine", help="JSON: dtype, seed, enforce_eager, gpu_memory_utilization, env")
    p.add_argument("-o", "--output", required=True, help=".npy, float32 [positions, hidden] (+ .json)")
    p.set_defaults(func=run_states)

    p = sub.add_parser("train-drafter", help="train an EAGLE-1 head or distil a shallow draft model on CPU (manifest)")
    p.add_argument("--name", required=True, help="drafter name, e.g. smollm2/drafters/eagle")
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--target-manifest", required=True)
    p.add_argument("--data", required=True, help="Parquet of train-generate")
    p.add_argument("--states", required=True, help=".npy of train-states")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--layers", default="", help="draft_model: comma-separated target layers to keep")
    p.add_argument("-o", "--output", required=True, help="resources/models/<name>/manifest.json (model in ./model/)")
    p.set_defaults(func=run_train)
