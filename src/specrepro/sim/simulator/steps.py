"""Paths: the decode steps of each request under a policy (fixed k, oracle, adaptive), walked over its acceptance
trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...core.costmodel import CostModel
from ...core.errors import SpecReproError
from ...core.policy import AdaptiveParams, adaptive_choice, ngram_first, observe as _observe
from .workload import SimSpec


# --- paths: the decode steps of each request ---------------------------------------------


@dataclass(frozen=True)
class Steps:
    """The decode steps of every drawn request (rows sorted by request, then time).

    Identical for all copies of a request: ``gen`` tokens generated before the step,
    ``input_len`` tokens verified, ``produced`` tokens produced, the drafting charges
    (``ngram_w``: n-gram cost charged; ``eagle_w``: EAGLE cost charged) and
    ``random`` (an n-gram fixed-k step at ``acc_len == 1``: drafted only if matched) and ``eagle_in``
    (the model drafter's charged input tokens where they differ from ``input_len``: the adaptive policy with a
    ``drafter_charge`` other than ``chosen``; None elsewhere).
    """

    request: np.ndarray
    gen: np.ndarray
    input_len: np.ndarray
    produced: np.ndarray
    ngram_w: np.ndarray
    eagle_w: np.ndarray
    random: np.ndarray
    eagle_in: np.ndarray | None = None

    @property
    def final(self) -> np.ndarray:
        """The last step of each request."""
        out = np.ones(self.request.size, dtype=bool)
        out[:-1] = self.request[1:] != self.request[:-1]
        return out


def _flat(arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    lens = np.array([a.size for a in arrays], dtype=np.int64)
    flat = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
    return flat.astype(np.int64), np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


def walk(acc: Sequence[np.ndarray], cap: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Visited positions of every request: ``(request, position)`` in time order.

    From position 0 a request jumps by ``min(acc_len, cap)`` (``cap`` None = oracle)
    until ``position >= L - 1`` (then all ``L`` tokens exist). Pointer doubling: the
    positions at times that are multiples of ``2^m`` expand to those at multiples of
    ``2^(m-1)`` by one more jump of ``2^(m-1)`` steps each.
    """
    flat, off = _flat(acc)
    R = len(acc)
    L = np.diff(off)
    req = np.repeat(np.arange(R), L)
    pos = np.arange(flat.size) - off[req]
    jump = flat if cap is None else np.minimum(flat, cap)
    # node = flat index; the node at position L-1 of each request is its sink (finished)
    if np.any(L < 1):
        raise SpecReproError("walk: every request needs a non-empty trace")
    sink = off[1:] - 1
    nxt = off[req] + np.minimum(pos + jump, L[req] - 1)
    nxt[sink] = sink
    starts = off[:-1]
    jumps = [nxt]
    while not np.all(jumps[-1][starts] == sink) and len(jumps) < 64:
        jumps.append(jumps[-1][jumps[-1]])
    is_sink = np.zeros(flat.size, dtype=bool)
    is_sink[sink] = True
    cur = starts[~is_sink[starts]]
    for j in reversed(jumps[:-1]):
        pair = np.stack([cur, j[cur]], axis=1).ravel()
        cur = pair[~is_sink[pair]]
    return req[cur], pos[cur]


def _fixed_or_oracle_steps(spec: SimSpec, acc, ng, ea) -> Steps:
    engine = spec.engine_k is not None
    cap = (spec.engine_k + 1 if engine else None) if spec.k is None else spec.k + 1
    r, pos = walk(acc, cap)
    flat, off = _flat(acc)
    a = flat[off[r] + pos]
    # the oracle verifies exactly what is accepted (at most engine_k + 1 in the engine); fixed k verifies k + 1
    inp = (a if cap is None else np.minimum(a, cap)) if spec.k is None else np.full(a.size, cap, dtype=np.int64)
    produced = np.minimum(a, inp)
    n = a.size
    if engine:
        # vLLM's drafters ran every step whatever the oracle verified: the lookup, the model drafter's whole draft
        gen = 1 + _exclusive_cumsum_by(r, produced)
        ngram_w = np.ones(n) if spec.proposer in ("ngram", "combined") else np.zeros(n)
        eagle_w = np.ones(n) if spec.proposer in ("eagle", "combined") else np.zeros(n)
        return Steps(r, gen, inp, produced, ngram_w, eagle_w, np.zeros(n, dtype=bool),
                     np.full(n, spec.engine_k + 1, dtype=np.int64))
    if spec.proposer == "ngram":
        ngram_w = (inp > 1).astype(np.float64)  # a step verifying only 1 token drafted nothing
        eagle_w = np.zeros(n)
    elif spec.proposer in ("suffix", "combined3"):
        # the suffix lookup runs every step (charged as n-gram's); Oracle Combine of three: the paper's accounting
        ngram_w, eagle_w = np.ones(n), np.zeros(n)
    elif spec.proposer == "eagle":
        ngram_w, eagle_w = np.zeros(n), np.ones(n)
    else:
        fng, _ = _flat(ng)
        fea, _ = _flat(ea)
        a_ng, a_ea = fng[off[r] + pos], fea[off[r] + pos]
        if spec.combine_cost == "ngram":
            ngram_w, eagle_w = np.ones(n), np.zeros(n)
        elif spec.combine_cost == "winner":  # ties go to the cheaper n-gram
            win_ng = a_ng >= a_ea
            ngram_w, eagle_w = win_ng.astype(np.float64), (~win_ng).astype(np.float64)
        else:
            ngram_w, eagle_w = np.ones(n), np.ones(n)
    rnd = (a == 1) if spec.random_ngram else np.zeros(n, dtype=bool)
    gen = 1 + _exclusive_cumsum_by(r, produced)
    return Steps(r, gen, inp, produced, ngram_w, eagle_w, rnd)


def _exclusive_cumsum_by(group: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per-group running sum of ``x`` before each row (rows grouped contiguously)."""
    cs = np.cumsum(x)
    total_before = cs - x
    first = np.ones(group.size, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    base = np.repeat(total_before[first], np.diff(np.concatenate([np.flatnonzero(first), [group.size]])))
    return total_before - base


def _adaptive_steps(params: AdaptiveParams, ng, ea, P: np.ndarray, B: int, cost: CostModel,
                    matched: Sequence[np.ndarray]) -> Steps:
    """Run the adaptive policy for all requests at once (one array slot per request); ``matched``: whether the
    n-gram lookup proposes (``ngram_k_max`` tokens) at each position (:func:`ngram_matched`)."""
    fng, off = _flat(ng)
    fea, _ = _flat(ea)
    fm = np.concatenate(matched) if len(matched) else np.zeros(0, dtype=bool)
    R = len(ng)
    L = np.diff(off)
    gen = np.ones(R, dtype=np.int64)
    s_ng, f_ng, s_ea, f_ea = (np.zeros(R) for _ in range(4))
    cols = {k: [] for k in ("request", "gen", "input_len", "produced", "ngram")}
    active = np.flatnonzero(gen < L)
    while active.size:
        i = off[active] + gen[active] - 1
        a_ng, a_ea = fng[i], fea[i]
        kv = (B * (P[active] + gen[active])).astype(np.float64)
        m = fm[i]
        ngm, k = adaptive_choice(params, cost, B, kv, s_ng[active], f_ng[active], s_ea[active], f_ea[active],
                                 np.where(m, params.ngram_k_max, 0))
        inp = k + 1
        produced = np.minimum(np.where(ngm, a_ng, a_ea), inp)
        for key, val in zip(cols, (active, gen[active], inp, produced, ngm)):
            cols[key].append(val)
        s_ng[active], f_ng[active], s_ea[active], f_ea[active] = _observe(
            params, ngm, k, produced, a_ng, s_ng[active], f_ng[active], s_ea[active], f_ea[active], m)
        gen[active] += produced
        active = active[gen[active] < L[active]]
    if not cols["request"]:
        z = np.zeros(0, dtype=np.int64)
        return Steps(z, z, z, z, z.astype(float), z.astype(float), z.astype(bool))
    c = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((c["gen"], c["request"]))
    c = {k: v[order] for k, v in c.items()}
    ngram_w = np.ones(c["request"].size)  # the lookup runs every step
    eagle_in = None
    if params.drafter_charge == "chosen":
        eagle_w = (~c["ngram"]).astype(np.float64)
    else:  # the engine's accounting: the drafter runs (part of) its draft whichever draft is verified
        eagle_in = params.drafter_input(~c["ngram"], c["input_len"] - 1).astype(np.int64)
        eagle_w = (eagle_in > 0).astype(np.float64)
    return Steps(c["request"], c["gen"], c["input_len"], c["produced"], ngram_w, eagle_w,
                 np.zeros(c["request"].size, dtype=bool), eagle_in)


def ngram_matched(ng, match_prob: float, seed: int) -> list[np.ndarray]:
    """Whether the n-gram lookup proposed anything at each position: surely where its trace accepted a token
    (``acc_len > 1``), else with probability ``match_prob``, one draw per request and position from
    ``numpy.random.default_rng(seed)`` (the same for all copies of a request: they make the same lookup)."""
    u = np.random.default_rng(seed).random(int(sum(a.size for a in ng)))
    out, i = [], 0
    for a in ng:
        out.append((a > 1) | (u[i:i + a.size] < match_prob))
        i += a.size
    return out


def _ngram_first_steps(spec: SimSpec, ng, ea) -> Steps:
    """vLLM PR #24344's rule (:func:`specrepro.core.policy.ngram_first`) with ``k = adaptive.eagle_k_max``: n-gram's
    ``k``-token draft where its lookup matched (:func:`ngram_matched`), else the model drafter's ``k`` tokens. The
    lookup is charged every step; the model drafter as ``adaptive.drafter_charge`` says (``full``: the engine's)."""
    params = spec.adaptive
    k_max = int(params.eagle_k_max)
    matched = ngram_matched(ng, spec.ngram_match_prob, spec.seed)
    fng, off = _flat(ng)
    fea, _ = _flat(ea)
    fm = np.concatenate(matched) if matched else np.zeros(0, dtype=bool)
    # the proposal n-gram makes where it matched is k tokens (vLLM's lookup proposes k after the match)
    use_ng, k = ngram_first(np.where(fm, k_max, 0), k_max)
    jump = np.where(use_ng, np.minimum(fng, k + 1), np.minimum(fea, k + 1))
    r, pos = walk([jump[off[i]:off[i + 1]] for i in range(len(ng))], None)
    idx = off[r] + pos
    ngm, kk = use_ng[idx], k[idx]
    produced = jump[idx]
    n = r.size
    eagle_in = params.drafter_input(~ngm, kk).astype(np.int64)
    return Steps(r, 1 + _exclusive_cumsum_by(r, produced), kk + 1, produced, np.ones(n),
                 (eagle_in > 0).astype(np.float64), np.zeros(n, dtype=bool), eagle_in)


def decode_steps(spec: SimSpec, acc, ng, ea, P: np.ndarray, B: int, cost: CostModel) -> Steps:
    """The decode steps of every request; only the adaptive policy's depend on ``B`` and the cost."""
    if spec.policy == "adaptive":
        return _adaptive_steps(spec.adaptive, ng, ea, P, B, cost, ngram_matched(ng, spec.ngram_match_prob, spec.seed))
    if spec.policy == "ngram-first":
        return _ngram_first_steps(spec, ng, ea)
    return _fixed_or_oracle_steps(spec, acc, ng, ea)
