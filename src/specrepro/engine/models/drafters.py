"""Drafters trained on CPU from the target's own generations (the CPU run's real model, SmolLM2).

Three steps, three verbs, each a rule:

``train-generate``
    The target's greedy outputs (vLLM, one batched ``generate``) on the training prompts (never the
    benchmark's), a seeded split of them held out for evaluation (stratified by workload).
``train-states``
    The target's final, normed hidden state at every position of prompt + output (what vLLM hands an
    EAGLE-1 head while drafting), from the target's weights in torch in the engine's dtype, batched.
    (vLLM's pooling runner gives the same states, cosine > 0.99 in bf16, at half the speed plus an
    engine start.)
``train-drafter``
    ``eagle``: an EAGLE-1 head in vLLM's Llama format (``fc [H, 2H]`` without bias, one decoder layer
    without ``input_layernorm``, no final norm; the target's embeddings and LM head are shared, not
    stored). At position ``j`` it reads token ``s[j+1]`` and the target's hidden state ``h[j]`` and
    should output ``h[j+1]`` (whose LM-head argmax is ``s[j+2]``). See :func:`train_eagle`.
    ``draft_model``: a shallow copy of the target (the layers named in ``layers``, the final norm,
    the tied embeddings) distilled on the target's outputs. See :func:`train_draft`.

Both trainers start from a closed-form least-squares fit (seconds; most of the gain per CPU second),
then run a few epochs of AdamW in float32 (or bf16 autocast: ``precision``) with a fixed seed. The held-out
prompts' acceptance length at ``k`` = 3 of the untrained drafter, of the closed-form fit and of the trained drafter
is computed with the host-side trace code (``specrepro.engine.models.oracle``: vLLM's greedy acceptance rule, checked
against vLLM's counters in the tests; the mean over output positions) and stored, with the times and
losses, in the drafter's manifest under ``training``; the benchmark then measures the trained drafter
in vLLM (its counters) on the benchmark prompts.
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

from ...core.io import SpecReproError, atomic_path, dumps_json, read_json, read_parquet, write_json, write_parquet
from ...core.engines import import_vllm
from ...core.hub import manifest
from ...core.prompts import chat_tokenizer
from ...core.traces import simulate_steps
from .oracle import _draft_model_acc, _EagleHead, _Model, _rope, acc_from_drafts

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


def split_states(states: np.ndarray, seqs: Sequence[np.ndarray]) -> list[np.ndarray]:
    lens = [len(s) for s in seqs]
    if states.shape[0] != sum(lens):
        raise SpecReproError(f"hidden states have {states.shape[0]} rows, the sequences {sum(lens)} tokens: rerun train-states")
    return np.split(states, np.cumsum(lens)[:-1])


# --- modules (plain torch, batched; the same layer maths as specrepro.engine.models.oracle) ---------------


def _torch_modules():
    """(Layer, EagleHead, Llama) torch modules; imported lazily (analysis code never imports torch)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class _Holder(nn.Module):
        pass

    class Layer(nn.Module):
        """A Llama decoder layer (vLLM's and transformers' maths), over right-padded batches [B, T, H]."""

        def __init__(self, cfg: Mapping[str, Any], input_norm: bool = True):
            super().__init__()
            h, i = cfg["hidden_size"], cfg["intermediate_size"]
            self.n_heads = cfg["num_attention_heads"]
            self.n_kv = cfg.get("num_key_value_heads", self.n_heads)
            self.head_dim = cfg.get("head_dim") or h // self.n_heads
            self.eps = cfg.get("rms_norm_eps", 1e-5)
            self.theta = float((cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0)))
            self.self_attn = _Holder()
            for name, o, n in (("q_proj", self.n_heads * self.head_dim, h), ("k_proj", self.n_kv * self.head_dim, h),
                               ("v_proj", self.n_kv * self.head_dim, h), ("o_proj", h, self.n_heads * self.head_dim)):
                setattr(self.self_attn, name, nn.Linear(n, o, bias=False))
            self.mlp = _Holder()
            self.mlp.gate_proj, self.mlp.up_proj = nn.Linear(h, i, bias=False), nn.Linear(h, i, bias=False)
            self.mlp.down_proj = nn.Linear(i, h, bias=False)
            self.post_attention_layernorm = _Holder()
            self.post_attention_layernorm.weight = nn.Parameter(torch.ones(h))
            if input_norm:
                self.input_layernorm = _Holder()
                self.input_layernorm.weight = nn.Parameter(torch.ones(h))

        def rms(self, x, w):
            return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype) * w

        def mlp_act(self, z):
            return F.silu(self.mlp.gate_proj(z)) * self.mlp.up_proj(z)

        def attn(self, x, pos):
            B, T, _ = x.shape
            a = self.self_attn
            q = _rope(a.q_proj(x).view(B, T, self.n_heads, self.head_dim), pos, self.head_dim, self.theta).to(x.dtype)
            k = _rope(a.k_proj(x).view(B, T, self.n_kv, self.head_dim), pos, self.head_dim, self.theta).to(x.dtype)
            v = a.v_proj(x).view(B, T, self.n_kv, self.head_dim)
            rep = self.n_heads // self.n_kv
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.repeat_interleave(rep, 2).transpose(1, 2),
                                               v.repeat_interleave(rep, 2).transpose(1, 2), is_causal=True)
            return a.o_proj(o.transpose(1, 2).reshape(B, T, -1))

        def forward(self, x, pos):
            z = self.rms(x, self.input_layernorm.weight) if hasattr(self, "input_layernorm") else x
            r = x + self.attn(z, pos)
            return r + self.mlp.down_proj(self.mlp_act(self.rms(r, self.post_attention_layernorm.weight)))

    class EagleHead(nn.Module):
        """vLLM's ``llama_eagle.py`` head: fc(cat(embed(token), hidden)) → one layer without input norm,
        no final norm; the target's embeddings and LM head are shared (not parameters)."""

        def __init__(self, cfg: Mapping[str, Any], embed):
            super().__init__()
            h = cfg["hidden_size"]
            self.fc = nn.Linear(2 * h, h, bias=False)
            self.layer = Layer(cfg, input_norm=False)
            self.register_buffer("embed", embed, persistent=False)

        def forward(self, ids, hidden):
            x = self.fc(torch.cat([self.embed[ids].to(hidden.dtype), hidden], -1))
            return self.layer(x, torch.arange(x.shape[1])[None])

    class Llama(nn.Module):
        """A Llama body (embeddings shared, final norm): the target (all layers) or a shallow copy."""

        def __init__(self, cfg: Mapping[str, Any], embed, num_layers: int):
            super().__init__()
            self.layers = nn.ModuleList([Layer(cfg) for _ in range(num_layers)])
            self.norm = _Holder()
            self.norm.weight = nn.Parameter(torch.ones(cfg["hidden_size"]))
            self.register_buffer("embed", embed, persistent=False)

        def forward(self, ids, upto: int | None = None):
            """Final normed hidden [B, T, H]; with ``upto`` the residual stream entering layer ``upto``."""
            x = self.embed[ids]
            pos = torch.arange(x.shape[1])[None]
            for i, layer in enumerate(self.layers):
                if upto is not None and i == upto:
                    return x
                x = layer(x, pos)
            return self.layers[0].rms(x, self.norm.weight)

    return Layer, EagleHead, Llama


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


def _load(module, state: Mapping[str, Any], what: str) -> None:
    missing, unexpected = module.load_state_dict(dict(state), strict=False)
    if missing or unexpected:
        raise SpecReproError(f"{what}: missing weights {missing}, unexpected {unexpected}")


def target_states(target_dir: str, seqs: Sequence[np.ndarray], *, dtype: str = "bfloat16", batch: int = 8) -> tuple[np.ndarray, float]:
    """``[sum of lengths, H]`` float32: the target's final normed hidden state at every position (what vLLM
    hands an EAGLE-1 head), sequences concatenated in order; torch in ``dtype`` (the engine's), batched."""
    import torch

    cfg, w = _load_target(target_dir)
    _, _, Llama = _torch_modules()
    dt = getattr(torch, dtype) if dtype != "auto" else torch.bfloat16
    L = cfg["num_hidden_layers"]
    model = Llama(cfg, w["model.embed_tokens.weight"].to(dt), L)
    _load(model, {"norm.weight": w["model.norm.weight"], **{k: v for i in range(L) for k, v in
                  _layer_weights(w, i, f"layers.{i}.").items()}}, f"{target_dir}: target")
    model = model.to(dt).eval()
    out: list[np.ndarray | None] = [None] * len(seqs)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in _batches([len(s) for s in seqs], batch, None):
            ids, _ = _pad([seqs[i] for i in b])
            h = model(ids).float().numpy()
            for r, i in enumerate(b):
                out[i] = h[r, : len(seqs[i])]
    return np.concatenate(out, 0).astype(np.float32), time.perf_counter() - t0


# --- training ----------------------------------------------------------------------------------


def _batches(lengths: Sequence[int], size: int, rng) -> list[list[int]]:
    """Indices in batches of ``size`` of similar length (little padding); batch order shuffled by ``rng``."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    out = [order[i: i + size] for i in range(0, len(order), size)]
    if rng is not None:
        out = [out[i] for i in rng.permutation(len(out))]
    return out


def _pad(arrays: Sequence[np.ndarray], value=0):
    """Right-padded tensor [B, max len, ...] and the lengths."""
    import torch

    n = max(len(a) for a in arrays)
    first = np.asarray(arrays[0])
    out = np.full((len(arrays), n) + first.shape[1:], value, dtype=first.dtype)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = a
    return torch.as_tensor(out), torch.as_tensor([len(a) for a in arrays])


def _schedule(opt, total: int):
    import torch

    warm = max(1, total // 5)
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * max(0.05, 1 - s / max(1, total)))


def _ridge(X, Y, lam: float = 1e-4):
    """Least squares ``W`` with ``X @ W ≈ Y`` (columns scaled to unit RMS, ridge ``lam`` x rows)."""
    import torch

    sc = 1.0 / X.pow(2).mean(0).sqrt().clamp_min(1e-6)
    Xs = X * sc
    W = torch.linalg.solve(Xs.T @ Xs + lam * X.shape[0] * torch.eye(X.shape[1]), Xs.T @ Y)
    return W * sc[:, None]


#: the training precisions: float32, or bf16 autocast. On a CPU without native bf16 (no AVX512-BF16 or AMX, as the
#: 2-vCPU Xeon of the CPU run) autocast is ~3x slower than float32 (SmolLM2: an EAGLE epoch 62 -> 20 s, the draft
#: model's 106 -> 39 s, one thread) and the held-out acceptance is the same (1.754 / 1.513 -> 1.767 / 1.518)
PRECISIONS = ("float32", "bfloat16")


def _precision_dtype(precision: str):
    """The torch dtype of a training ``precision`` (its name); one line for an unknown one."""
    import torch

    if precision not in PRECISIONS:
        raise SpecReproError(f"training precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    return getattr(torch, precision)


def _autocast(precision: str):
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=_precision_dtype(precision) == torch.bfloat16)


def _ce_vocab(lm, outputs, restrict: bool, precision: str = "float32"):
    """(LM head in the training ``precision``, token → class index): the whole vocabulary, or with ``restrict`` only the tokens
    of the training outputs (a cross-entropy over the tokens the target actually emits: cheaper; the
    other logits are left to the feature losses)."""
    import torch

    V = lm.shape[0]
    keep = torch.unique(torch.cat(list(outputs))) if restrict else torch.arange(V)
    label_of = torch.full((V,), -100, dtype=torch.long)
    label_of[keep] = torch.arange(keep.numel())
    return lm[keep].to(_precision_dtype(precision)), label_of


def _fit(module, kind: str, batch_loss, shift: int, train: Sequence[int], seqs, states, prompt_len, *, epochs: int,
         lr: float, batch: int, rng, precision: str = "float32", log=None):
    """``epochs`` of AdamW (in ``precision``, the warm-up/decay schedule, gradients clipped at 1) over batches of
    similar length of the ``train`` sequences. ``batch_loss(s, hs, T, valid, out_pos)`` gives a batch's loss
    from its padded tokens ``s`` and target states ``hs``: ``T`` positions (the length less ``shift``), those
    inside each sequence (``valid``) and, of those, the output positions (``out_pos``). Returns (mean loss per
    epoch, training lengths, start time)."""
    import torch

    opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.0)
    lens = [len(seqs[i]) for i in train]
    sched = _schedule(opt, epochs * len(_batches(lens, batch, None)))
    losses = []
    t1 = time.perf_counter()
    for ep in range(epochs):
        ep_loss = []
        for b in _batches(lens, batch, rng):
            rows = [train[i] for i in b]
            s, n = _pad([seqs[i].numpy() for i in rows])
            hs, _ = _pad([states[i] for i in rows])
            P = torch.as_tensor([prompt_len[i] for i in rows])
            T = s.shape[1] - shift
            j = torch.arange(T)[None]
            valid = j < (n[:, None] - shift)
            out_pos = valid & (j >= (P[:, None] - 1))
            with _autocast(precision):
                loss = batch_loss(s, hs, T, valid, out_pos)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            opt.step()
            sched.step()
            ep_loss.append(loss.item())
        losses.append(float(np.mean(ep_loss)) if ep_loss else None)
        if log:
            print(f"{kind} epoch {ep + 1}/{epochs}: loss {losses[-1]:.4f} ({time.perf_counter() - t1:.1f} s)", file=log, flush=True)
    return losses, lens, t1


def _rows(df: pd.DataFrame, split: str) -> list[int]:
    return [i for i, s in enumerate(df["split"]) if s == split]


def eagle_init(target_dir: str):
    """(module, target config, target weights): the untrained head, which passes the target's hidden
    state through (its decoder layer a copy of the target's last one with ``o_proj``, ``down_proj`` = 0,
    ``fc`` = [0, I]): it guesses the token just verified again."""
    import torch

    cfg, w = _load_target(target_dir)
    _, EagleHead, _ = _torch_modules()
    head = EagleHead(cfg, w["model.embed_tokens.weight"])
    last = cfg["num_hidden_layers"] - 1
    sd = {("layer." + k): v.clone() for k, v in _layer_weights(w, last, "", input_norm=False).items()}
    for k in ("layer.self_attn.o_proj.weight", "layer.mlp.down_proj.weight"):
        sd[k] = torch.zeros_like(sd[k])
    h = cfg["hidden_size"]
    sd["fc.weight"] = torch.cat([torch.zeros(h, h), torch.eye(h)], 1)
    _load(head, sd, "EAGLE head init")
    return head, cfg, w


def train_eagle(target_dir: str, df: pd.DataFrame, states: Sequence[np.ndarray], *, seed: int, epochs: int, lr: float,
                noise: float = 0.2, ce_weight: float = 1.0, unroll: bool = True, batch: int = 1, ce_vocab: bool = True,
                precision: str = "float32", on_stage=None, log=None) -> dict:
    """Train an EAGLE-1 head on the ``train`` rows of ``df``; returns the training record.

    1. Closed form: ``fc`` fitted by least squares so that ``fc(cat(embed(s[j+1]), h[j])) ≈ h[j+1]`` over
       every position (the layer's outputs still zero: a linear head). The decoder layer's q/k/v get the
       target layer's input-norm weights folded in (the head has no input norm; its input has the scale
       of the target's hidden states).
    2. ``epochs`` of AdamW (``precision``, batches of similar length): smooth L1 to ``h[j+1]`` at every
       position plus ``ce_weight`` x cross-entropy through the target's LM head to the target's token
       ``s[j+2]`` at output positions, Gaussian noise on the input hidden states; with ``unroll`` the
       same losses for a second drafting step that reads the head's own output (as drafting does).

    ``on_stage(name, state_dict)`` sees the untrained, the closed-form and the trained head."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    head, cfg, w = eagle_init(target_dir)
    if on_stage:
        on_stage("untrained", head.state_dict())
    E = w["model.embed_tokens.weight"]
    h = cfg["hidden_size"]
    seqs = [torch.as_tensor(s) for s in sequences(df)]
    prompt_len = [len(p) for p in df["prompt_token_ids"]]
    train = [i for i in _rows(df, "train") if len(seqs[i]) >= 4]
    t0 = time.perf_counter()
    X = torch.cat([torch.cat([E[seqs[i][1:-1]], torch.as_tensor(states[i][:-2])], -1) for i in train])
    Y = torch.cat([torch.as_tensor(states[i][1:-1]) for i in train])
    sd = head.state_dict()
    sd["fc.weight"] = _ridge(X, Y).T.contiguous()
    rms_in = float(Y.pow(2).mean().sqrt())
    win = w[f"model.layers.{cfg['num_hidden_layers'] - 1}.input_layernorm.weight"]
    for k in ("q_proj", "k_proj", "v_proj"):
        sd[f"layer.self_attn.{k}.weight"] = sd[f"layer.self_attn.{k}.weight"] * win[None, :] / rms_in
    _load(head, sd, "EAGLE head (closed form)")
    fit_s = time.perf_counter() - t0
    del X, Y
    if on_stage:
        on_stage("closed_form", head.state_dict())
    lm, label_of = _ce_vocab(w["lm_head.weight"], [seqs[i][prompt_len[i]:] for i in train], ce_vocab, precision)
    def eagle_loss(s, hs, T, valid, out_pos):
        inp = hs[:, :T] + noise * rms_in * torch.randn(len(s), T, h)
        f1 = head(s[:, 1:T + 1], inp).float()
        loss = F.smooth_l1_loss(f1[valid], hs[:, 1:T + 1][valid])
        if out_pos.any():
            loss = loss + ce_weight * F.cross_entropy(F.linear(f1[out_pos], lm).float(), label_of[s[:, 2:T + 2][out_pos]])
        if unroll and T > 1:
            f2 = head(s[:, 2:T + 1], f1[:, : T - 1]).float()
            v2, o2 = valid[:, 1:], out_pos[:, 1:]
            loss = loss + F.smooth_l1_loss(f2[v2], hs[:, 2:T + 1][v2])
            if o2.any():
                loss = loss + ce_weight * F.cross_entropy(F.linear(f2[o2], lm).float(), label_of[s[:, 3:T + 2][o2]])
        return loss

    losses, lens, t1 = _fit(head, "eagle", eagle_loss, 2, train, seqs, states, prompt_len,
                            epochs=epochs, lr=lr, batch=batch, rng=rng, precision=precision, log=log)
    if on_stage:
        on_stage("trained", head.state_dict())
    return {"fit_s": fit_s, "train_s": time.perf_counter() - t1, "epochs": epochs, "lr": lr, "batch": batch,
            "precision": precision, "noise": noise,
            "ce_weight": ce_weight, "unroll": unroll, "ce_vocab": int(lm.shape[0]), "epoch_loss": losses, "train_sequences": len(train),
            "train_positions": int(sum(lens)),
            "init": "untrained: decoder layer = the target's last layer with o_proj, down_proj = 0, fc = [0, I] "
                    "(passes the target's hidden state through); closed form: fc by least squares"}


def draft_init(target_dir: str, layers: Sequence[int]):
    """(module, target config, target weights): a shallow copy of the target with ``layers``, the final
    norm and the (frozen, shared) embeddings: the untrained draft model."""
    cfg, w = _load_target(target_dir)
    L = cfg["num_hidden_layers"]
    bad = [i for i in layers if not 0 <= i < L]
    if bad or not layers:
        raise SpecReproError(f"draft layers {list(layers)}: each must be a layer of the target (0..{L - 1})")
    _, _, Llama = _torch_modules()
    model = Llama(cfg, w["model.embed_tokens.weight"], len(layers))
    sd = {"norm.weight": w["model.norm.weight"].clone()}
    for j, src in enumerate(layers):
        sd.update({k: v.clone() for k, v in _layer_weights(w, src, f"layers.{j}.").items()})
    _load(model, sd, "draft init")
    return model, cfg, w


def train_draft(target_dir: str, df: pd.DataFrame, states: Sequence[np.ndarray], *, layers: Sequence[int], seed: int,
                epochs: int, lr: float, hidden_weight: float = 1.0, batch: int = 1, ce_vocab: bool = True,
                precision: str = "float32", on_stage=None, log=None) -> dict:
    """Distil a shallow copy of the target (``layers``) on the ``train`` rows of ``df``; returns the record.

    1. Closed form: the last kept layer's ``down_proj`` fitted by least squares so that the copy's final
       residual stream points where the target's does (``h / norm weight``, at the stream's own scale):
       the final norm then gives the target's hidden state.
    2. ``epochs`` of AdamW (``precision``, batches of similar length): cross-entropy to the target's greedy
       tokens at output positions plus ``hidden_weight`` x the squared distance of the copy's final hidden
       state to the target's at every position; embeddings (tied: the LM head) frozen."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model, cfg, w = draft_init(target_dir, layers)
    if on_stage:
        on_stage("untrained", model.state_dict())
    seqs = [torch.as_tensor(s) for s in sequences(df)]
    prompt_len = [len(p) for p in df["prompt_token_ids"]]
    train = [i for i in _rows(df, "train") if len(seqs[i]) >= 2]
    n_l = len(layers)
    last = model.layers[n_l - 1]
    t0 = time.perf_counter()
    A, R = [], []
    with torch.inference_mode():
        g = model.norm.weight
        for i in train:
            x = model(seqs[i][None], upto=n_l - 1)
            r = x + last.attn(last.rms(x, last.input_layernorm.weight), torch.arange(x.shape[1])[None])
            act = last.mlp_act(last.rms(r, last.post_attention_layernorm.weight))[0]
            hs = torch.as_tensor(states[i])
            scale = r[0].pow(2).mean(-1, keepdim=True).sqrt()
            A.append(act)
            R.append(hs / g * scale / (hs / g).pow(2).mean(-1, keepdim=True).sqrt() - r[0])
    sd = model.state_dict()
    sd[f"layers.{n_l - 1}.mlp.down_proj.weight"] = _ridge(torch.cat(A), torch.cat(R), 1e-3).T.contiguous()
    _load(model, sd, "draft (closed form)")
    fit_s = time.perf_counter() - t0
    del A, R
    if on_stage:
        on_stage("closed_form", model.state_dict())
    lm, label_of = _ce_vocab(w["lm_head.weight"], [seqs[i][prompt_len[i]:] for i in train], ce_vocab, precision)
    def draft_loss(s, hs, T, valid, out_pos):
        hd = model(s[:, :T]).float()  # position j predicts s[j+1]
        loss = hidden_weight * F.mse_loss(hd[valid], hs[:, :T][valid])
        if out_pos.any():
            loss = loss + F.cross_entropy(F.linear(hd[out_pos], lm).float(), label_of[s[:, 1:][out_pos]])
        return loss

    losses, lens, t1 = _fit(model, "draft", draft_loss, 1, train, seqs, states, prompt_len,
                            epochs=epochs, lr=lr, batch=batch, rng=rng, precision=precision, log=log)
    if on_stage:
        on_stage("trained", model.state_dict())
    return {"fit_s": fit_s, "train_s": time.perf_counter() - t1, "epochs": epochs, "lr": lr, "batch": batch,
            "precision": precision, "hidden_weight": hidden_weight, "ce_vocab": int(lm.shape[0]), "epoch_loss": losses, "train_sequences": len(train),
            "train_positions": int(sum(lens)),
            "init": f"untrained: target layers {list(layers)}, final norm, tied embeddings (frozen); "
                    "closed form: the last layer's down_proj by least squares"}


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
    """Acceptance of a drafter on the held-out rows at ``k`` drafts (vLLM's greedy rule, host-side):

    ``mean_acceptance_length``: the mean over every output position (after the first) of ``acc_len``,
    the tokens a step starting there produces; ``mean_step_length``: the mean tokens per step when the
    outputs are walked step by step as the engine does (what vLLM's counters give: 1 + accepted /
    drafts); ``accepted_per_position``: per draft position, the share of positions whose first t drafts
    are all accepted; ``per_request``: each held-out request's ``workload``, and its ``steps`` and ``tokens`` in
    that walk (the unit of an interval over requests)."""
    import torch

    rows = [i for i, s in enumerate(df["split"]) if s == "heldout"]
    accs, steps, per_request = [], [], []
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
                acc = acc_from_drafts(head.drafts(prompt, out, k, hidden=hidden), out)
            else:
                acc = _draft_model_acc({"prompt_token_ids": prompt, "generated_token_ids": out}, drafter, k)
            accs.append(acc[1:])
            walk = simulate_steps(acc, k + 1)
            steps += walk
            per_request.append({"workload": str(df["workload"].iloc[i]) if "workload" in df else "",
                                "steps": len(walk), "tokens": int(sum(walk))})
    a = np.concatenate(accs) if accs else np.zeros(0)
    per_pos = [float(np.mean(a > t)) for t in range(1, k + 1)] if a.size else []
    return {"k": k, "requests": len(accs), "positions": int(a.size),
            "mean_acceptance_length": float(a.mean()) if a.size else None,
            "mean_step_length": float(np.mean(steps)) if steps else None, "accepted_per_position": per_pos,
            "per_request": per_request}


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
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    target = _target_path(a.target_manifest)
    df = read_parquet(a.data)
    states, wall = target_states(target, sequences(df), dtype=a.dtype)
    with atomic_path(a.output) as tmp, open(tmp, "wb") as fh:
        np.save(fh, states)
    write_json(Path(a.output).with_suffix(".json"), {"positions": int(states.shape[0]), "hidden": int(states.shape[1]),
                                                     "dtype": a.dtype, "encode_s": wall})


STAGES = ("untrained", "closed_form", "trained")


def run_train(a: argparse.Namespace) -> None:
    import sys

    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    target = _target_path(a.target_manifest)
    df = read_parquet(a.data)
    try:
        states = split_states(np.load(a.states), sequences(df))
    except (OSError, ValueError) as exc:
        raise SpecReproError(f"{a.states}: unreadable hidden states ({exc}): rerun train-states") from None
    stages: dict[str, dict] = {}

    def keep(name, state):
        stages[name] = {k: v.detach().clone() for k, v in state.items()}

    if a.kind == "eagle":
        record = train_eagle(target, df, states, seed=a.seed, epochs=a.epochs, lr=a.lr, batch=a.batch,
                             precision=a.precision, on_stage=keep, log=sys.stderr)
    else:
        layers = [int(x) for x in a.layers.split(",")] if a.layers else []
        record = train_draft(target, df, states, layers=layers, seed=a.seed, epochs=a.epochs, lr=a.lr, batch=a.batch,
                             precision=a.precision, on_stage=keep, log=sys.stderr)
    output = Path(a.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    final = output.parent / "model"
    tmp = Path(tempfile.mkdtemp(prefix=".model.", dir=output.parent))
    try:
        _, w = _load_target(target)
        t0 = time.perf_counter()
        for name in STAGES:
            d = tmp / name
            if a.kind == "eagle":
                write_eagle(d, stages[name], target)
            else:
                write_draft(d, stages[name], target, w["model.embed_tokens.weight"], w["lm_head.weight"])
            record[f"heldout_{name}"] = heldout_acceptance(a.kind, d, target, df, states)
        record["eval_s"] = time.perf_counter() - t0
        print(f"held-out acceptance length (k={EVAL_K}): " + ", ".join(
            f"{n} {record[f'heldout_{n}']['mean_acceptance_length']:.3f}" for n in STAGES), file=sys.stderr)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp / "trained", final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record.update(kind=a.kind, seed=a.seed, layers=a.layers, data=str(a.data), target_manifest=str(a.target_manifest),
                  threads=torch.get_num_threads())
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

    p = sub.add_parser("train-states", help="the target's final normed hidden state at every position (torch, engine dtype)")
    p.add_argument("--target-manifest", required=True)
    p.add_argument("--data", required=True, help="Parquet of train-generate")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"], help="the engine's dtype")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
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
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--batch", type=int, default=1, help="sequences per optimizer step")
    p.add_argument("--precision", default="float32", choices=PRECISIONS,
                   help="float32, or bf16 autocast (faster only where the CPU has native bf16)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--layers", default="", help="draft_model: comma-separated target layers to keep")
    p.add_argument("-o", "--output", required=True, help="resources/models/<name>/manifest.json (model in ./model/)")
    p.set_defaults(func=run_train)
