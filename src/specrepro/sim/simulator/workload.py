"""The simulator's inputs: a trace file's requests as a Workload, the simulation's specification (SimSpec,
AdaptiveParams), the requests drawn and their traces, and the paper's n-gram match probabilities."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...core.errors import SpecReproError
from ...core.policy import AdaptiveParams, adaptive_choice  # noqa: F401 - re-exported: the shared policy
from ...core.traces import TraceRecord
from ...jobspec.schedule import check_schedule, schedule_k
from ..names import (
    BATCHING, COMBINE_COSTS, NGRAM_MATCH_PROB, PAIRING, POLICIES, PROPOSERS, SCHEDULED_PROPOSERS, is_policy,
)


#: columns of the summary table, in order
SUMMARY_COLUMNS = [
    "dataset", "proposer", "policy", "batch_size", "speedup", "batching", "pairing", "combine_cost",
    "requests", "baseline_throughput", "sd_throughput", "ci_low", "ci_high", "pooled_speedup",
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
    #: the engine's accounting (vLLM's oracle drafter, issue 22): the engine ran with ``num_speculative_tokens =
    #: engine_k``, so an oracle step verifies at most ``engine_k + 1`` tokens, the model drafter is charged its whole
    #: ``engine_k``-token draft every step and the n-gram lookup every step. None: the paper's accounting
    engine_k: int | None = None

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
        if self.proposer == "combined" and self.policy not in ("oracle", "adaptive", "ngram-first"):
            raise SpecReproError(f"proposer 'combined' takes policy 'oracle', 'adaptive' or 'ngram-first', not {self.policy!r}")
        if self.policy == "ngram-first" and self.proposer != "combined":
            raise SpecReproError("policy 'ngram-first' chooses the proposer itself: use it with --proposer combined")
        if self.engine_k is not None and (self.engine_k < 1 or self.policy != "oracle"):
            raise SpecReproError("engine_k (the engine's accounting) applies to policy 'oracle' with k >= 1 only")
        if self.engine_k is not None and self.proposer == "combined" and self.combine_cost != "both":
            raise SpecReproError("the engine's Oracle Combine runs both drafters every step: combine_cost 'both'")
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
