"""Speedup simulator driven by per-position acceptance traces and a step-time cost model.

Paper mode (the default) follows the authors' released simulator
(SpecDecode-Bench/simulator), reimplemented from its model:

* requests: the records with a non-empty trace, in file order; ``num_requests`` of
  them drawn with ``random.Random(seed).sample``; a batch is ``B`` identical copies
  of one drawn request;
* output length ``L`` = length of the proposer's ``acc_len`` (combined: the shorter);
* target step ``T(kv, n)``; per-step overhead on every copy;
* baseline: one prefill over all prompt tokens, then one token per copy per step;
* speculative: each copy verifies ``input_len`` tokens (fixed-k: k+1; oracle:
  ``acc_len`` at position ``generated - 1``) and produces ``min(acc_len, input_len)``;
  n-gram with fixed k finds no match at a position with ``acc_len == 1`` with
  probability ``1 - p(dataset)`` (then ``input_len = 1``, no drafting cost);
  combined = per-position max of the two traces, oracle policy, n-gram drafting cost;
* speedup = mean over batches of SD throughput / mean of baseline throughput.

Intervals (not in the authors' simulator; the point values are untouched): in replicate batching every
drawn request is one batch, so the speedup's 95 % interval is the paired bootstrap over the drawn requests
of mean(SD throughput) / mean(baseline throughput) (:func:`specrepro.core.uncertainty.bootstrap_ratio_ci`),
columns ``ci_low`` and ``ci_high`` of the summary (``requests`` = n). Continuous batching measures one
throughput of the whole schedule, not a mean over requests: its rows have no interval (a bootstrap would
re-simulate the schedule thousands of times).

Why the fast version is exact: a step's tokens do not depend on the n-gram match
draw (at ``acc_len == 1`` a copy produces one token either way), so the ``B``
copies of a request move in lockstep along one path of positions that does not
depend on ``B``. Paths are found for all requests at once by pointer doubling; the
cost of every batch size is then a handful of array operations, and the random
draws of each step are a contiguous block of ``B`` values of the Mersenne Twister
stream that follows the sample (numpy's ``RandomState`` continues Python's state).

Beyond the paper: ``combine_cost`` (``winner``: the winning proposer's drafting
cost, ``both``: both proposers draft every step), ``batching="continuous"`` (B
different requests in flight, a finished one replaced by the next; throughput while
all B slots are busy), ``pairing="equal-length"`` (only requests whose two traces
have the output's length) and the online ``adaptive`` policy (see
:class:`AdaptiveParams`; it prices steps at the batch size, so its path is walked
once per batch size).

Today's engines (none of it changes paper mode): any ``fixed-<k>``; proposer ``suffix`` (the
``acc_suffix`` traces of :mod:`specrepro.core.suffix`): its lookup is charged as n-gram's drafting cost at
every step and a fixed k always verifies ``k + 1`` tokens, as vLLM 0.34's GPU suffix speculator fills
missing draft slots (no no-match draw); ``combined3``: Oracle Combine of n-gram, EAGLE and suffix (the
paper's accounting: n-gram's drafting cost); policy ``batch-schedule``: vLLM's
``num_speculative_tokens_per_batch_size`` (:func:`schedule_k`), i.e. at batch size B the fixed k the
schedule gives B (k = 0: no speculation, speedup 1).

:func:`simulate_reference` is a plain per-copy, per-step simulation of the same
model, kept as the test oracle for :func:`simulate`.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.costmodel import CostModel
from ..core.errors import SpecReproError
from ..core.traces import TraceRecord, read_trace
from ..core.uncertainty import Interval, bootstrap_ratio_ci, interval_metrics

from ..jobspec.schedule import check_schedule, schedule_k  # noqa: F401 - re-exported
from .names import (  # noqa: F401 - the simulator's names, re-exported
    BATCHING, COMBINE_COSTS, NGRAM_MATCH_PROB, PAIRING, PAPER_DRAW, PAPER_POLICIES, POLICIES, PROPOSERS,
    SCHEDULED_PROPOSERS, is_policy, policy_arg,
)

#: columns of the summary table, in order
SUMMARY_COLUMNS = [
    "dataset", "proposer", "policy", "batch_size", "speedup", "batching", "pairing", "combine_cost",
    "requests", "baseline_throughput", "sd_throughput", "ci_low", "ci_high",
]

def ngram_match_prob(dataset: str, given: float | None = None) -> float:
    """The n-gram match probability of a dataset: ``given`` if set, else the paper's value."""
    if given is not None:
        if not 0.0 <= given <= 1.0:
            raise SpecReproError(f"--ngram-match-prob must be in [0, 1], got {given}")
        return float(given)
    if dataset not in NGRAM_MATCH_PROB:
        raise SpecReproError(
            f"dataset {dataset!r} has no n-gram match probability (known: {', '.join(sorted(NGRAM_MATCH_PROB))}); "
            "give --ngram-match-prob"
        )
    return NGRAM_MATCH_PROB[dataset]


# --- inputs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """The requests of one trace file: prompt lengths and both proposers' traces."""

    dataset: str
    ids: tuple[str, ...]
    prompt_len: np.ndarray
    output_len: np.ndarray
    ngram: tuple[np.ndarray, ...]
    eagle: tuple[np.ndarray, ...]
    suffix: tuple[np.ndarray, ...] | None = None  #: acc_suffix (specrepro.core.suffix), when the records have it

    @classmethod
    def from_records(cls, records: Sequence[TraceRecord], dataset: str) -> "Workload":
        for r in records:
            for p in ("ngram", "eagle"):
                if p not in r.acc_len:
                    raise SpecReproError(f"request {r.id!r} (line {r.line}) has no 'acc_{p}.acc_len' trace")
        return cls(
            dataset=dataset,
            ids=tuple(r.id for r in records),
            prompt_len=np.array([r.prompt_token_ids.size for r in records], dtype=np.int64),
            output_len=np.array([r.output_len for r in records], dtype=np.int64),
            ngram=tuple(r.acc_len["ngram"].astype(np.int64) for r in records),
            eagle=tuple(r.acc_len["eagle"].astype(np.int64) for r in records),
            suffix=(tuple(r.acc_len["suffix"].astype(np.int64) for r in records)
                    if records and all("suffix" in r.acc_len for r in records) else None),
        )

    def suffix_traces(self) -> tuple[np.ndarray, ...]:
        if self.suffix is None:
            raise SpecReproError(
                f"{self.dataset}: the trace has no 'acc_suffix' (add it with `specrepro suffix-trace`)")
        return self.suffix

    def lengths(self, proposer: str) -> np.ndarray:
        """Output length ``L`` the simulator uses per request (the proposer's trace length; combined: the shortest)."""
        ng = np.array([a.size for a in self.ngram], dtype=np.int64)
        ea = np.array([a.size for a in self.eagle], dtype=np.int64)
        if proposer in ("suffix", "combined3"):
            su = np.array([a.size for a in self.suffix_traces()], dtype=np.int64)
            return su if proposer == "suffix" else np.minimum(np.minimum(ng, ea), su)
        return {"ngram": ng, "eagle": ea, "combined": np.minimum(ng, ea)}[proposer]

    def equal_length(self) -> np.ndarray:
        """Requests whose two traces both have one value per recorded output token."""
        return (self.lengths("ngram") == self.output_len) & (self.lengths("eagle") == self.output_len)


@dataclass(frozen=True)
class AdaptiveParams:
    """The online adaptive policy (proposer ``combined``, policy ``adaptive``).

    It sees only the past. For each proposer it keeps decayed counts of accepted (S) and
    rejected (F) draft tokens and estimates the per-token acceptance
    ``alpha = (S + w * prior) / (S + F + w)``. Each step it picks the proposer and k
    (1..k_max) that maximise the expected tokens ``(1 - alpha^(k+1)) / (1 - alpha)`` per unit
    of step time under the cost model, at the batch size and cache size of that step. The
    cheap n-gram lookup runs every step (and is charged): after the step its proposal is
    compared with the tokens the step produced, so n-gram is observed even while EAGLE
    drafts; EAGLE is observed only when it drafts. An n-gram step is charged as matched.
    """

    decay: float = 0.7
    prior_weight: float = 2.0
    eagle_prior: float = 0.7
    ngram_prior: float = 0.3
    eagle_k_max: int = 7
    ngram_k_max: int = 20


def adaptive_choice(params: AdaptiveParams, cost: CostModel, B: int, kv: np.ndarray, s_ng: np.ndarray,
                    f_ng: np.ndarray, s_ea: np.ndarray, f_ea: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(use n-gram, k) per request: the choice with the most expected tokens per second."""
    w = params.prior_weight

    def best(s, f, prior, k_max, eagle):
        alpha = np.clip((s + w * prior) / (s + f + w), 0.0, 0.999)[:, None]
        k = np.arange(1, k_max + 1)[None, :]
        tokens = (1 - alpha ** (k + 1)) / (1 - alpha)
        t = cost.target(kv[:, None], B * (k + 1))
        tau = t + cost.overhead + cost.ngram_draft(t)  # the n-gram lookup runs every step
        if eagle:
            tau = tau + cost.eagle_draft(kv[:, None], k + 1)
        rate = tokens / tau
        j = np.argmax(rate, axis=1)
        return rate[np.arange(rate.shape[0]), j], j + 1

    r_ng, k_ng = best(s_ng, f_ng, params.ngram_prior, params.ngram_k_max, False)
    r_ea, k_ea = best(s_ea, f_ea, params.eagle_prior, params.eagle_k_max, True)
    use_ng = r_ng >= r_ea
    return use_ng, np.where(use_ng, k_ng, k_ea)


@dataclass(frozen=True)
class SimSpec:
    """One simulated configuration (all batch sizes share it)."""

    proposer: str
    policy: str
    ngram_match_prob: float = 1.0
    num_requests: int = 300
    seed: int = 42
    combine_cost: str = "ngram"
    batching: str = "replicate"
    pairing: str = "index"
    adaptive: AdaptiveParams = AdaptiveParams()
    #: batch-schedule policy: vLLM's num_speculative_tokens_per_batch_size, ((start, end, k), ...)
    schedule: tuple = ()

    def __post_init__(self) -> None:
        if self.proposer not in PROPOSERS:
            raise SpecReproError(f"unknown proposer {self.proposer!r} (known: {', '.join(PROPOSERS)})")
        if not is_policy(self.policy):
            raise SpecReproError(
                f"unknown policy {self.policy!r} (known: fixed-<k>, {', '.join(p for p in POLICIES if '-' not in p or p == 'batch-schedule')})")
        if self.policy == "batch-schedule":
            if self.proposer not in SCHEDULED_PROPOSERS:
                raise SpecReproError(
                    f"policy 'batch-schedule' drives one proposer ({', '.join(SCHEDULED_PROPOSERS)}), not {self.proposer!r}")
            object.__setattr__(self, "schedule", check_schedule(self.schedule))
        if self.proposer == "combined3" and (self.policy != "oracle" or self.combine_cost != "ngram"):
            raise SpecReproError("proposer 'combined3' (Oracle Combine of n-gram, EAGLE, suffix) takes policy 'oracle' "
                                 "with the paper's drafting cost only")
        if self.proposer == "combined" and self.policy not in ("oracle", "adaptive"):
            raise SpecReproError(f"proposer 'combined' takes policy 'oracle' or 'adaptive', not {self.policy!r}")
        if self.policy == "adaptive" and self.proposer != "combined":
            raise SpecReproError("policy 'adaptive' chooses the proposer itself: use it with --proposer combined")
        if self.combine_cost not in COMBINE_COSTS:
            raise SpecReproError(f"unknown combine cost {self.combine_cost!r} (known: {', '.join(COMBINE_COSTS)})")
        if self.combine_cost != "ngram" and not (self.proposer == "combined" and self.policy == "oracle"):
            raise SpecReproError("--combine-cost applies to --proposer combined --policy oracle only")
        if self.batching not in BATCHING:
            raise SpecReproError(f"unknown batching {self.batching!r} (known: {', '.join(BATCHING)})")
        if self.pairing not in PAIRING:
            raise SpecReproError(f"unknown pairing {self.pairing!r} (known: {', '.join(PAIRING)})")
        if self.num_requests < 1:
            raise SpecReproError(f"--num-requests must be at least 1, got {self.num_requests}")

    @property
    def k(self) -> int | None:
        """Draft tokens per step of a fixed-k policy; None otherwise."""
        return int(self.policy.split("-")[1]) if self.policy.startswith("fixed-") else None

    def at_batch_size(self, batch_size: int) -> "SimSpec | None":
        """The fixed-k spec a batch-schedule policy runs at ``batch_size`` (None: k = 0, no drafting)."""
        from dataclasses import replace

        k = schedule_k(self.schedule, batch_size)
        return replace(self, policy=f"fixed-{k}", schedule=()) if k > 0 else None

    @property
    def random_ngram(self) -> bool:
        """Whether n-gram's no-match draw applies (n-gram with a fixed k)."""
        return self.proposer == "ngram" and self.k is not None


def draw_requests(workload: Workload, spec: SimSpec) -> tuple[np.ndarray, random.Random]:
    """Indices of the drawn requests, and the generator right after the draw.

    ``min(num_requests, eligible)`` requests are drawn, so an equal-length subset
    smaller than ``num_requests`` is used whole (in the drawn order).
    """
    eligible = workload.lengths(spec.proposer) > 0
    if spec.pairing == "equal-length":
        eligible &= workload.equal_length()
    pool = np.flatnonzero(eligible)
    if pool.size == 0:
        raise SpecReproError(f"{workload.dataset}: no request with a non-empty {spec.proposer} trace")
    rng = random.Random(spec.seed)
    picked = rng.sample(range(pool.size), min(spec.num_requests, pool.size))
    return pool[np.array(picked, dtype=np.int64)], rng


def _numpy_stream(rng: random.Random) -> np.random.RandomState:
    """A numpy generator that continues ``rng``'s Mersenne Twister stream exactly."""
    version, state, _gauss = rng.getstate()
    rs = np.random.RandomState()
    rs.set_state(("MT19937", np.array(state[:624], dtype=np.uint32), state[624]))
    return rs


def request_traces(workload: Workload, proposer: str, idx: np.ndarray):
    """(acc arrays used for acceptance, n-gram arrays, EAGLE arrays), each cut to ``L``, for requests ``idx``."""
    L = workload.lengths(proposer)[idx]
    ng = [workload.ngram[i][:n] for i, n in zip(idx, L)]
    ea = [workload.eagle[i][:n] for i, n in zip(idx, L)]
    if proposer in ("suffix", "combined3"):
        su = [workload.suffix_traces()[i][:n] for i, n in zip(idx, L)]
        if proposer == "suffix":
            return su, ng, ea
        return [np.maximum(np.maximum(a, b), c) for a, b, c in zip(ng, ea, su)], ng, ea
    if proposer == "combined":
        return [np.maximum(a, b) for a, b in zip(ng, ea)], ng, ea
    return (ng if proposer == "ngram" else ea), ng, ea


# --- paths: the decode steps of each request ---------------------------------------------


@dataclass(frozen=True)
class Steps:
    """The decode steps of every drawn request (rows sorted by request, then time).

    Identical for all copies of a request: ``gen`` tokens generated before the step,
    ``input_len`` tokens verified, ``produced`` tokens produced, the drafting charges
    (``ngram_w``: n-gram cost charged; ``eagle_w``: EAGLE cost charged) and
    ``random`` (an n-gram fixed-k step at ``acc_len == 1``: drafted only if matched).
    """

    request: np.ndarray
    gen: np.ndarray
    input_len: np.ndarray
    produced: np.ndarray
    ngram_w: np.ndarray
    eagle_w: np.ndarray
    random: np.ndarray

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
    cap = None if spec.k is None else spec.k + 1
    r, pos = walk(acc, cap)
    flat, off = _flat(acc)
    a = flat[off[r] + pos]
    inp = a if cap is None else np.full(a.size, cap, dtype=np.int64)
    produced = np.minimum(a, inp)
    n = a.size
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


def _adaptive_steps(params: AdaptiveParams, ng, ea, P: np.ndarray, B: int, cost: CostModel) -> Steps:
    """Run the adaptive policy for all requests at once (one array slot per request)."""
    fng, off = _flat(ng)
    fea, _ = _flat(ea)
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
        ngm, k = adaptive_choice(params, cost, B, kv, s_ng[active], f_ng[active], s_ea[active], f_ea[active])
        inp = k + 1
        produced = np.minimum(np.where(ngm, a_ng, a_ea), inp)
        for key, val in zip(cols, (active, gen[active], inp, produced, ngm)):
            cols[key].append(val)
        s_ng[active], f_ng[active], s_ea[active], f_ea[active] = _observe(
            params, ngm, k, produced, a_ng, s_ng[active], f_ng[active], s_ea[active], f_ea[active])
        gen[active] += produced
        active = active[gen[active] < L[active]]
    if not cols["request"]:
        z = np.zeros(0, dtype=np.int64)
        return Steps(z, z, z, z, z.astype(float), z.astype(float), z.astype(bool))
    c = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((c["gen"], c["request"]))
    c = {k: v[order] for k, v in c.items()}
    ngram_w = np.ones(c["request"].size)  # the lookup runs every step
    eagle_w = (~c["ngram"]).astype(np.float64)
    return Steps(c["request"], c["gen"], c["input_len"], c["produced"], ngram_w, eagle_w,
                 np.zeros(c["request"].size, dtype=bool))


def _observe(params: AdaptiveParams, used_ng, k, produced, acc_ng, s_ng, f_ng, s_ea, f_ea):
    """Decayed accepted/rejected counts after a step (array or scalar arguments alike)."""
    d = produced - 1  # draft tokens accepted
    rejected = (d < k).astype(np.float64) if isinstance(d, np.ndarray) else float(d < k)
    s_ng, f_ng, s_ea, f_ea = (x * params.decay for x in (s_ng, f_ng, s_ea, f_ea))
    # the n-gram proposal checked against the `produced` tokens now known: a mismatch, or all of them agree
    m = acc_ng - 1
    seen_s = np.where(m < produced, m, produced) if isinstance(m, np.ndarray) else (m if m < produced else produced)
    seen_f = (m < produced).astype(np.float64) if isinstance(m, np.ndarray) else float(m < produced)
    s_ng = s_ng + np.where(used_ng, d, seen_s)
    f_ng = f_ng + np.where(used_ng, rejected, seen_f)
    s_ea = s_ea + np.where(used_ng, 0, d)
    f_ea = f_ea + np.where(used_ng, 0.0, rejected)
    return s_ng, f_ng, s_ea, f_ea


def decode_steps(spec: SimSpec, acc, ng, ea, P: np.ndarray, B: int, cost: CostModel) -> Steps:
    """The decode steps of every request; only the adaptive policy's depend on ``B`` and the cost."""
    if spec.policy == "adaptive":
        return _adaptive_steps(spec.adaptive, ng, ea, P, B, cost)
    return _fixed_or_oracle_steps(spec, acc, ng, ea)


# --- paper mode: B copies of one request ----------------------------------------------------


def baseline_latency(cost: CostModel, B: int, P: np.ndarray, L: np.ndarray) -> np.ndarray:
    """Per-copy latency without SD: prefill, then ``L - 1`` one-token steps with a growing cache."""
    P = P.astype(np.float64)
    n = (L - 1).astype(np.float64)
    prefill = cost.target(0.0, B * P)
    per_step = cost.c_kv * B * (P + 1) + cost.c_compute * B + cost.c_fixed + cost.overhead
    return prefill + cost.overhead + n * per_step + cost.c_kv * B * n * (n - 1) / 2


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
    eagle = cost.eagle_draft(kv + (B - 1) / 2 * delta, inp)
    per_step = T + cost.overhead + drafting * cost.ngram_draft(T) + steps.eagle_w * eagle
    sd = cost.target(0.0, B * P.astype(np.float64)) + cost.overhead + np.bincount(r, weights=per_step, minlength=R)
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
                           matched: np.ndarray | None) -> float:
    """Steady-state throughput of serving the requests with ``B`` slots (continuous batching).

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
    n_tok += np.bincount(start, weights=P.astype(np.float64), minlength=n_global)
    T = cost.target(kv, n_tok)
    any_ng = np.bincount(g, weights=ngram_w, minlength=n_global) > 0
    ea_in = np.zeros(n_global)
    sel = steps.eagle_w > 0
    np.maximum.at(ea_in, g[sel], inp[sel])
    eagle = np.where(ea_in > 0, cost.eagle_draft(kv, ea_in), 0.0)
    step_time = T + cost.overhead + any_ng * cost.ngram_draft(T) + eagle
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


# --- driver ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimResult:
    """``summary``: one row per batch size; ``batches``: one row per batch (paper mode only)."""

    summary: pd.DataFrame
    batches: pd.DataFrame


def _summary_row(workload, spec, B, R, base_tpt, sd_tpt, per_request=None) -> dict:
    """One summary row; ``per_request = (sd throughputs, baseline throughputs)`` of the batches gives the interval."""
    iv = bootstrap_ratio_ci(*per_request) if per_request is not None else None
    return {
        "dataset": workload.dataset, "proposer": spec.proposer, "policy": spec.policy, "batch_size": B,
        "speedup": sd_tpt / base_tpt, "batching": spec.batching, "pairing": spec.pairing,
        "combine_cost": spec.combine_cost, "requests": R, "baseline_throughput": base_tpt, "sd_throughput": sd_tpt,
        "ci_low": iv.low if iv else float("nan"), "ci_high": iv.high if iv else float("nan"),
    }


def _per_batch_size(run, workload: Workload, spec: SimSpec, batch_sizes: Sequence[int], cost: CostModel) -> SimResult:
    """A batch-schedule policy: at each batch size, the fixed k its schedule gives (k = 0: no SD, speedup 1).

    A batch of B copies (or B slots, continuous) schedules B requests every step, so vLLM's lookup by the
    number of scheduled requests gives one k for the whole run at that batch size."""
    rows, batches = [], []
    for B in _check_batch_sizes(batch_sizes):
        fixed = spec.at_batch_size(B)
        if fixed is None:
            from dataclasses import replace

            # the baseline of the same requests and lengths (any SD policy of this proposer carries it)
            base = run(workload, replace(spec, policy="fixed-1", schedule=()), [B], cost).summary.iloc[0]
            row = _summary_row(workload, spec, B, int(base["requests"]), base["baseline_throughput"],
                               base["baseline_throughput"])
            if spec.batching == "replicate":  # SD = baseline on every request: every resample's ratio is 1
                row.update(ci_low=1.0, ci_high=1.0)
            rows.append(row)
            continue
        res = run(workload, fixed, [B], cost)
        s = res.summary.assign(policy=spec.policy)
        rows += s.to_dict("records")
        if len(res.batches):
            batches.append(res.batches.assign(policy=spec.policy))
    return SimResult(pd.DataFrame(rows, columns=SUMMARY_COLUMNS),
                     pd.concat(batches, ignore_index=True) if batches else pd.DataFrame())


def simulate(workload: Workload, spec: SimSpec, batch_sizes: Sequence[int], cost: CostModel) -> SimResult:
    """Simulate ``spec`` at every batch size (fast, vectorised)."""
    if spec.policy == "batch-schedule":
        return _per_batch_size(simulate, workload, spec, batch_sizes, cost)
    batch_sizes = _check_batch_sizes(batch_sizes)
    idx, rng = draw_requests(workload, spec)
    acc, ng, ea = request_traces(workload, spec.proposer, idx)
    P = workload.prompt_len[idx]
    L = workload.lengths(spec.proposer)[idx]
    fixed_steps = None if spec.policy == "adaptive" else decode_steps(spec, acc, ng, ea, P, 1, cost)
    rows, batch_rows = [], []
    if spec.batching == "replicate":
        n_random = 0 if fixed_steps is None else int(fixed_steps.random.sum())
        uniforms = _numpy_stream(rng).random_sample(max(batch_sizes) * n_random) if n_random else None
        for B in batch_sizes:
            steps = fixed_steps if fixed_steps is not None else decode_steps(spec, acc, ng, ea, P, B, cost)
            sd, base = _replicate(spec, steps, P, L, B, cost, uniforms)
            tokens = B * L.astype(np.float64)
            sd_tpt, base_tpt = tokens / sd, tokens / base
            rows.append(_summary_row(workload, spec, B, idx.size, base_tpt.mean(), sd_tpt.mean(), (sd_tpt, base_tpt)))
            batch_rows.append(pd.DataFrame({
                "dataset": workload.dataset, "proposer": spec.proposer, "policy": spec.policy, "batch_size": B,
                "batch": np.arange(idx.size), "request_id": [workload.ids[i] for i in idx], "prompt_len": P,
                "output_len": L, "baseline_latency": base, "sd_latency": sd, "baseline_throughput": base_tpt,
                "sd_throughput": sd_tpt,
            }))
    else:
        base_steps = _baseline_steps(L)
        for B in batch_sizes:
            steps = fixed_steps if fixed_steps is not None else decode_steps(spec, acc, ng, ea, P, B, cost)
            matched = continuous_matches(spec, steps)
            sd_tpt = _continuous_throughput(steps, P, L, B, cost, matched)
            base_tpt = _continuous_throughput(base_steps, P, L, B, cost, None)
            rows.append(_summary_row(workload, spec, B, idx.size, base_tpt, sd_tpt))
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    batches = pd.concat(batch_rows, ignore_index=True) if batch_rows else pd.DataFrame()
    return SimResult(summary, batches)


def _check_batch_sizes(batch_sizes: Sequence[int]) -> list[int]:
    out = [int(b) for b in batch_sizes]
    if not out or any(b < 1 for b in out):
        raise SpecReproError(f"--batch-sizes must be positive integers, got {list(batch_sizes)}")
    return out


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
    rows = []
    for B in batch_sizes:
        if spec.batching == "continuous":
            rows.append(_reference_continuous(workload, spec, B, cost, idx, acc, ng, ea, P, L))
            continue
        rng = random.Random()
        rng.setstate(rng0.getstate())  # every batch size restarts the stream after the draw
        sd_tpt, base_tpt = [], []
        for j in range(idx.size):
            base = _reference_baseline(cost, B, P[j], L[j])
            sd = _reference_sd_batch(spec, cost, B, P[j], L[j], acc[j], ng[j], ea[j], rng)
            tokens = B * L[j]
            sd_tpt.append(tokens / (sum(sd) / B))
            base_tpt.append(tokens / (sum(base) / B))
        base_mean, sd_mean = sum(base_tpt) / len(base_tpt), sum(sd_tpt) / len(sd_tpt)
        rows.append(_summary_row(workload, spec, B, idx.size, base_mean, sd_mean, (sd_tpt, base_tpt)))
    return SimResult(pd.DataFrame(rows, columns=SUMMARY_COLUMNS), pd.DataFrame())


def _reference_baseline(cost: CostModel, B: int, P: int, L: int) -> list[float]:
    kv = 0
    prefill = cost.target(kv, B * P)
    kv += B * P + B
    latency = [prefill + cost.overhead] * B
    gen = [1] * B
    while any(g < L for g in gen):
        n = sum(1 for g in gen if g < L)
        t = cost.target(kv, n)
        kv += n
        for c in range(B):
            if gen[c] < L:
                latency[c] += t + cost.overhead
                gen[c] += 1
                if gen[c] >= L:
                    kv -= gen[c] + P
    return latency


def _reference_sd_batch(spec, cost, B, P, L, acc, ng, ea, rng) -> list[float]:
    kv = 0
    prefill = cost.target(kv, B * P)
    kv += B * P + B
    latency = [prefill + cost.overhead] * B
    gen = [1] * B
    counts = [[0.0, 0.0, 0.0, 0.0] for _ in range(B)]  # adaptive: S, F of n-gram, then of EAGLE
    mode_ng = [False] * B
    unfinished = list(range(B))
    while unfinished:
        inputs = {}
        for c in unfinished:
            pos = gen[c] - 1
            if spec.policy == "adaptive":
                mode_ng[c], k = _reference_choice(spec.adaptive, cost, B, kv, counts[c])
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
            ngram_cost, eagle_cost = cost.ngram_draft(t), cost.eagle_draft(kv, n_in)
            if spec.policy == "adaptive":
                draft = ngram_cost + (0.0 if mode_ng[c] else eagle_cost)
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
            latency[c] += t + draft + cost.overhead
            if spec.policy == "adaptive":
                counts[c] = _reference_observe(spec.adaptive, mode_ng[c], n_in - 1, got, int(ng[pos]), counts[c])
            gen[c] += got
            kv += got
            if gen[c] >= L:
                kv -= gen[c] + P
            else:
                still.append(c)
        unfinished = still
    return latency


def _reference_choice(ad: AdaptiveParams, cost: CostModel, B: int, kv: float, counts) -> tuple[bool, int]:
    """The adaptive policy's choice for one copy (the policy itself is shared with the fast version)."""
    one = lambda x: np.array([float(x)])  # noqa: E731
    use_ng, k = adaptive_choice(ad, cost, B, one(kv), *(one(x) for x in counts))
    return bool(use_ng[0]), int(k[0])


def _reference_observe(ad: AdaptiveParams, used_ng: bool, k: int, got: int, acc_ng: int, counts) -> list[float]:
    """Decay the counts, then add what the step showed (see :class:`AdaptiveParams`)."""
    s_ng, f_ng, s_ea, f_ea = (x * ad.decay for x in counts)
    drafts_ok = got - 1
    if used_ng:
        return [s_ng + drafts_ok, f_ng + float(drafts_ok < k), s_ea, f_ea]
    matched = acc_ng - 1  # the n-gram proposal against the `got` tokens now known
    s_ng, f_ng = (s_ng + matched, f_ng + 1.0) if matched < got else (s_ng + got, f_ng + 0.0)
    return [s_ng, f_ng, s_ea + drafts_ok, f_ea + float(drafts_ok < k)]


def _reference_continuous(workload, spec, B, cost, idx, acc, ng, ea, P, L) -> dict:
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
                    use_ng, k = _reference_choice(spec.adaptive, cost, B, B * (P[i] + gen[i]), counts[i])
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
            step = t + cost.overhead
            if any(p[2] for p in plan.values()):
                step += cost.ngram_draft(t)
            ea_inputs = [p[0] for p in plan.values() if p[3]]
            if ea_inputs:
                step += cost.eagle_draft(kv, max(ea_inputs))
            produced = len(admitted)
            still = []
            for i in active:
                n_in, got = plan[i][0], plan[i][1]
                produced += min(got, L[i] - gen[i])
                if sd and spec.policy == "adaptive":
                    counts[i] = _reference_observe(spec.adaptive, plan[i][4], n_in - 1, got, int(ng[i][gen[i] - 1]),
                                                   counts[i])
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


# --- entry points -------------------------------------------------------------------------------


def build_specs(dataset: str, proposers: Sequence[str], policies: Sequence[str], ngram_match: float | None = None,
                schedules: Mapping[str, Sequence] | None = None, **modes) -> list[SimSpec]:
    """Every valid (proposer, policy) pair of the two lists, in list order.

    With one proposer and one policy an invalid pair is an error; with lists, pairs the
    proposer does not take are skipped (combined takes oracle and adaptive only; adaptive
    needs combined; batch-schedule needs the proposer's schedule in ``schedules``). The n-gram
    match probability is looked up only where it is used.
    """
    schedules = schedules or {}
    for key, allowed in (("combine_cost", COMBINE_COSTS), ("batching", BATCHING), ("pairing", PAIRING)):
        if key in modes and modes[key] not in allowed:
            raise SpecReproError(f"unknown {key.replace('_', ' ')} {modes[key]!r} (known: {', '.join(allowed)})")
    pairs = [(pr, po) for pr in proposers for po in policies]
    specs = []
    for pr, po in pairs:
        needs_p = pr == "ngram" and (po == "batch-schedule" or po.startswith("fixed-"))
        extra = {}
        if po == "batch-schedule":
            if pr not in schedules:
                if len(pairs) == 1:
                    raise SpecReproError(f"policy 'batch-schedule' needs a schedule for proposer {pr!r} (--schedule)")
                continue
            extra["schedule"] = schedules[pr]
        try:
            spec = SimSpec(pr, po, **extra, **modes)
        except SpecReproError:
            if len(pairs) == 1:
                raise
            continue  # a pair this proposer does not take
        if needs_p:
            spec = SimSpec(pr, po, ngram_match_prob=ngram_match_prob(dataset, ngram_match), **extra, **modes)
        specs.append(spec)
    if not specs:
        raise SpecReproError(f"no valid proposer/policy pair in {list(proposers)} x {list(policies)}")
    return specs


def metric_key(traceset: str, row: Mapping, suffix: str = "") -> str:
    """``sim.<trace set>.<dataset>.<proposer>.<policy>[-<mode>...][suffix].b<B>``; paper mode has no suffix."""
    policy = str(row["policy"])
    if row.get("combine_cost", "ngram") != "ngram":
        policy += f"-cost-{row['combine_cost']}"
    if row.get("pairing", "index") != "index":
        policy += f"-{row['pairing']}"
    if row.get("batching", "replicate") != "replicate":
        policy += f"-{row['batching']}"
    policy += suffix
    return f"sim.{traceset}.{row['dataset']}.{row['proposer']}.{policy}.b{int(row['batch_size'])}"


def metrics_from_summaries(traceset: str, tables: Sequence[pd.DataFrame], suffix: str = "",
                           same_sample: bool = False) -> dict[str, float]:
    """Flat ``{metric key: speedup}`` of simulator summary tables, with the interval keys where a row has one
    (:func:`specrepro.core.uncertainty.interval_metrics`); a key twice is an error.

    ``same_sample``: the tables were simulated with the authors' draw (:data:`PAPER_DRAW`) of the released
    traces, so the paper-mode rows (index pairing: the full draw) are the paper's own requests and get
    ``<key>.same_sample``: :mod:`specrepro.analysis.claims` decides them on the point.
    """
    out: dict[str, float] = {}
    for table in tables:
        for row in table.to_dict("records"):
            key = metric_key(traceset, row, suffix)
            if key in out:
                raise SpecReproError(f"simulator metric {key!r} is produced twice")
            lo, hi = row.get("ci_low", float("nan")), row.get("ci_high", float("nan"))
            iv = Interval(float(row["speedup"]), float(lo), float(hi), int(row.get("requests", 0) or 0))
            same = same_sample and row.get("pairing", "index") == "index"
            m = interval_metrics(key, iv, same_sample=same)
            if key not in m:  # a NaN speedup still names its key, as before
                m = {key: float(row["speedup"])}
            out.update(m)
    return out


def simulate_trace_file(trace: str, dataset: str, proposers: Sequence[str], policies: Sequence[str],
                        batch_sizes: Sequence[int], cost: CostModel, ngram_match: float | None = None,
                        reference: bool = False, schedules: Mapping[str, Sequence] | None = None,
                        **modes) -> SimResult:
    """Read a trace file and simulate every valid (proposer, policy) pair at every batch size."""
    specs = build_specs(dataset, proposers, policies, ngram_match, schedules, **modes)
    workload = Workload.from_records(read_trace(trace, aligned=()), dataset)
    run = simulate_reference if reference else simulate
    results = [run(workload, s, batch_sizes, cost) for s in specs]
    batches = [r.batches for r in results if len(r.batches)]
    return SimResult(
        pd.concat([r.summary for r in results], ignore_index=True),
        pd.concat(batches, ignore_index=True) if batches else pd.DataFrame(),
    )
