"""What an SGLang engine job passes to ``sglang.Engine`` and its ``generate``: the keywords of one
configuration from its :class:`~specrepro.jobspec.args.BenchSpec` and the config's ``sglang`` section (no
sglang import; the sweep that uses them is :mod:`specrepro.engine.run.sglang`, the job records that print them
:mod:`specrepro.jobspec.jobs`)."""

from __future__ import annotations

from typing import Any, Mapping

from ..core.errors import SpecReproError
from .args import BenchSpec
from .trees import SGLANG_ALGORITHM, sglang_spec_args

SGLANG_VERSION = "0.5.9"
#: drafter class of each method in SGLang 0.5.9 (srt/models/llama_eagle.py, llama_eagle3.py)
DRAFTER_ARCH = {"eagle": "LlamaForCausalLMEagle", "eagle3": "LlamaForCausalLMEagle3"}
#: the config's ``sglang`` section when it has none (the paper's choice of attention backends)
DEFAULTS = {"attention_backend": {"none": "fa3", "chain": "fa3", "tree": "flashinfer"},
            "max_running_requests": None, "mem_fraction_static": None, "cuda_graph_max_bs": None}


def settings(sg: Mapping[str, Any] | None) -> dict:
    """The config's ``sglang`` section over :data:`DEFAULTS`."""
    sg = dict(sg or {})
    out = {**DEFAULTS, **{k: v for k, v in sg.items() if k != "attention_backend"}}
    out["attention_backend"] = {**DEFAULTS["attention_backend"], **(sg.get("attention_backend") or {})}
    return out


def shape(spec: BenchSpec) -> str:
    """"none", "chain" or "tree": which attention backend of the config a configuration uses."""
    return "none" if spec.method == "none" else ("tree" if spec.tree else "chain")


def engine_kwargs(spec: BenchSpec, sg: Mapping[str, Any] | None, model_dir: str, drafter_dir: str | None) -> dict:
    """Every keyword of ``sglang.Engine(**kw)`` for one configuration (each one a field of SGLang's ServerArgs)."""
    s, e = settings(sg), spec.engine
    kw: dict[str, Any] = dict(
        model_path=model_dir, tokenizer_path=model_dir, tp_size=int(spec.tensor_parallel_size),
        dtype=e.get("dtype", "bfloat16"), random_seed=int(e.get("seed", 42)),
        disable_radix_cache=not bool(e.get("enable_prefix_caching", False)),
        disable_cuda_graph=bool(e.get("enforce_eager", False)),
        max_running_requests=int(s["max_running_requests"] or max(int(b) for b in spec.batch_sizes)),
        attention_backend=s["attention_backend"][shape(spec)], allow_auto_truncate=True, log_level="error",
    )
    if e.get("max_model_len"):
        kw["context_length"] = int(e["max_model_len"])
    for key in ("mem_fraction_static", "cuda_graph_max_bs"):
        if s.get(key) is not None:
            kw[key] = s[key]
    # SGLang 0.5.9 keeps its overlap scheduler for no SD and turns it off under EAGLE/EAGLE-3 (server_args.py,
    # _handle_speculative_decoding: disable_overlap_schedule = True unless SGLANG_ENABLE_SPEC_V2); stated here
    # so engine-args shows it, and Fig. 2's caption says the baseline runs with it
    kw["disable_overlap_schedule"] = spec.method != "none"
    if spec.method == "none":
        return kw
    if spec.method not in SGLANG_ALGORITHM:
        raise SpecReproError(f"{spec.exp} {spec.label}: method {spec.method} is not run on SGLang here "
                             f"(allowed: none, {', '.join(SGLANG_ALGORITHM)})")
    if not drafter_dir:
        raise SpecReproError(f"{spec.exp} {spec.label}: method {spec.method} needs a drafter model")
    kw.update(speculative_algorithm=SGLANG_ALGORITHM[spec.method], speculative_draft_model_path=drafter_dir,
              **sglang_spec_args(int(spec.k), spec.tree))
    return kw


def sampling_params(spec: BenchSpec, max_tokens: int) -> dict:
    """SGLang sampling parameters of a point (temperature 0 is greedy: SGLang sets top_k = 1)."""
    return {"temperature": float(spec.engine.get("temperature", 0)), "max_new_tokens": int(max_tokens)}


def warmup_sampling_params() -> dict:
    """SGLang sampling parameters of the warm-up call before the first measured point."""
    return {"temperature": 0, "max_new_tokens": 16}


def engine_env(spec: BenchSpec) -> dict[str, str]:
    """The environment the engine process gets from ``engine.env`` (vLLM's own variables left out)."""
    return {str(k): str(v) for k, v in (spec.engine.get("env") or {}).items() if not str(k).startswith("VLLM_")}
