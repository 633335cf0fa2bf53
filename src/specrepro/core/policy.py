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

    It sees only the past and the n-gram lookup's proposal of this step. For each proposer it keeps decayed
    counts of accepted (S) and rejected (F) draft tokens and estimates the per-token acceptance
    ``alpha = (S + w * prior) / (S + F + w)``. Each step it picks the proposer and k that maximise the expected
    tokens ``(1 - alpha^(k+1)) / (1 - alpha)`` per unit of step time under the cost model, at the batch size and
    cache size of that step: the model drafter's k in 1..``eagle_k_max``; n-gram's in 0..its proposal's length
    (at most ``ngram_k_max``), so where the lookup found nothing the n-gram option is a step that verifies no
    draft. The cheap lookup runs every step (and is charged): where it proposed, its proposal is compared after
    the step with the tokens the step produced, so n-gram is observed even while EAGLE drafts, and its counts
    estimate its acceptance given a match (a lookup that found nothing is no rejected draft, and its counts do
    not age then); EAGLE is observed only when it drafts. The priors are the released H100 traces' per-token
    acceptance: EAGLE 0.67-0.73 on the four datasets, n-gram given a match 0.58-0.90. The model drafter is
    charged as ``drafter_charge`` says (:data:`DRAFTER_CHARGES`).
    """

    decay: float = 0.7
    prior_weight: float = 2.0
    eagle_prior: float = 0.7
    ngram_prior: float = 0.7
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
                    f_ng: np.ndarray, s_ea: np.ndarray, f_ea: np.ndarray,
                    ng_len: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(use n-gram, k) per request: the choice with the most expected tokens per second. ``ng_len``: tokens the
    n-gram lookup proposes this step per request (0: no match; None: ``ngram_k_max`` each); n-gram's ``k`` is at
    most that, and 0 (no draft verified) is among its choices."""
    w = params.prior_weight
    cap = params.ngram_k_max if ng_len is None else np.minimum(np.asarray(ng_len), params.ngram_k_max)

    def best(s, f, prior, k_lo, k_max, eagle, k_cap=None):
        alpha = np.clip((s + w * prior) / (s + f + w), 0.0, 0.999)[:, None]
        k = np.arange(k_lo, k_max + 1)[None, :]
        tokens = (1 - alpha ** (k + 1)) / (1 - alpha)
        t = cost.target(kv[:, None], B * (k + 1))
        tau = t + cost.overhead_at(B * (k + 1)) + cost.ngram_draft(t)  # the n-gram lookup runs every step
        n_in = params.drafter_input(np.full(k.shape, eagle), k)
        tau = tau + np.where(n_in > 0, cost.eagle_draft(kv[:, None], n_in, B * n_in), 0.0)
        rate = tokens / tau
        if k_cap is not None:
            rate = np.where(k <= np.reshape(k_cap, (-1, 1)), rate, -np.inf)
        j = np.argmax(rate, axis=1)
        return rate[np.arange(rate.shape[0]), j], j + k_lo

    r_ng, k_ng = best(s_ng, f_ng, params.ngram_prior, 0, params.ngram_k_max, False, cap)
    r_ea, k_ea = best(s_ea, f_ea, params.eagle_prior, 1, params.eagle_k_max, True)
    use_ng = r_ng >= r_ea
    return use_ng, np.where(use_ng, k_ng, k_ea)


def observe(params: AdaptiveParams, used_ng, k, produced, acc_ng, s_ng, f_ng, s_ea, f_ea, ng_proposed=True):
    """Decayed accepted/rejected counts after a step (array or scalar arguments alike).

    ``k``: drafts verified, ``produced``: tokens the step produced (accepted + 1), ``acc_ng``: 1 + the length of
    the common prefix of n-gram's proposal and the tokens now known (its proposal is scored even when EAGLE's
    draft was verified), ``ng_proposed``: whether the lookup proposed anything this step (n-gram's counts are
    left as they were where it did not).
    """
    d = produced - 1  # draft tokens accepted
    rejected = (d < k).astype(np.float64) if isinstance(d, np.ndarray) else float(d < k)
    keep = np.where(ng_proposed, params.decay, 1.0)  # n-gram's counts age only when it is observed
    s_ng, f_ng = s_ng * keep, f_ng * keep
    s_ea, f_ea = s_ea * params.decay, f_ea * params.decay
    # the n-gram proposal checked against the `produced` tokens now known: a mismatch, or all of them agree
    m = acc_ng - 1
    seen_s = np.where(m < produced, m, produced) if isinstance(m, np.ndarray) else (m if m < produced else produced)
    seen_f = (m < produced).astype(np.float64) if isinstance(m, np.ndarray) else float(m < produced)
    s_ng = s_ng + np.where(ng_proposed, np.where(used_ng, d, seen_s), 0.0)
    f_ng = f_ng + np.where(ng_proposed, np.where(used_ng, rejected, seen_f), 0.0)
    s_ea = s_ea + np.where(used_ng, 0, d)
    f_ea = f_ea + np.where(used_ng, 0.0, rejected)
    return s_ng, f_ng, s_ea, f_ea


def ngram_first(ngram_len, k_max: int):
    """vLLM PR #24344's rule: (use n-gram, k) per request: n-gram's draft (up to ``k_max`` tokens) where its
    lookup matched (a non-empty proposal), else the model drafter's ``k_max`` tokens."""
    n = np.asarray(ngram_len)
    use_ng = n > 0
    return use_ng, np.where(use_ng, np.minimum(n, k_max), k_max)
