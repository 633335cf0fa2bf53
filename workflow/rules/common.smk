# Configuration: load and validate (schema + cross-references; a bad config stops here with one line, before any
# job runs), the paths and caches every job uses, and the tables several stages read: RUN, RELEASED, EXPERIMENTS,
# ENGINE and TRACE_SETS (the released trace set and one per engine experiment with traces).
# Each stage's own helpers are in workflow/rules/helpers/<stage>.smk, included at the top of its rule file (tables
# without functions, as digitise's and sizing's, sit there directly). Rules call some helpers while the Snakefile is
# read (e.g. `input: report_figures()`): the Snakefile includes a stage's file before any file whose rules do so.

import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

REPO = Path(workflow.basedir)
sys.path.insert(0, str(REPO / "src"))


from specrepro.config import apply_experiment_overrides, config_hash, config_problems, schema_error_from_workflow_error  # noqa: E402
from specrepro.core.fetch import resolve_source  # noqa: E402
from specrepro.core.io import SpecReproError  # noqa: E402
from specrepro.core.cluster import engine_resources as _engine_resources  # noqa: E402
from specrepro.core.integrity import quarantine, scan  # noqa: E402
from specrepro.jobspec import METHOD_LABELS, experiment_configs, profiled_datasets  # noqa: E402
from specrepro.jobspec import jobs as _jobs  # noqa: E402
from specrepro.jobspec.args import TRACE_K, TRACEABLE, trace_label  # noqa: E402
from specrepro.jobspec.images import IMAGE_NAMES, image_stem, job_image, trace_image as _trace_image, used_images as _used_images  # noqa: E402
from specrepro.jobspec.trees import experiment_engine, tree_study  # noqa: E402
from specrepro.core.layout import MIN_REQUESTS, PER_REQUEST  # noqa: E402


def stop(message):
    """End the run before any job with a one-line message."""
    print(message, file=sys.stderr)
    sys.exit(1)


# config/paper.yaml is the default; --configfile (e.g. the cpu profile) replaces it rather than merging into it.
CONFIG_FILES = [str(p) for p in workflow.overwrite_configfiles] or [str(REPO / "config" / "paper.yaml")]
if not workflow.overwrite_configfiles:
    workflow.configfile(CONFIG_FILES[0])

# `--config preflight=false` arrives as the string "false" (Snakemake parses only True/False): accept both.
for _k in ("preflight", "offline"):
    if isinstance(config.get(_k), str) and config[_k].lower() in ("true", "false"):
        config[_k] = config[_k].lower() == "true"

try:
    apply_experiment_overrides(config)
except SpecReproError as exc:
    stop(str(exc))
try:
    validate(config, schema=str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
except WorkflowError as exc:
    stop(schema_error_from_workflow_error(exc) or f"config error: {exc}")
_problems = config_problems(config)
if _problems:
    stop(_problems[0])


def repo_path(p):
    """Config paths are relative to the repository root, wherever snakemake runs."""
    if p is None:
        return None
    p = Path(p).expanduser()
    return str(p if p.is_absolute() else (REPO / p).resolve())


RUN = config["run"]
RELEASED = config["released_traces"]
TRACES_DIR = repo_path(config.get("traces_dir"))
OFFLINE = bool(config.get("offline", False))
DATASET_ORDER = list(config["datasets"])

# --- caches and deployment ---------------------------------------------------------------

from snakemake.settings.types import DeploymentMethod  # noqa: E402

USES_APPTAINER = DeploymentMethod.APPTAINER in workflow.deployment_settings.deployment_method
CACHE_DIR = repo_path(config["cache"]["dir"])
# Environment of every job (set in its shell, so also inside the container): caches outside the repo.
CACHE_ENV = {
    "SPECREPRO_CACHE": CACHE_DIR,
    "HF_HOME": repo_path(config["cache"]["huggingface"]) or f"{CACHE_DIR}/huggingface",
    "VLLM_CACHE_ROOT": repo_path(config["cache"]["vllm"]) or f"{CACHE_DIR}/vllm",
    "TRITON_CACHE_DIR": repo_path(config["cache"]["triton"]) or f"{CACHE_DIR}/triton",
}
HF_HUB_CACHE = f"{CACHE_ENV['HF_HOME']}/hub"
# HF_HOME moves the token file too: keep reading the user's own (hf auth login) unless HF_TOKEN is set.
HF_TOKEN_PATH = os.environ.get("HF_TOKEN_PATH") or str(
    Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "token"
)
IMAGES_DIR = repo_path(config["containers"]["dir"]) or f"{CACHE_DIR}/images"

# Rules call `specrepro <verb>`: the launcher in workflow/bin runs this checkout's code.
shell.prefix(
    f'export PATH="{REPO}/workflow/bin:$PATH" SPECREPRO_PYTHON="{sys.executable}" HF_TOKEN_PATH="{HF_TOKEN_PATH}"'
    + "".join(f' {k}="{v}"' for k, v in CACHE_ENV.items())
    + "; "
)

if USES_APPTAINER:
    # The container sees only bound paths; bind the caches (outside the repo) for every apptainer call.
    _outer = sorted({d for d in CACHE_ENV.values() if not Path(d).is_relative_to(REPO)})
    _binds = [d for d in _outer if not any(d != o and Path(d).is_relative_to(o) for o in _outer)]
    for _d in _binds:
        Path(_d).mkdir(parents=True, exist_ok=True)
    os.environ.update(APPTAINER_BIND=",".join(filter(None, [os.environ.get("APPTAINER_BIND", ""), *_binds])))


RUN_CONFIG = "results/run_config.json"
REPORT_PDF = "paper/report.pdf"
MANIFEST = "results/manifest.json"

wildcard_constraints:
    traceset="[a-z0-9][a-z0-9.]*(-[a-z0-9.]+)*",
    dataset="[a-z0-9_]+",


def name_regex(names):
    """A wildcard constraint matching exactly ``names`` (nothing when empty)."""
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


# Damaged results (truncated Parquet, broken JSON) are moved aside before the DAG is built, so they
# are rebuilt and never read. Only in the main process: cluster jobs re-read the Snakefile.
if workflow.is_main_process:
    for _line in quarantine(scan(["results", "resources"])):
        print(_line, file=sys.stderr)


# --- tables several stages read ----------------------------------------------------------
# TRACE_SETS is complete here, engine trace sets included, so every rule file sees the same table when it is read.

EXPERIMENTS = {e["name"]: e for e in config.get("experiments", [])}
ENGINE = config["engine"]


def exp_configs(exp):
    """{label: {method, k, datasets}} of one experiment, in config order (one engine job each)."""
    return experiment_configs(EXPERIMENTS[exp])


# Trace sets the acceptance figures are drawn for. The released one is an input; engine runs add theirs.
TRACE_SETS = {
    RELEASED["name"]: {
        "label": RELEASED.get("label", RELEASED["name"]),
        "origin": "released",
        "model": RELEASED["model"],
        "hardware": RELEASED["hardware"],
        "datasets": [d for d in DATASET_ORDER if d in RELEASED["files"]],
        "proposers": [[k, v] for k, v in RELEASED["proposers"].items()],  # a list: order matters
        "aligned": list(RELEASED.get("aligned", ["ngram"])),
        "files": {d: f"resources/traces/{RELEASED['name']}/{d}.jsonl" for d in RELEASED["files"]},
    }
}

# A local traces_dir must be complete; checked now so a missing file stops the run before any job.
for _d in RELEASED["files"]:
    try:
        resolve_source(
            RELEASED["url"].format(dataset=_d), TRACES_DIR, RELEASED.get("filename", "combined_{dataset}.jsonl").format(dataset=_d), OFFLINE
        )
    except SpecReproError as exc:
        stop(f"input error: {exc}")


def drafter_of(exp, method):
    """The drafter entry (models.<m>.drafters.<method>) an engine job needs, or {}."""
    return _jobs.drafter_of(config, EXPERIMENTS[exp], method)


def engine_trace_methods(exp):
    """Methods of an experiment whose per-position traces the run computes (k = 20 engines; specrepro.jobspec.jobs)."""
    return _jobs.trace_methods(config, exp)


def no_sd_failed(exp):
    """Whether the experiment's no-SD bench job recorded no finished point (its engine did not start, or every
    point failed): then there are no greedy outputs to compare the traces with."""
    try:
        rec = json.loads(Path(f"results/engine/{exp}/bench/none.json").read_text())
    except (OSError, ValueError):
        return False
    return rec.get("status") == "failed" or bool(rec.get("points")) and int(rec.get("failed") or 0) >= int(rec["points"])


def trace_failed(exp, method):
    """Whether a finished trace job of ``method`` recorded that its engine failed (its check file): a run after
    it leaves that method out of the experiment's trace set."""
    try:
        return json.loads(Path(f"results/engine/{exp}/traces/{method}.check.json").read_text()).get("status") == "failed"
    except (OSError, ValueError):
        return False


def traced_methods(exp):
    """:func:`engine_trace_methods` less those whose trace engine recorded a failure (listed with a note)."""
    out = []
    for m in engine_trace_methods(exp):
        if trace_failed(exp, m):
            if workflow.is_main_process:
                print(f"note: {exp}: the trace engine of {m} failed (results/engine/{exp}/traces/{m}.check.json): "
                      "its traces are left out of this run's trace set", file=sys.stderr)
            continue
        out.append(m)
    return out


# Engine trace sets: one per experiment with a no-SD run and traceable methods (acceptance figures for each).
# A no-SD job whose engine did not start leaves nothing to compare with: the run after it leaves that set out;
# a trace engine that failed leaves its method out of the set in the run after it.
for _x in EXPERIMENTS:
    _methods = traced_methods(_x)
    if _methods and no_sd_failed(_x):
        if workflow.is_main_process:
            print(f"note: {_x}: its no-SD job finished no point (results/engine/{_x}/bench/none.json): "
                  "its engine trace set is left out of this run", file=sys.stderr)
        continue
    if _methods:
        _ds = _jobs.trace_datasets(config, _x)
        TRACE_SETS[f"engine-{_x}"] = {
            "requests": _jobs.trace_requests(config, _x),
            "label": EXPERIMENTS[_x].get("label") or f"{_x} engine run ({RUN['kind'].upper()})",
            "origin": "engine",
            "model": EXPERIMENTS[_x]["model"],
            "hardware": RUN["kind"],
            "datasets": _ds,
            "proposers": [[m, drafter_of(_x, m).get("label") or METHOD_LABELS[m]] for m in _methods],
            "aligned": list(_methods),
            "files": {d: f"resources/traces/engine-{_x}/{d}.jsonl" for d in _ds},
        }


# The run's config as the analysis scripts read it (rule run_config, Snakefile); called when the DAG is built,
# after every rule file has defined what it reads.
def resolved_config():
    """The validated config plus what the workflow derived from it; the analysis scripts read this."""
    cfg = json.loads(json.dumps(config))
    cfg["config_files"] = [str(Path(p).resolve().relative_to(REPO)) if Path(p).resolve().is_relative_to(REPO) else str(p) for p in CONFIG_FILES]
    cfg["config_hash"] = config_hash(config)
    cfg["trace_sets"] = {k: {kk: vv for kk, vv in v.items() if kk != "files"} for k, v in TRACE_SETS.items()}
    if EXPERIMENTS:
        # one label for every engine item, the run-wide tables (stand-ins included) as much as Fig. 1 (real model only)
        real = [x for x in EXPERIMENTS if x not in standin_experiments()]
        tiny = ("tiny locally built stand-ins and a small real model" if real and standin_experiments()
                else "tiny locally built models" if standin_experiments() else "small real models")
        kind = f"CPU, {tiny}: not evidence for the paper" if RUN["kind"] != "gpu" else "GPU"
        cfg["subjects"] = {"engine": {"label": f"engine runs ({kind})"}}
    if DIGITISE:
        cfg.setdefault("subjects", {})["paper"] = {"label": "the paper's figure images"}
    return cfg
