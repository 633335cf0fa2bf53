"""The online proposer policies shared by the simulator and the engine (one function decides in both).

The simulator (:mod:`specrepro.sim.simulator`, policy ``adaptive``) and the vLLM plugin's ``hybrid`` drafter
(:mod:`specrepro.engine.run.drafts`) import :func:`adaptive_choice` and :func:`observe` from here, so the same
accepted-count history gives the same choices in both (``tests/test_drafts.py`` feeds both the same history).
:func:`ngram_first` is the fixed rule of vLLM PR #24344 (n-gram's draft when it matches, else the model
drafter's), the baseline the adaptive policy is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .costmodel import CostModel
from .errors import SpecReproError

#: what a step charges for the model drafter (EAGLE, EAGLE-3, draft model):
#: ``chosen`` only when its draft is used (``k + 1`` input tokens; the simulator's accounting before the engine),
#: ``first-pass`` its first pass (one input token) every step and the rest when its draft is used,
#: ``full`` its whole ``k_max``-token draft every step (what vLLM's EAGLE proposer pays in the engine: it always
#: drafts ``num_speculative_tokens``, whichever draft the policy then uses)
DRAFTER_CHARGES = ("chosen", "first-pass", "full")


@dataclass(frozen=True)
class AdaptiveParams:
    """The online adaptive policy (simulator: proposer ``combined``, policy ``adaptive``; engine: ``hybrid``).

    It sees only the past. For each proposer it keeps decayed counts of accepted (S) and
    rejected (F) draft tokens and estimates the per-token acceptance
    ``alpha = (S + w * prior) / (S + F + w)``. Each step it picks the proposer and k
    (1..k_max) that maximise the expected tokens ``(1 - alpha^(k+1)) / (1 - alpha)`` per unit
    of step time under the cost model, at the batch size and cache size of that step. The
    cheap n-gram lookup runs every step (and is charged): after the step its proposal is
    compared with the tokens the step produced, so n-gram is observed even while EAGLE
    drafts; EAGLE is observed only when it drafts. An n-gram step is charged as matched.
    The model drafter is charged as ``drafter_charge`` says (:data:`DRAFTER_CHARGES`).
    """

    decay: float = 0.7
    prior_weight: float = 2.0
    eagle_prior: float = 0.7
    ngram_prior: float = 0.3
    eagle_k_max: int = 7
    ngram_k_max: int = 20
    drafter_charge: str = "chosen"

    def __post_init__(self) -> None:
        if self.drafter_charge not in DRAFTER_CHARGES:
            raise SpecReproError(f"unknown drafter charge {self.drafter_charge!r} (known: {', '.join(DRAFTER_CHARGES)})")

    def drafter_input(self, chosen_eagle, k):
        """Input tokens the model drafter is charged for in a step (0: not charged), per request."""
        if self.drafter_charge == "full":
            return np.full(np.shape(k), self.eagle_k_max + 1)
        if self.drafter_charge == "first-pass":
            return np.where(chosen_eagle, k + 1, 1)
        return np.where(chosen_eagle, k + 1, 0)


def adaptive_choice(params: AdaptiveParams, cost: CostModel, B: int, kv: np.ndarray, s_ng: np.ndarray,
                    f_ng: np.ndarray, s_ea: np.ndarray, f_ea: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(use n-gram, k) per request: the choice with the most expected tokens per second."""
    w = params.prior_weight

    def best(s, f, prior, k_max, eagle):
        alpha = np.clip((s + w * prior) / (s + f + w), 0.0, 0.999)[:, None]
        k = np.arange(1, k_max + 1)[None, :]
        tokens = (1 - alpha ** (k + 1)) / (1 - alpha)
        t = cost.target(kv[:, None], B * (k + 1))
        tau = t + cost.step_overhead + cost.ngram_draft(t)  # the n-gram lookup runs every step
        n_in = params.drafter_input(np.full(k.shape, eagle), k)
        tau = tau + np.where(n_in > 0, cost.eagle_draft(kv[:, None], n_in, B * n_in), 0.0)
        rate = tokens / tau
        j = np.argmax(rate, axis=1)
        return rate[np.arange(rate.shape[0]), j], j + 1

    r_ng, k_ng = best(s_ng, f_ng, params.ngram_prior, params.ngram_k_max, False)
    r_ea, k_ea = best(s_ea, f_ea, params.eagle_prior, params.eagle_k_max, True)
    use_ng = r_ng >= r_ea
    return use_ng, np.where(use_ng, k_ng, k_ea)


def observe(params: AdaptiveParams, used_ng, k, produced, acc_ng, s_ng, f_ng, s_ea, f_ea):
    """Decayed accepted/rejected counts after a step (array or scalar arguments alike).

    ``k``: drafts verified, ``produced``: tokens the step produced (accepted + 1), ``acc_ng``: 1 + the length of
    the common prefix of n-gram's proposal and the tokens now known (its proposal is scored even when EAGLE's
    draft was verified).
    """
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


def ngram_first(ngram_len, k_max: int):
    """vLLM PR #24344's rule: (use n-gram, k) per request: n-gram's draft (up to ``k_max`` tokens) where its
    lookup matched (a non-empty proposal), else the model drafter's ``k_max`` tokens."""
    n = np.asarray(ngram_len)
    use_ng = n > 0
    return use_ng, np.where(use_ng, np.minimum(n, k_max), k_max)
