"""The test oracle: a plain per-copy, per-step simulation of the same model (simulate_reference)."""

from __future__ import annotations

import random
from typing import Sequence

import numpy as np
import pandas as pd

from ...core.costmodel import CostModel
from .simulate import SimResult, _check_batch_sizes, _per_batch_size, _summary_row
from .steps import ngram_matched
from .workload import (
    SUMMARY_COLUMNS, AdaptiveParams, SimSpec, Workload, adaptive_choice, draw_requests, request_traces,
)


# --- the test oracle -----------------------------------------------------------------------------


def simulate_reference(workload: Workload, spec: SimSpec, batch_sizes: Sequence[int],
                       cost: CostModel) -> SimResult:
    """The same model, simulated copy by copy and step by step with Python's ``random``.

    Slow and plain on purpose: it is what :func:`simulate` is tested against.
    """
    if spec.policy == "batch-schedule":
        return _per_batch_size(simulate_reference, workload, spec, batch_sizes, cost)
    batch_sizes = _check_batch_sizes(batch_sizes)
    idx, rng0 = draw_requests(workload, spec)
    acc, ng, ea = request_traces(workload, spec.proposer, idx)
    P = workload.prompt_len[idx].tolist()
    L = workload.lengths(spec.proposer)[idx].tolist()
    # the adaptive policy's n-gram option: whether the lookup proposes at each position (the fast version's draws)
    matched = ngram_matched(ng, spec.ngram_match_prob, spec.seed) if spec.policy == "adaptive" else [None] * idx.size
    rows = []
    for B in batch_sizes:
        if spec.batching == "continuous":
            rows.append(_reference_continuous(workload, spec, B, cost, idx, acc, ng, ea, P, L, matched))
            continue
        rng = random.Random()
        rng.setstate(rng0.getstate())  # every batch size restarts the stream after the draw
        sd_tpt, base_tpt = [], []
        for j in range(idx.size):
            base = _reference_baseline(cost, B, P[j], L[j])
            sd = _reference_sd_batch(spec, cost, B, P[j], L[j], acc[j], ng[j], ea[j], rng, matched[j])
            tokens = B * L[j]
            sd_tpt.append(tokens / (sum(sd) / B))
            base_tpt.append(tokens / (sum(base) / B))
        base_mean, sd_mean = sum(base_tpt) / len(base_tpt), sum(sd_tpt) / len(sd_tpt)
        # total tokens over total time: the time of each request is its tokens over its throughput
        tok = [B * L[j] for j in range(idx.size)]
        pooled = (sum(tok) / sum(t / x for t, x in zip(tok, sd_tpt))) / (sum(tok) / sum(t / x for t, x in zip(tok, base_tpt)))
        rows.append(_summary_row(workload, spec, B, idx.size, base_mean, sd_mean, (sd_tpt, base_tpt), pooled=pooled))
    return SimResult(pd.DataFrame(rows, columns=SUMMARY_COLUMNS), pd.DataFrame())


def _reference_baseline(cost: CostModel, B: int, P: int, L: int) -> list[float]:
    kv = 0
    prefill = cost.target(kv, B * P)
    kv += B * P + B
    latency = [prefill + cost.overhead_at(B, sd=False)] * B
    gen = [1] * B
    while any(g < L for g in gen):
        n = sum(1 for g in gen if g < L)
        t = cost.target(kv, n)
        kv += n
        for c in range(B):
            if gen[c] < L:
                latency[c] += t + cost.overhead_at(n, sd=False)
                gen[c] += 1
                if gen[c] >= L:
                    kv -= gen[c] + P
    return latency


def _reference_sd_batch(spec, cost, B, P, L, acc, ng, ea, rng, matched) -> list[float]:
    kv = 0
    prefill = cost.target(kv, B * P)
    kv += B * P + B
    latency = [prefill + cost.overhead_at(B)] * B
    gen = [1] * B
    counts = [[0.0, 0.0, 0.0, 0.0] for _ in range(B)]  # adaptive: S, F of n-gram, then of EAGLE
    mode_ng = [False] * B
    unfinished = list(range(B))
    while unfinished:
        inputs = {}
        for c in unfinished:
            pos = gen[c] - 1
            if spec.policy == "adaptive":
                mode_ng[c], k = _reference_choice(spec.adaptive, cost, B, kv, counts[c], bool(matched[pos]))
                inputs[c] = k + 1
            elif spec.policy == "oracle":
                inputs[c] = int(acc[pos])
            else:
                inputs[c] = spec.k + 1
                if spec.random_ngram and acc[pos] == 1 and not rng.random() < spec.ngram_match_prob:
                    inputs[c] = 1
        t = cost.target(kv, sum(inputs.values()))
        still = []
        for c in unfinished:
            pos = gen[c] - 1
            n_in = inputs[c]
            # the copies are identical: each of the len(unfinished) copies drafts as this one does
            ngram_cost, eagle_cost = cost.ngram_draft(t), cost.eagle_draft(kv, n_in, len(unfinished) * n_in)
            if spec.policy == "adaptive":
                e_in = int(spec.adaptive.drafter_input(not mode_ng[c], n_in - 1))
                draft = ngram_cost + (cost.eagle_draft(kv, e_in, len(unfinished) * e_in) if e_in else 0.0)
                got = min(int(ng[pos] if mode_ng[c] else ea[pos]), n_in)
            else:
                got = min(int(acc[pos]), n_in)
                if spec.proposer == "ngram":
                    draft = 0.0 if n_in == 1 else ngram_cost
                elif spec.proposer in ("suffix", "combined3"):
                    draft = ngram_cost
                elif spec.proposer == "eagle":
                    draft = eagle_cost
                elif spec.combine_cost == "ngram":
                    draft = ngram_cost
                elif spec.combine_cost == "winner":
                    draft = ngram_cost if ng[pos] >= ea[pos] else eagle_cost
                else:
                    draft = ngram_cost + eagle_cost
            latency[c] += t + draft + cost.overhead_at(sum(inputs.values()))
            if spec.policy == "adaptive":
                counts[c] = _reference_observe(spec.adaptive, mode_ng[c], n_in - 1, got, int(ng[pos]), counts[c],
                                               bool(matched[pos]))
            gen[c] += got
            kv += got
            if gen[c] >= L:
                kv -= gen[c] + P
            else:
                still.append(c)
        unfinished = still
    return latency


def _reference_choice(ad: AdaptiveParams, cost: CostModel, B: int, kv: float, counts,
                      proposes: bool) -> tuple[bool, int]:
    """The adaptive policy's choice for one copy (the policy itself is shared with the fast version);
    ``proposes``: whether the n-gram lookup proposes (``ngram_k_max`` tokens) here."""
    one = lambda x: np.array([float(x)])  # noqa: E731
    ng_len = np.array([ad.ngram_k_max if proposes else 0])
    use_ng, k = adaptive_choice(ad, cost, B, one(kv), *(one(x) for x in counts), ng_len)
    return bool(use_ng[0]), int(k[0])


def _reference_observe(ad: AdaptiveParams, used_ng: bool, k: int, got: int, acc_ng: int, counts,
                       proposed: bool) -> list[float]:
    """Decay the counts, then add what the step showed (see :class:`AdaptiveParams`); n-gram's counts only
    where its lookup ``proposed``."""
    s_ng, f_ng, s_ea, f_ea = counts
    s_ea, f_ea = s_ea * ad.decay, f_ea * ad.decay
    drafts_ok = got - 1
    if proposed:
        s_ng, f_ng = s_ng * ad.decay, f_ng * ad.decay
        if used_ng:
            s_ng, f_ng = s_ng + drafts_ok, f_ng + float(drafts_ok < k)
        else:
            seen = acc_ng - 1  # the n-gram proposal against the `got` tokens now known
            s_ng, f_ng = (s_ng + seen, f_ng + 1.0) if seen < got else (s_ng + got, f_ng + 0.0)
    if used_ng:
        return [s_ng, f_ng, s_ea, f_ea]
    return [s_ng, f_ng, s_ea + drafts_ok, f_ea + float(drafts_ok < k)]


def _reference_continuous(workload, spec, B, cost, idx, acc, ng, ea, P, L, matched) -> dict:
    """Continuous batching, step by step: admit in order into free slots, run, retire; throughput
    counted up to the step that admits the last request (the whole run if all fit at once)."""
    R = idx.size
    # the same match draws as the fast version: one per decode step, in request order then time order
    order_counter = _reference_step_rows(spec, acc, L)
    u = np.random.default_rng(spec.seed).random(len(order_counter)) if spec.random_ngram else None

    def run(sd: bool) -> float:
        queue = list(range(R))
        active: list[int] = []
        gen = [0] * R
        step_no = [0] * R
        counts = [[0.0, 0.0, 0.0, 0.0] for _ in range(R)]
        time = tokens = 0.0
        window_open = True
        while queue or active:
            admitted = []
            while queue and len(active) + len(admitted) < B:
                admitted.append(queue.pop(0))
            last_admission = bool(admitted) and not queue and B < R
            kv = sum(P[i] + gen[i] for i in active)
            n_tok = sum(P[i] for i in admitted)
            plan = {}
            for i in active:
                pos = gen[i] - 1
                if not sd:
                    plan[i] = (1, 1, False, False)
                    continue
                if spec.policy == "adaptive":
                    # the policy prices a step as if the batch were B copies of this request
                    use_ng, k = _reference_choice(spec.adaptive, cost, B, B * (P[i] + gen[i]), counts[i],
                                                  bool(matched[i][pos]))
                    got = min(int(ng[i][pos] if use_ng else ea[i][pos]), k + 1)
                    plan[i] = (k + 1, got, True, not use_ng, use_ng)
                    continue
                n_in = int(acc[i][pos]) if spec.policy == "oracle" else spec.k + 1
                uses_ng = spec.proposer in ("ngram", "suffix", "combined3") or (
                    spec.proposer == "combined" and spec.combine_cost != "winner")
                uses_ea = spec.proposer == "eagle" or (spec.proposer == "combined" and spec.combine_cost == "both")
                if spec.proposer == "combined" and spec.combine_cost == "winner":
                    uses_ng = ng[i][pos] >= ea[i][pos]
                    uses_ea = not uses_ng
                if spec.random_ngram and acc[i][pos] == 1:
                    if not u[order_counter[(i, step_no[i])]] < spec.ngram_match_prob:
                        n_in = 1
                if spec.proposer == "ngram" and n_in == 1:
                    uses_ng = False
                plan[i] = (n_in, min(int(acc[i][pos]), n_in), uses_ng, uses_ea)
            n_tok += sum(p[0] for p in plan.values())
            t = cost.target(kv, n_tok)
            # per token the step samples: every decode input, one per prefilling request
            step = t + cost.overhead_at(sum(p[0] for p in plan.values()) + len(admitted), sd)
            if any(p[2] for p in plan.values()):
                step += cost.ngram_draft(t)
            ea_inputs = [p[0] for p in plan.values() if p[3]]
            if ea_inputs:
                step += cost.eagle_draft(kv, max(ea_inputs), sum(ea_inputs))
            produced = len(admitted)
            still = []
            for i in active:
                n_in, got = plan[i][0], plan[i][1]
                produced += min(got, L[i] - gen[i])
                if sd and spec.policy == "adaptive":
                    counts[i] = _reference_observe(spec.adaptive, plan[i][4], n_in - 1, got, int(ng[i][gen[i] - 1]),
                                                   counts[i], bool(matched[i][gen[i] - 1]))
                gen[i] += got
                step_no[i] += 1
                if gen[i] < L[i]:
                    still.append(i)
            for i in admitted:
                gen[i] = 1
                if gen[i] < L[i]:
                    still.append(i)
            active = still
            if window_open:
                time += step
                tokens += produced
            if last_admission:
                window_open = False
        return tokens / time

    return _summary_row(workload, spec, B, R, run(False), run(True))


def _reference_step_rows(spec, acc, L) -> dict:
    """(request, step number) -> row of the fast version's step table (request, then time), for the
    n-gram fixed-k match draws of continuous batching."""
    if not spec.random_ngram:
        return {}
    out, row = {}, 0
    for i, a in enumerate(acc):
        g, s = 1, 0
        while g < L[i]:
            out[(i, s)] = row
            row += 1
            g += min(int(a[g - 1]), spec.k + 1)
            s += 1
    return out
