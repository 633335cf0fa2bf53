"""Shared test helpers: repository paths, the released traces beside the clone, small trace files."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _infra import scontrol_without_controller

# the marker scheme (slow/e2e/slurm/engine), checked on every test while it runs (tests/_markers.py)
pytest_plugins = ["_markers"]

# every Snakemake start (dry runs, the DAG probes, the markers plugin's parser) skips the SLURM plugin's 9-s wait for a
# controller that is down (tests/_infra.py); this process and every subprocess of the session see it first on PATH
_NO_CONTROLLER = scontrol_without_controller()
if _NO_CONTROLLER is not None:
    os.environ["PATH"] = f"{_NO_CONTROLLER}{os.pathsep}{os.environ.get('PATH', '')}"
    atexit.register(shutil.rmtree, _NO_CONTROLLER, True)

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = (REPO / ".." / "shared" / "traces" / "llama3.1-8B-H100").resolve()
DATASETS = ("cnn", "gsm8k", "instructcoder", "sharegpt")

#: facts about the released files, from ../shared/traces/SOURCE.md
RELEASED_FACTS = {
    "cnn": {"records": 300, "output_tokens": 96_856, "eagle_equal_length": 82},
    "gsm8k": {"records": 300, "output_tokens": 49_848, "eagle_equal_length": 174},
    "instructcoder": {"records": 500, "output_tokens": 130_989, "eagle_equal_length": 408},
    "sharegpt": {"records": 310, "output_tokens": 225_541, "eagle_equal_length": 69},
}


needs_traces = pytest.mark.skipif(not SHARED_TRACES.exists(), reason=f"released traces not found at {SHARED_TRACES}")

#: a cost model with round numbers, for hand-computed simulator cases
ROUND_COST = """\
name: round-numbers
target: {c_kv: 0.001, c_compute: 0.01, c_fixed: 0.1}
eagle: {d_kv: 0.0001, d_spec: 0.001, d_fixed: 0.01}
ngram: {draft_fraction: 0.5}
overhead_per_step: 1.0
"""


@pytest.fixture
def round_cost(tmp_path):
    from specrepro.core.costmodel import load_cost_model

    path = tmp_path / "round.yaml"
    path.write_text(ROUND_COST)
    return load_cost_model(str(path))


def released_trace(dataset: str) -> Path:
    path = SHARED_TRACES / f"combined_{dataset}.jsonl"
    if not path.exists():
        pytest.skip(f"released traces not found at {SHARED_TRACES} (place ../shared beside the clone)")
    return path


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"released traces not found at {SHARED_TRACES}")
    return SHARED_TRACES


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def small_record(rid: str, output: list[int], ngram: list[int], eagle: list[int], prompt: list[int] | None = None) -> dict:
    return {
        "id": rid,
        "prompt_token_ids": prompt if prompt is not None else [1, 2, 3],
        "generated_token_ids": output,
        "acc_ngram": {"acc_len": ngram},
        "acc_eagle": {"acc_len": eagle},
    }


def snakemake_cmd() -> list[str]:
    exe = shutil.which("snakemake", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if exe is None:
        pytest.skip("snakemake not installed")
    return [exe]


def run_snakemake(args: list[str], cwd: Path = REPO, env: dict | None = None, timeout: int = 3600) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + full_env.get("PATH", "")
    if env:
        full_env.update(env)
    return subprocess.run(
        snakemake_cmd() + args, cwd=cwd, capture_output=True, text=True, env=full_env, timeout=timeout
    )


@pytest.fixture(scope="session")
def dag_jobs(tmp_path_factory):
    """``dag_jobs(config, *targets, apptainer=True) -> (jobs, cache_dir)``: every job of a config's DAG
    (tests/dag_probe.py; ``cache.dir`` = ``cache_dir``), built once per session for the same arguments (several
    modules read the paper DAG: each build is a Snakemake start and a DAG of about 700 jobs)."""
    from _infra import env_with, fake_apptainer

    built: dict[tuple, tuple[list[dict], Path]] = {}

    def probe(config: str, *targets: str, apptainer: bool = True) -> tuple[list[dict], Path]:
        key = (config, targets, apptainer)
        if key not in built:
            work = tmp_path_factory.mktemp("dag")
            proc = subprocess.run(
                [sys.executable, str(REPO / "tests" / "dag_probe.py"), str(REPO), config, str(work / "cache"),
                 *(["--apptainer"] if apptainer else []), *targets],
                capture_output=True, text=True, env=env_with(fake_apptainer(work) if apptainer else None), timeout=300)
            assert proc.returncode == 0, proc.stderr[-3000:]
            built[key] = (json.loads(proc.stdout), work / "cache")
        return built[key]

    return probe


@pytest.fixture(scope="session")
def dry_run(tmp_path_factory):
    """``dry_run(*args)``: ``snakemake -n *args`` in an empty directory of its own, once per session for the same
    arguments (the CompletedProcess)."""
    done: dict[tuple, subprocess.CompletedProcess] = {}

    def run(*args: str) -> subprocess.CompletedProcess:
        if args not in done:
            done[args] = run_snakemake(["-n", *args, "--directory", str(tmp_path_factory.mktemp("dry-run"))])
        return done[args]

    return run


PROMPT_FILES = sorted((REPO / "config" / "prompts").glob("*.jsonl"))
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def needs_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        pytest.skip("vllm(-cpu) not installed")


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory) -> Path:
    """A tiny random Llama built by the pipeline's own builder (tokenizer trained on the prompt files)."""
    from specrepro.engine.models.standins import build_model

    out = tmp_path_factory.mktemp("models") / "tiny-llama"
    build_model("tiny-llama", out, seed=0, corpus=PROMPT_FILES)
    return out


def model_manifest_file(tmp_path: Path, model_dir: Path, name: str = "tiny-llama") -> Path:
    """A manifest (as the build/download rules write) for a model directory."""
    from specrepro.core.hub import manifest

    m = tmp_path / f"{name.replace('/', '_')}.manifest.json"
    m.write_text(json.dumps(manifest(name, "model", "build", model_dir)))
    return m
