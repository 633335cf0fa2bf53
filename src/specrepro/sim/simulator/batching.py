"""Batching: the paper's B copies of one request (replicate) and continuous batching of different requests, from the
decode steps and the cost model."""

from __future__ import annotations

import heapq

import numpy as np

from ...core.costmodel import CostModel
from .steps import Steps
from .workload import SimSpec


# --- paper mode: B copies of one request ----------------------------------------------------


def baseline_latency(cost: CostModel, B: int, P: np.ndarray, L: np.ndarray) -> np.ndarray:
    """Per-copy latency without SD: prefill, then ``L - 1`` one-token steps with a growing cache."""
    P = P.astype(np.float64)
    n = (L - 1).astype(np.float64)
    prefill = cost.target(0.0, B * P)
    over = cost.overhead_at(B, sd=False)  # B tokens sampled at the prefill and at every step
    per_step = cost.c_kv * B * (P + 1) + cost.c_compute * B + cost.c_fixed + over
    return prefill + over + n * per_step + cost.c_kv * B * n * (n - 1) / 2


def _replicate(spec: SimSpec, steps: Steps, P: np.ndarray, L: np.ndarray, B: int, cost: CostModel,
               uniforms: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Mean per-copy SD and baseline latency of each batch of ``B`` copies."""
    R = P.size
    r = steps.request
    Pr = P[r]
    kv = (B * (Pr + steps.gen)).astype(np.float64)
    inp = steps.input_len.astype(np.float64)
    n_tok = B * inp
    drafting = steps.ngram_w.copy()
    if steps.random.any():
        # the j-th random step's B copies draw uniforms[B*j : B*j + B]
        hits = np.concatenate([[0], np.cumsum(uniforms[: B * int(steps.random.sum())] < spec.ngram_match_prob)])
        j = np.arange(int(steps.random.sum()))
        matched = (hits[B * (j + 1)] - hits[B * j]).astype(np.float64)
        n_tok[steps.random] = matched * inp[steps.random] + (B - matched)
        drafting[steps.random] = matched / B
    T = cost.target(kv, n_tok)
    # copy c drafts after copies 0..c-1 updated the cache: +produced each, or -(gen + P) if they finished
    delta = np.where(steps.final, -(steps.gen + Pr), steps.produced).astype(np.float64)
    e_in = inp if steps.eagle_in is None else steps.eagle_in
    eagle = cost.eagle_draft(kv + (B - 1) / 2 * delta, e_in, B * e_in)
    per_step = T + cost.overhead_at(n_tok) + drafting * cost.ngram_draft(T) + steps.eagle_w * eagle
    prefill = cost.target(0.0, B * P.astype(np.float64)) + cost.overhead_at(B)
    sd = prefill + np.bincount(r, weights=per_step, minlength=R)
    return sd, baseline_latency(cost, B, P, L)


# --- continuous batching ---------------------------------------------------------------------


def _schedule(n_steps: np.ndarray, B: int) -> np.ndarray:
    """First global step of each request: FIFO admission into ``B`` slots; a request holds
    its slot for one prefill step plus ``n_steps`` decode steps."""
    free = [0] * min(B, n_steps.size)
    heapq.heapify(free)
    start = np.zeros(n_steps.size, dtype=np.int64)
    for i, s in enumerate(n_steps.tolist()):
        t = heapq.heappop(free)
        start[i] = t
        heapq.heappush(free, t + 1 + s)
    return start


def _continuous_throughput(steps: Steps, P: np.ndarray, L: np.ndarray, B: int, cost: CostModel,
                           matched: np.ndarray | None, sd: bool = True) -> float:
    """Steady-state throughput of serving the requests with ``B`` slots (continuous batching); ``sd``: the steps are
    SD steps (their overhead ``cost.step_overhead``; the baseline's, ``sd=False``, take ``cost.overhead``).

    Measured from the first step to the step that admits the last queued request, while all
    ``B`` slots are busy: the drain after it (fewer requests in flight, a tail set by the
    longest request) is not what a loaded server sees. With ``B`` >= the number of requests
    there is no such phase and the whole run counts.
    """
    R = P.size
    n_steps = np.bincount(steps.request, minlength=R)
    start = _schedule(n_steps, B)
    first_row = np.concatenate([[0], np.cumsum(n_steps)[:-1]])
    t_local = np.arange(steps.request.size) - first_row[steps.request]
    g = start[steps.request] + 1 + t_local  # global step of each decode step
    n_global = int(max((start + 1 + n_steps).max(), 1))
    inp = steps.input_len.astype(np.float64)
    ngram_w = steps.ngram_w.copy()
    if matched is not None and steps.random.any():
        inp = np.where(steps.random & ~matched, 1.0, inp)
        ngram_w = np.where(steps.random & ~matched, 0.0, ngram_w)
    kv = np.bincount(g, weights=(P[steps.request] + steps.gen).astype(np.float64), minlength=n_global)
    n_tok = np.bincount(g, weights=inp, minlength=n_global)
    # tokens each step samples (its overhead per token): every decode input, one per prefilling request
    sampled = n_tok + np.bincount(start, minlength=n_global)
    n_tok += np.bincount(start, weights=P.astype(np.float64), minlength=n_global)
    T = cost.target(kv, n_tok)
    any_ng = np.bincount(g, weights=ngram_w, minlength=n_global) > 0
    ea_in = np.zeros(n_global)
    sel = steps.eagle_w > 0
    e_in = (inp if steps.eagle_in is None else steps.eagle_in)[sel]
    np.maximum.at(ea_in, g[sel], e_in)
    ea_tokens = np.bincount(g[sel], weights=e_in.astype(np.float64), minlength=n_global)
    eagle = np.where(ea_in > 0, cost.eagle_draft(kv, ea_in, ea_tokens), 0.0)
    step_time = T + cost.overhead_at(sampled, sd) + any_ng * cost.ngram_draft(T) + eagle
    end = int(start.max()) if B < R else n_global - 1
    # tokens: one per prefill, then each decode step's tokens up to the request's end
    real = np.minimum(steps.produced, L[steps.request] - steps.gen).astype(np.float64)
    tokens = np.count_nonzero(start <= end) + real[g <= end].sum()
    return float(tokens / step_time[: end + 1].sum())


def _baseline_steps(L: np.ndarray) -> Steps:
    n = np.maximum(L - 1, 0)
    r = np.repeat(np.arange(L.size), n)
    gen = 1 + np.arange(r.size) - np.repeat(np.concatenate([[0], np.cumsum(n)[:-1]]), n)
    one = np.ones(r.size, dtype=np.int64)
    return Steps(r, gen, one, one, np.zeros(r.size), np.zeros(r.size), np.zeros(r.size, dtype=bool))


def continuous_matches(spec: SimSpec, steps: Steps) -> np.ndarray | None:
    """Match draws of n-gram fixed-k steps in continuous mode: one per random step, in row order,
    from ``numpy.random.default_rng(seed)`` (no paper stream to follow here)."""
    if not spec.random_ngram:
        return None
    u = np.random.default_rng(spec.seed).random(steps.request.size)
    return u < spec.ngram_match_prob
