"""The draft-substitution modes of the vLLM plugin: what a request's draft becomes at every step (pure, no vLLM).

One hook serves the measured upper bound (issue 22) and the hybrid proposer (issue 23): after vLLM's own
drafter has proposed (its cost is paid), :class:`DraftPlanner` replaces each request's draft with

``oracle-<m>``
    the reference output's next ``acc_<m>[g] - 1`` tokens (``g``: output tokens so far; ``acc_<m>``: method
    ``m``'s keep-one trace of the same engine), so the step accepts exactly what ``m``'s trace says it would
    have at ``g`` (capped at ``num_speculative_tokens``);
``oracle-combine``
    the same with ``max(acc_ngram[g], acc_<drafter>[g]) - 1`` (the engine runs the model drafter every step and
    the n-gram lookup too: it pays both drafting costs, the simulator's ``combine_cost: both``);
``controlled``
    ``j`` correct tokens then wrong ones up to ``k`` drafts (the step verifies ``k + 1`` tokens and accepts
    exactly ``j``); ``j`` from the profile: ``none`` (0), ``all`` (``k``), a named list ``j: [...]`` cycled
    per step of each request, or ``trace: <m>`` (``acc_<m>[g] - 1``: the method's acceptance at fixed k);
``hybrid``
    the n-gram lookup's draft or the model drafter's, chosen per request and step by a policy:
    ``adaptive`` (:func:`specrepro.core.policy.adaptive_choice`, the simulator's own function, with the
    counts updated by :func:`~specrepro.core.policy.observe` from the tokens each step verified) or
    ``ngram-first`` (:func:`~specrepro.core.policy.ngram_first`, vLLM PR #24344's rule).

**Departure.** The reference is the no-SD greedy output; where a request's output leaves it (a near-tie that
the batch's numerics flip) the planner notices at the next step, stops proposing reference tokens and hands
that request the drafter's own draft from then on; it counts such requests (``departed``).

The planner sees each request as ``(key, output tokens so far, the drafter's own draft, the n-gram proposal)``;
the plugin (:mod:`specrepro.engine.run.drafts`) collects these from the model runner. A plan is JSON
(:func:`make_plan`), passed to the plugin by the path in ``$SPECREPRO_DRAFT``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.costmodel import CostModel
from ..core.errors import SpecReproError
from ..core.policy import AdaptiveParams, adaptive_choice, ngram_first, observe
from .draftjobs import (  # noqa: F401 - re-exported: the jobs' names
    DRAFT_OUTPUT, draft_jobs, draft_label, engine_method, refusal, trace_inputs,
)
from .jobs import draft_bench_spec  # noqa: F401 - re-exported

PLAN_ENV = "SPECREPRO_DRAFT"
DRAFT_FILE = "drafts.jsonl"
MODES = ("oracle", "controlled", "hybrid")
ORACLE_OF = ("ngram", "eagle", "eagle3", "draft_model", "mtp", "combine")
POLICIES = ("adaptive", "ngram-first")
#: the model drafters a hybrid or oracle-combine pairs with n-gram
MODEL_DRAFTERS = ("eagle", "eagle3", "draft_model", "mtp")
#: what the engine's model drafter costs per step under the oracle and controlled modes (stated in the records and
#: the docs): vLLM's model drafters draft ``num_speculative_tokens`` every step (their first pass keeps their KV in
#: step), whatever draft the plugin then substitutes
ENGINE_DRAFTER_CHARGE = "full"
#: ... and under the hybrid: the plugin decides each request's draft before the drafter runs and runs the model
#: drafter for the largest ``k`` its chosen requests need, only its first pass (one token) where every request of
#: the batch takes n-gram's draft (:data:`specrepro.core.policy.DRAFTER_CHARGES` ``first-pass``)
HYBRID_DRAFTER_CHARGE = "first-pass"


def prompt_key(prompt_token_ids: Sequence[int]) -> str:
    """A request's key in a plan: the SHA-1 of its prompt token ids (vLLM's request ids change per engine)."""
    return hashlib.sha1(np.asarray(list(prompt_token_ids), dtype=np.int64).tobytes()).hexdigest()


def mode_label(mode: str, of: str | None = None, policy: str | None = None) -> str:
    """``oracle-<of>``, ``controlled``, ``hybrid-<policy>``."""
    if mode == "oracle":
        return f"oracle-{of}"
    if mode == "hybrid":
        return f"hybrid-{policy}"
    return mode


def hybrid_params(k: int) -> AdaptiveParams:
    """The policy parameters a hybrid plan runs with by default: both proposers up to the engine's ``k``, the
    model drafter charged as the plugin runs it (:data:`HYBRID_DRAFTER_CHARGE`)."""
    return AdaptiveParams(eagle_k_max=int(k), ngram_k_max=int(k), drafter_charge=HYBRID_DRAFTER_CHARGE)


def check_plan(plan: Mapping[str, Any]) -> None:
    """A one-line :class:`SpecReproError` for a plan the planner cannot run."""
    mode = plan.get("mode")
    if mode not in MODES:
        raise SpecReproError(f"draft plan: unknown mode {mode!r} (known: {', '.join(MODES)})")
    if int(plan.get("k") or 0) < 1:
        raise SpecReproError("draft plan: k (num_speculative_tokens) must be at least 1")
    if mode == "oracle" and plan.get("of") not in ORACLE_OF:
        raise SpecReproError(f"draft plan: oracle of {plan.get('of')!r} (known: {', '.join(ORACLE_OF)})")
    if mode == "hybrid" and plan.get("policy") not in POLICIES:
        raise SpecReproError(f"draft plan: hybrid policy {plan.get('policy')!r} (known: {', '.join(POLICIES)})")
    if mode == "hybrid" and plan.get("policy") == "adaptive" and not plan.get("cost_model"):
        raise SpecReproError("draft plan: the adaptive hybrid needs the run's cost model (cost_model)")
    if mode == "controlled":
        _profile_j(plan.get("profile"), 0, 0, None, int(plan["k"]))


def make_plan(mode: str, k: int, *, of: str | None = None, policy: str | None = None, profile: Any = None,
              drafter: str | None = None, requests: Sequence[Mapping[str, Any]] = (), ngram: Mapping | None = None,
              cost_model: CostModel | None = None, adaptive: AdaptiveParams | None = None) -> dict:
    """A plan (JSON object). ``requests``: ``{prompt_token_ids, output_token_ids, acc: {method: acc_len}}`` each
    (the reference no-SD output and the keep-one traces of the same engine; hybrid needs none)."""
    reqs = {}
    for r in requests:
        reqs[prompt_key(r["prompt_token_ids"])] = {
            "output": [int(t) for t in r["output_token_ids"]],
            "acc": {m: [int(a) for a in v] for m, v in (r.get("acc") or {}).items()}}
    plan: dict[str, Any] = {"mode": mode, "k": int(k), "of": of, "policy": policy, "profile": profile,
                            "drafter": drafter, "requests": reqs,
                            "ngram": dict(ngram or {"prompt_lookup_min": 3, "prompt_lookup_max": 7})}
    if cost_model is not None:
        plan["cost_model"] = asdict(cost_model)
    if mode == "hybrid":
        ad = adaptive or hybrid_params(k)
        plan["adaptive"] = asdict(ad)
    check_plan(plan)
    return plan


def _wrong(token: int) -> int:
    """A token that is not ``token`` (a draft the target rejects there)."""
    return 1 if int(token) == 0 else 0


def _profile_j(profile: Any, g: int, step: int, acc: Mapping[str, Sequence[int]] | None, k: int) -> int:
    """Correct draft tokens of a controlled step at output position ``g`` (the request's ``step``-th draft)."""
    if profile == "none":
        return 0
    if profile == "all":
        return k
    if isinstance(profile, Mapping) and "j" in profile:
        js = [int(x) for x in profile["j"]]
        if not js or min(js) < 0:
            raise SpecReproError(f"draft plan: controlled profile {profile.get('name')!r} needs j >= 0 values")
        return min(js[step % len(js)], k)
    if isinstance(profile, Mapping) and "trace" in profile:
        if acc is None:
            return 0
        a = acc.get(profile["trace"])
        if a is None:
            raise SpecReproError(f"draft plan: controlled profile trace {profile['trace']!r} not in the plan's traces")
        return min(int(a[g]) - 1, k) if g < len(a) else 0
    raise SpecReproError(f"draft plan: unknown controlled profile {profile!r} (none, all, {{name, j}}, {{trace}})")


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class _Req:
    g: int = 0                         # output tokens seen at the last call
    step: int = 0                      # drafts proposed so far
    departed: int = -1                 # output position where it left the reference (-1: never)
    counts: list = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])  # S, F of n-gram, then of the drafter
    last: tuple | None = None          # (used n-gram, k verified, n-gram proposal) of the last draft
    pending: tuple | None = None       # (g, use n-gram, k, counts, n-gram proposal) decided before the drafter ran


@dataclass
class Proposal:
    """One request's draft at one step and why."""

    draft: list[int]
    source: str          # "reference" | "drafter" | "ngram" | "controlled" | "unplanned" (no reference)
    g: int
    ngram_len: int = 0
    departed: bool = False


class DraftPlanner:
    """Per-request state across steps; :meth:`propose` is called once per request and step."""

    def __init__(self, plan: Mapping[str, Any]):
        check_plan(plan)
        self.plan = plan
        self.mode = plan["mode"]
        self.k = int(plan["k"])
        self.of = plan.get("of")
        self.policy = plan.get("policy")
        self.refs: Mapping[str, Mapping] = plan.get("requests") or {}
        self.state: dict[str, _Req] = {}
        self.departed: set[str] = set()
        self.params = AdaptiveParams(**plan["adaptive"]) if plan.get("adaptive") else None
        self.cost = CostModel(**plan["cost_model"]) if plan.get("cost_model") else None

    @property
    def ngram_k(self) -> int:
        """Tokens the n-gram lookup proposes (the hybrid scores up to ``ngram_k_max`` of them)."""
        return int(self.params.ngram_k_max) if self.params else self.k

    def finish(self, rid: str) -> None:
        self.state.pop(rid, None)

    def _observed(self, st: _Req, output: Sequence[int]) -> list[float]:
        """The hybrid's counts after the tokens the last step produced (``st`` unchanged)."""
        produced = len(output) - st.g
        if st.last is None or produced <= 0:
            return list(st.counts)
        used_ng, k_used, ng_prop = st.last
        new = list(output[st.g:])
        acc_ng = 1 + common_prefix(ng_prop, new)
        return [float(x) for x in observe(self.params, bool(used_ng), int(k_used), int(produced), int(acc_ng),
                                          *st.counts, ng_proposed=len(ng_prop) > 0)]

    def _choose(self, st: _Req, output: Sequence[int], ngram: Sequence[int], batch_size: int,
                context: int) -> tuple[bool, int, list[float]]:
        """(use n-gram, k, counts after observing the last step) of a hybrid request; ``st`` unchanged."""
        if self.policy == "adaptive":
            counts = self._observed(st, output)
            kv = np.array([float(batch_size * context)])
            use_ng, kk = adaptive_choice(self.params, self.cost, batch_size, kv, *(np.array([c]) for c in counts),
                                         np.array([len(ngram)]))
            use_ng, kk = bool(use_ng[0]), int(kk[0])
        else:
            counts = list(st.counts)
            u, kk = ngram_first(len(ngram), self.k)
            use_ng, kk = bool(u), int(kk)
        return use_ng, min(kk, self.k), counts

    @property
    def drafter_follows_choice(self) -> bool:
        """Whether the engine runs the model drafter only as far as the hybrid's choices need
        (:meth:`drafter_k`), i.e. the plan's policy charges it ``first-pass``."""
        return self.mode == "hybrid" and self.params is not None and self.params.drafter_charge == "first-pass"

    def decide(self, rid: str, output: Sequence[int], ngram: Sequence[int] = (), batch_size: int = 1,
               context: int = 0) -> tuple[bool, int]:
        """The hybrid's choice for request ``rid`` with ``output`` tokens so far, made before the model drafter runs;
        :meth:`propose` at the same ``len(output)`` takes it (elsewhere it decides afresh)."""
        st = self.state.setdefault(rid, _Req())
        use_ng, kk, counts = self._choose(st, output, ngram, batch_size, context)
        st.pending = (len(output), use_ng, kk, counts, list(ngram))
        return use_ng, kk

    def decided(self, rid: str, g: int) -> bool:
        """Whether :meth:`decide` chose request ``rid``'s draft at ``g`` output tokens (:meth:`propose` takes it)."""
        st = self.state.get(rid)
        return st is not None and st.pending is not None and st.pending[0] == g

    @staticmethod
    def drafter_k(choices: Sequence[tuple[bool, int]]) -> int:
        """Passes the model drafter must run for a batch's choices: the largest ``k`` of a request taking its draft,
        else 1 (its first pass, which keeps its KV cache in step)."""
        return max([int(k) for ng, k in choices if not ng] or [1])

    def propose(self, rid: str, key: str, output: Sequence[int], own: Sequence[int], ngram: Sequence[int] = (),
                batch_size: int = 1, context: int = 0) -> Proposal:
        """The draft of request ``rid`` (plan key ``key``) with ``output`` tokens so far; ``own``: the engine
        drafter's draft, ``ngram``: the n-gram lookup's proposal (hybrid, oracle-combine), ``context``: its
        prompt + output tokens (the adaptive policy prices the step at ``batch_size`` copies of it)."""
        st = self.state.setdefault(rid, _Req())
        g = len(output)
        if self.mode == "hybrid":
            if self.decided(rid, g):
                _, use_ng, kk, counts, ngram = st.pending
            else:
                use_ng, kk, counts = self._choose(st, output, ngram, batch_size, context)
            st.counts, st.pending = counts, None
            draft = list(ngram[:kk]) if use_ng else list(own[:kk])
            st.last, st.g, st.step = (use_ng, len(draft), list(ngram)), g, st.step + 1
            return Proposal(draft, "ngram" if use_ng else "drafter", g, len(ngram))
        ref = self.refs.get(key)
        if ref is None:  # a prompt the plan has no reference for (the engine's warm-up): the drafter's own draft
            st.g, st.step = g, st.step + 1
            return Proposal(list(own[: self.k]), "unplanned", g, len(ngram))
        out = ref["output"]
        if st.departed < 0:
            # tokens past the reference's end are the engine's overshoot of max_tokens (cut when returned)
            seen = list(output[st.g:min(g, len(out))])
            n = common_prefix(seen, out[st.g:g])
            if n < len(seen):
                st.departed = st.g + n
                self.departed.add(rid)
        st.g = g
        st.step += 1
        if st.departed >= 0:
            return Proposal(list(own[: self.k]), "drafter", g, len(ngram), departed=True)
        acc = ref.get("acc") or {}
        if self.mode == "controlled":
            j = _profile_j(self.plan.get("profile"), g, st.step - 1, acc, self.k)
            good = out[g:g + j]
            nxt = out[g + len(good)] if g + len(good) < len(out) else None
            draft = list(good) + ([] if nxt is None else [_wrong(nxt)] * (self.k - len(good)))
            return Proposal(draft[: self.k], "controlled", g, len(ngram))
        methods = ["ngram", self.plan["drafter"]] if self.of == "combine" else [self.of]
        n = 0
        for m in methods:
            a = acc.get(m)
            if a is None:
                raise SpecReproError(f"draft plan: oracle-{self.of} needs the {m} trace of every request")
            n = max(n, int(a[g]) - 1 if g < len(a) else 0)
        return Proposal(list(out[g:g + min(n, self.k)]), "reference", g, len(ngram))


def write_record(fh, row: Mapping[str, Any]) -> None:
    fh.write(json.dumps(row, separators=(",", ":")) + "\n")


def draft_plans(job: Mapping[str, Any], requests: Sequence[Mapping[str, Any]], ngram: Mapping | None,
                cost_model: CostModel | None) -> dict[str, dict]:
    """{profile name: plan} of one draft job (one plan, named by the job's mode, except for controlled jobs)."""
    common = {"requests": requests, "ngram": ngram}
    if job["mode"] == "controlled":
        out = {}
        for p in job["profiles"] or ["none", "all"]:
            name = p if isinstance(p, str) else p.get("name") or f"trace-{p.get('trace')}"
            out[name] = make_plan("controlled", job["k"], profile=p, **common)
        return out
    if job["mode"] == "oracle":
        return {mode_label("oracle", job["of"]): make_plan("oracle", job["k"], of=job["of"], drafter=job["drafter"],
                                                           **common)}
    return {mode_label("hybrid", policy=job["policy"]): make_plan(
        "hybrid", job["k"], policy=job["policy"], drafter=job["drafter"],
        cost_model=cost_model if job["policy"] == "adaptive" else None, **common)}
