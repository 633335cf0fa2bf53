"""Test oracle: per-position acceptance traces computed in plain PyTorch from greedy target outputs.

The pipeline's traces come from vLLM itself (:mod:`specrepro.engine.run.traces`: k = 20, one token kept per
step). This module recomputes them without running SD, for Llama-architecture targets and heads
(no rope scaling, no q/k norms), in float32 on the host: the tests check that the engine's keep-one
traces equal these at every position, and both against vLLM's counters.

``acc_len[i]`` (see :mod:`specrepro.core.traces`) is the number of tokens one verification step would
produce when it starts with ``i`` output tokens generated: 1 + the length of the common prefix of
the proposer's greedy proposal (up to ``k`` tokens) and ``output[i:]``. As in
:mod:`specrepro.core.ngram`, the proposal is only compared with the recorded output, so
``acc_len[i] <= min(k, L - i) + 1`` (at the last position a correct guess of the final token still
counts, plus the target's own token after it).

Comparing with an engine: vLLM schedules full ``k``-token drafts up to the last step and counts the
accepted tokens before truncating them at ``max_tokens``, so the last step's drafts that match the
target's continuation *past* the recorded output still count as accepted there. To reproduce the
engine exactly, compute the trace on the greedy output extended by ``k`` tokens and compare only its
first ``L`` positions (see ``tests/test_engine_traces.py``).

``draft_model``
    One teacher-forced pass of the draft model over prompt + output gives its argmax next token
    at every position; under greedy decoding a draft chain stays on the target's path exactly as
    long as those argmaxes equal the output, so ``acc_len[i] = 1 + run`` of consecutive matches
    from ``i`` (capped at ``k``), computed as a vectorised run length.
``eagle`` / ``eagle3``
    One teacher-forced pass of the target gives the hidden states the head reads (EAGLE-1: the
    final, normed hidden state; EAGLE-3: the residual streams of the layers in the head's
    ``eagle_aux_hidden_state_layer_ids``, concatenated). As in vLLM's proposer
    (``vllm/v1/spec_decode/llm_base_proposer.py``), the head's first pass reads token ``s[j+1]``
    with the target's hidden state at ``j`` (position ``j``) for every position, which fills its
    KV cache; from every start position the head then drafts ``k - 1`` more tokens, each reading
    its previous draft token and its own previous hidden state (EAGLE-1: the layer output;
    EAGLE-3: the pre-norm output), attending to the teacher-forced KV up to the start plus its
    own drafted KV. All start positions are drafted at once (batched).
``ngram``
    :func:`specrepro.core.ngram.ngram_acc_lens`.

The forward passes are plain torch (float32) from the safetensors weights and ``config.json``,
written to match vLLM's Llama / ``llama_eagle.py`` / ``llama_eagle3.py`` layers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ...core.errors import SpecReproError
from ...core.ngram import NgramParams, ngram_acc_lens
from ...core.traces import TraceRecord

METHODS = ("ngram", "draft_model", "eagle", "eagle3")


# --- Llama building blocks (torch) -------------------------------------------------------------


class _Model:
    """A model directory: config and float32 torch weights."""

    def __init__(self, model_dir: str | os.PathLike):
        import torch
        from safetensors.torch import load_file

        d = Path(model_dir)
        if not (d / "config.json").exists():
            raise SpecReproError(f"{d}: no config.json (not a model directory)")
        self.dir = d
        self.config = json.loads((d / "config.json").read_text(encoding="utf-8"))
        files = sorted(d.glob("*.safetensors"))
        if not files:
            raise SpecReproError(f"{d}: no *.safetensors weights")
        w: dict[str, Any] = {}
        for f in files:
            w.update(load_file(str(f)))
        self.w = {k: v.to(torch.float32) for k, v in w.items()}
        c = self.config
        self.hidden = c["hidden_size"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c.get("num_key_value_heads", self.n_heads)
        self.head_dim = c.get("head_dim") or self.hidden // self.n_heads
        self.eps = c.get("rms_norm_eps", 1e-5)
        rope = c.get("rope_parameters") or {}
        self.theta = float(rope.get("rope_theta", c.get("rope_theta", 10000.0)))
        scaling = c.get("rope_scaling") or {}
        if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
            raise SpecReproError(f"{d}: rope scaling {scaling} is not supported here")

    def get(self, name: str):
        if name not in self.w:
            raise SpecReproError(f"{self.dir}: weight {name!r} missing")
        return self.w[name]


def _rms(x, weight, eps):
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x, pos, head_dim, theta):
    """Rotate-half RoPE (Llama / vLLM neox style). x: [..., T, heads, d], pos: [..., T]."""
    import torch

    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = pos.to(torch.float32)[..., None] * inv  # [..., T, d/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[..., None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[..., None, :]
    half = head_dim // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def _mlp(m: _Model, p: str, x):
    import torch.nn.functional as F

    return F.linear(F.silu(F.linear(x, m.get(p + "mlp.gate_proj.weight"))) * F.linear(x, m.get(p + "mlp.up_proj.weight")),
                    m.get(p + "mlp.down_proj.weight"))


def _qkv(m: _Model, p: str, x, pos):
    import torch.nn.functional as F

    T = x.shape[-2]
    lead = x.shape[:-2]
    q = F.linear(x, m.get(p + "self_attn.q_proj.weight")).view(*lead, T, m.n_heads, m.head_dim)
    k = F.linear(x, m.get(p + "self_attn.k_proj.weight")).view(*lead, T, m.n_kv, m.head_dim)
    v = F.linear(x, m.get(p + "self_attn.v_proj.weight")).view(*lead, T, m.n_kv, m.head_dim)
    return _rope(q, pos, m.head_dim, m.theta), _rope(k, pos, m.head_dim, m.theta), v


def _causal_attn(m: _Model, p: str, x, pos):
    """Self-attention over one sequence x [T, H]; returns (output [T, H], k, v)."""
    import torch
    import torch.nn.functional as F

    q, k, v = _qkv(m, p, x, pos)
    rep = m.n_heads // m.n_kv
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    out = F.scaled_dot_product_attention(q.transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1), is_causal=True)
    out = out.transpose(0, 1).reshape(x.shape[0], m.n_heads * m.head_dim)
    return F.linear(out, m.get(p + "self_attn.o_proj.weight")), k, v


def llama_forward(m: _Model, tokens: Sequence[int], aux_ids: Sequence[int] = ()):
    """Teacher-forced pass of a LlamaForCausalLM: ``(logits [T, V], normed last hidden [T, H],
    {aux id: residual stream})`` where aux id 0 is the embeddings and j the stream after layer j-1."""
    import torch
    import torch.nn.functional as F

    ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
    pos = torch.arange(ids.numel())
    x = F.embedding(ids, m.get("model.embed_tokens.weight"))
    aux = {0: x} if 0 in aux_ids else {}
    for i in range(m.config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a, _, _ = _causal_attn(m, p, _rms(x, m.get(p + "input_layernorm.weight"), m.eps), pos)
        x = x + a
        x = x + _mlp(m, p, _rms(x, m.get(p + "post_attention_layernorm.weight"), m.eps))
        if i + 1 in aux_ids:
            aux[i + 1] = x
    h = _rms(x, m.get("model.norm.weight"), m.eps)
    lm = m.w.get("lm_head.weight", m.get("model.embed_tokens.weight"))
    return F.linear(h, lm), h, aux


# --- acceptance from per-step matches ----------------------------------------------------------


def run_lengths(match: np.ndarray) -> np.ndarray:
    """``r[i]`` = number of consecutive True values of ``match`` starting at ``i`` (vectorised)."""
    match = np.asarray(match, dtype=bool)
    n = match.size
    idx = np.arange(n)
    # index of the first False at or after i (n if none)
    nxt = np.where(~match, idx, n)
    nxt = np.minimum.accumulate(nxt[::-1])[::-1] if n else nxt
    return (nxt - idx).astype(np.int64)


def acc_from_draft_argmax(argmax_next: np.ndarray, output: np.ndarray, k: int) -> np.ndarray:
    """``acc_len`` from ``argmax_next[i]`` = the drafter's greedy guess of ``output[i]`` given the
    true context ``prompt + output[:i]``: 1 + min(k, run of consecutive correct guesses from i)."""
    match = np.asarray(argmax_next) == np.asarray(output)
    return 1 + np.minimum(k, run_lengths(match))


def acc_from_drafts(drafts: np.ndarray, output: np.ndarray) -> np.ndarray:
    """``drafts[i, t]`` = draft token t of the step starting at i (guessing ``output[i + t]``):
    1 + the common prefix with ``output[i:]`` (never past the end of the output)."""
    L, k = drafts.shape
    idx = np.arange(L)[:, None] + np.arange(k)[None, :]
    out = np.asarray(output)
    eq = (idx < L) & (drafts == out[np.minimum(idx, L - 1)])
    prefix = np.where(eq.all(axis=1), k, np.argmin(eq, axis=1))
    return (1 + prefix).astype(np.int64)


# --- proposers ---------------------------------------------------------------------------------


def _draft_model_acc(req: Mapping, drafter: _Model, k: int) -> np.ndarray:
    prompt = np.asarray(req["prompt_token_ids"], dtype=np.int64)
    out = np.asarray(req["generated_token_ids"], dtype=np.int64)
    P, L = prompt.size, out.size
    seq = np.concatenate([prompt, out])
    logits, _, _ = llama_forward(drafter, seq[:-1])
    guess = logits[P - 1: P - 1 + L].argmax(-1).numpy()
    return acc_from_draft_argmax(guess, out, k)


class _EagleHead:
    """vLLM's EAGLE-1 (``llama_eagle.py``) / EAGLE-3 (``llama_eagle3.py``) Llama head, batched drafting."""

    def __init__(self, head: _Model, target: _Model, eagle3: bool):
        self.m, self.t, self.eagle3 = head, target, eagle3
        c = head.config
        w = head.w
        self.embed = w.get("embed_tokens.weight", target.get("model.embed_tokens.weight"))
        self.lm_head = w.get("lm_head.weight", target.w.get("lm_head.weight"))
        if self.lm_head is None:
            self.lm_head = target.get("model.embed_tokens.weight")
        self.n_layers = c["num_hidden_layers"]
        if eagle3:
            ec = c.get("eagle_config") or {}
            ids = c.get("eagle_aux_hidden_state_layer_ids") or ec.get("eagle_aux_hidden_state_layer_ids")
            if not ids:
                L = target.config["num_hidden_layers"]
                ids = [2, L // 2, L - 3]
            self.aux_ids = sorted(set(int(i) for i in ids))
            if self.n_layers != 1:
                raise SpecReproError(f"{head.dir}: EAGLE-3 heads with {self.n_layers} layers are not supported (1 only)")
            if ec.get("norm_before_fc") or c.get("norm_before_fc") or c.get("fc_norm") or c.get("norm_output"):
                raise SpecReproError(f"{head.dir}: EAGLE-3 norm_before_fc / fc_norm / norm_output variants are not supported")
            if c.get("draft_vocab_size", c["vocab_size"]) != c["vocab_size"] or "d2t" in w:
                raise SpecReproError(f"{head.dir}: EAGLE-3 heads with a reduced draft vocabulary are not supported")
            self.prefix = "midlayer." if any(k.startswith("midlayer.") for k in w) else "layers.0."
        else:
            self.aux_ids = []

    def _layer_prefix(self, i: int) -> str:
        return self.prefix if self.eagle3 else f"layers.{i}."

    def _pre_attn(self, tok_emb, hidden):
        """Per-layer-0 input: (attention input, residual)."""
        import torch
        import torch.nn.functional as F

        m = self.m
        if self.eagle3:
            p = self.prefix
            e = _rms(tok_emb, m.get(p + "input_layernorm.weight"), m.eps)
            residual = hidden
            hn = _rms(hidden, m.get(p + "hidden_norm.weight"), m.eps)
            return torch.cat([e, hn], -1), residual
        x = F.linear(torch.cat([tok_emb, hidden], -1), m.get("fc.weight"))
        return x, x  # layer 0 has no input_layernorm

    def _post(self, a, residual, p):
        m = self.m
        r = a + residual
        return _mlp(m, p, _rms(r, m.get(p + "post_attention_layernorm.weight"), m.eps)), r

    def _finish(self, x, residual):
        """(hidden for logits, hidden fed to the next step)."""
        if self.eagle3:
            pre = x + residual
            return _rms(pre, self.m.get("norm.weight"), self.m.eps), pre
        out = x + residual
        return out, out

    def drafts(self, prompt: np.ndarray, output: np.ndarray, k: int, hidden=None) -> np.ndarray:
        """``drafts[i, t]``: draft token t (0-based) of the step that starts with i output tokens.
        ``hidden``: the target's normed hidden states of ``(prompt + output)[:-1]`` when already
        known (EAGLE-1 only; e.g. the drafters' training states), instead of the teacher-forced pass here."""
        import torch
        import torch.nn.functional as F

        m = self.m
        P, L = prompt.size, output.size
        if P < 2:
            raise SpecReproError("EAGLE traces need prompts of at least 2 tokens")
        seq = np.concatenate([prompt, output])
        N = seq.size
        if hidden is not None and not self.eagle3:
            h_norm, aux = hidden.to(torch.float32), {}
        else:
            _, h_norm, aux = llama_forward(self.t, seq[:-1], self.aux_ids)
        if self.eagle3:
            hidden = F.linear(torch.cat([aux[i] for i in self.aux_ids], -1), m.get("fc.weight"))
        else:
            hidden = h_norm
        # teacher-forced first pass: at position j read token seq[j+1] and the target's hidden at j
        T = N - 1
        ids = torch.as_tensor(seq[1:])
        pos = torch.arange(T)
        tok = F.embedding(ids, self.embed)
        x, residual = self._pre_attn(tok, hidden)
        tf_kv = []
        for li in range(self.n_layers):
            p = self._layer_prefix(li)
            if li > 0:
                r = x + residual
                x, residual = _rms(r, m.get(p + "input_layernorm.weight"), m.eps), r
            a, kk, vv = _causal_attn(m, p, x, pos)
            tf_kv.append((kk, vv))
            x, residual = self._post(a, residual, p)
            if li == self.n_layers - 1:
                break
        logit_h, feed = self._finish(x, residual)
        # the step starting at i samples its first draft at position P + i - 2
        start = torch.arange(L) + P - 2
        logits = F.linear(logit_h[start], self.lm_head)
        d = logits.argmax(-1)
        drafts = [d]
        h = feed[start]
        cur = start.clone()
        rep = m.n_heads // m.n_kv
        key_pos = torch.arange(T)
        mask_tf = key_pos[None, :] <= start[:, None]  # [L, T]
        extra_kv: list[list[tuple]] = [[] for _ in range(self.n_layers)]
        scale = 1.0 / (m.head_dim ** 0.5)
        for _ in range(k - 1):
            cur = cur + 1
            tok = F.embedding(d, self.embed)
            x, residual = self._pre_attn(tok, h)
            for li in range(self.n_layers):
                p = self._layer_prefix(li)
                if li > 0:
                    r = x + residual
                    x, residual = _rms(r, m.get(p + "input_layernorm.weight"), m.eps), r
                q, kk, vv = _qkv(m, p, x[:, None, :], cur[:, None])  # [L, 1, heads, d]
                extra_kv[li].append((kk[:, 0], vv[:, 0]))
                K_tf, V_tf = tf_kv[li]
                Kx = torch.stack([e[0] for e in extra_kv[li]], 1)  # [L, s, kv, d]
                Vx = torch.stack([e[1] for e in extra_kv[li]], 1)
                qh = q[:, 0]  # [L, heads, d]
                Ktf = K_tf.repeat_interleave(rep, 1)  # [T, heads, d]
                Vtf = V_tf.repeat_interleave(rep, 1)
                s_tf = torch.einsum("lhd,thd->lht", qh, Ktf) * scale
                s_tf = s_tf.masked_fill(~mask_tf[:, None, :], float("-inf"))
                s_x = torch.einsum("lhd,lshd->lhs", qh, Kx.repeat_interleave(rep, 2)) * scale
                att = torch.softmax(torch.cat([s_tf, s_x], -1), -1)
                o = torch.einsum("lht,thd->lhd", att[..., :T], Vtf) + torch.einsum(
                    "lhs,lshd->lhd", att[..., T:], Vx.repeat_interleave(rep, 2))
                a = F.linear(o.reshape(L, -1), m.get(p + "self_attn.o_proj.weight"))
                x, residual = self._post(a, residual, p)
            logit_h, h = self._finish(x, residual)
            d = F.linear(logit_h, self.lm_head).argmax(-1)
            drafts.append(d)
        return torch.stack(drafts, 1).numpy()


# --- API ---------------------------------------------------------------------------------------


def _check_requests(requests: Iterable[Mapping]) -> list[dict]:
    out = []
    for n, r in enumerate(requests):
        for f in ("id", "prompt_token_ids", "generated_token_ids"):
            if f not in r:
                raise SpecReproError(f"request {n}: missing field {f!r}")
        out.append({"id": str(r["id"]), "prompt_token_ids": [int(t) for t in r["prompt_token_ids"]],
                    "generated_token_ids": [int(t) for t in r["generated_token_ids"]]})
        if not out[-1]["prompt_token_ids"]:
            raise SpecReproError(f"request {out[-1]['id']}: empty prompt")
    return out


def oracle_traces(requests: Iterable[Mapping], method: str, *, target_dir: str | os.PathLike | None = None,
                  drafter_dir: str | os.PathLike | None = None, k: int = 20,
                  ngram: tuple[int, int] = (3, 7)) -> list[dict]:
    """Released-format records (``id, prompt_token_ids, generated_token_ids, acc_<method>``)."""
    import torch

    if method not in METHODS:
        raise SpecReproError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    if k < 1:
        raise SpecReproError(f"--k must be at least 1, got {k}")
    reqs = _check_requests(requests)
    accs: list[np.ndarray] = []
    if method == "ngram":
        recs = [TraceRecord(r["id"], np.asarray(r["prompt_token_ids"], np.int64),
                            np.asarray(r["generated_token_ids"], np.int64)) for r in reqs]
        accs = ngram_acc_lens(recs, NgramParams(ngram[0], ngram[1], k)) if recs else []
    else:
        if drafter_dir is None:
            raise SpecReproError(f"method {method} needs the drafter (--drafter-manifest)")
        with torch.inference_mode():
            drafter = _Model(drafter_dir)
            if method == "draft_model":
                for r in reqs:
                    accs.append(_draft_model_acc(r, drafter, k) if r["generated_token_ids"] else np.zeros(0, np.int64))
            else:
                if target_dir is None:
                    raise SpecReproError(f"method {method} needs the target model (--target-manifest)")
                head = _EagleHead(drafter, _Model(target_dir), method == "eagle3")
                for r in reqs:
                    out = np.asarray(r["generated_token_ids"], np.int64)
                    if out.size == 0:
                        accs.append(np.zeros(0, np.int64))
                        continue
                    accs.append(acc_from_drafts(head.drafts(np.asarray(r["prompt_token_ids"], np.int64), out, k), out))
    return [{**r, f"acc_{method}": {"acc_len": [int(v) for v in a]}} for r, a in zip(reqs, accs)]
