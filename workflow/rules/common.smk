# Configuration: load, validate (schema + cross-references), derive the run's targets.
# A bad config stops here with one line, before any job runs.

import json
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

REPO = Path(workflow.basedir)
sys.path.insert(0, str(REPO / "src"))

# Rules call `specrepro <verb>`: the launcher in workflow/bin runs this checkout's code.
shell.prefix(f'export PATH="{REPO}/workflow/bin:$PATH" SPECREPRO_PYTHON="{sys.executable}"; ')

from specrepro.config import config_hash, config_problems, schema_error_from_workflow_error  # noqa: E402
from specrepro.fetch import resolve_source  # noqa: E402
from specrepro.io import SpecReproError  # noqa: E402


def stop(message):
    """End the run before any job with a one-line message."""
    print(message, file=sys.stderr)
    sys.exit(1)


# config/paper.yaml is the default; --configfile (e.g. the cpu profile) replaces it rather than merging into it.
CONFIG_FILES = [str(p) for p in workflow.overwrite_configfiles] or [str(REPO / "config" / "paper.yaml")]
if not workflow.overwrite_configfiles:
    workflow.configfile(CONFIG_FILES[0])

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


def acceptance_targets(traceset):
    out = [f"figures/{name}-{traceset}.pdf" for name in ACCEPTANCE_FIGURES]
    out += [f"figures/{name}-{traceset}.tex" for name in ACCEPTANCE_TABLES]
    return out


def report_figures():
    """Every figure and table the report shows, for this config."""
    out = []
    for ts in TRACE_SETS:
        out += acceptance_targets(ts)
    return out


def metrics_files():
    return [f"results/metrics/acceptance-{ts}.json" for ts in TRACE_SETS]


def input_records():
    return [f"resources/traces/{RELEASED['name']}/{d}.source.json" for d in TRACE_SETS[RELEASED["name"]]["datasets"]]


def resolved_config():
    """The validated config plus what the workflow derived from it; the analysis scripts read this."""
    cfg = json.loads(json.dumps(config))
    cfg["config_files"] = [str(Path(p).resolve().relative_to(REPO)) if Path(p).resolve().is_relative_to(REPO) else str(p) for p in CONFIG_FILES]
    cfg["config_hash"] = config_hash(config)
    cfg["trace_sets"] = {k: {kk: vv for kk, vv in v.items() if kk != "files"} for k, v in TRACE_SETS.items()}
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

wildcard_constraints:
    traceset="[a-z0-9][a-z0-9.]*(-[a-z0-9.]+)*",
    dataset="[a-z0-9_]+",
