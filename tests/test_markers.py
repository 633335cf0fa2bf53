"""The marker scheme holds (tests/_markers.py): a test that starts a vLLM engine or runs the whole workflow
carries its marker, a test outside the slow set stays within its CPU budget, and ``-m "not slow"`` leaves
out everything marked e2e, slurm or engine."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _markers import classify
from conftest import REPO

TESTS = Path(__file__).resolve().parent
PY = sys.executable


@pytest.mark.parametrize("argv, kinds", [
    ([PY, str(TESTS / "engine_smoke.py"), "{}"], {"engine"}),
    ([PY, "-m", "specrepro", "bench", "--spec", "{}"], {"engine"}),
    ([PY, "-m", "specrepro", "engine-trace", "--spec", "{}"], {"engine"}),
    (["specrepro", "train-generate", "--target-manifest", "m.json"], {"engine"}),
    ([PY, "-m", "specrepro", "write-json", "--json", "{}", "-o", "x.json"], set()),
    ([PY, "-c", "from vllm import LLM\nllm = LLM(model='m')"], {"engine"}),
    ([PY, "-c", "import vllm; print(vllm.__version__)"], set()),
    ([PY, "-m", "snakemake", "--profile", "profiles/cpu", "--directory", "/tmp/w"], {"workflow"}),
    (["snakemake", "--cores", "2", "--configfile", "c.yaml", "--directory", "/tmp/w"], {"workflow"}),
    ([PY, "-m", "snakemake", "-n", "--profile", "profiles/cpu", "--directory", "/tmp/w"], set()),
    ([PY, "-m", "snakemake", "--lint"], set()),
    ([PY, "-m", "snakemake", "--cores", "1", "--directory", "/tmp/w", "results/run_config.json"], set()),
    ([PY, "-m", "snakemake", "--profile", "profiles/cpu", "--until", "claims"], set()),
    ("snakemake --profile profiles/cpu", {"workflow"}),
    (["git", "status"], set()),
])
def test_classify_command_lines(argv, kinds):
    assert classify(argv) == kinds


INNER = '''
import subprocess, sys, time
import pytest

ENGINE = [sys.executable, "-c", "pass  # LL" "M(model=...) is what an engine script does"]

def spin(seconds):
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass

def test_unmarked_engine():
    subprocess.run(ENGINE, check=True)

@pytest.mark.engine
def test_marked_engine():
    subprocess.run(ENGINE, check=True)

def _snakemake(tmp_path, status):
    # a whole-workflow command line of Snakemake (no target), exiting with this status
    fake = tmp_path / "snakemake"
    fake.write_text(f"#!/bin/sh\\nexit {status}\\n")
    fake.chmod(0o755)
    subprocess.run([str(fake), "--profile", "profiles/cpu", "--directory", str(tmp_path)])

def test_unmarked_workflow(tmp_path):
    subprocess.run([sys.executable, "-c", "pass", "snakemake"], check=True)  # not a snakemake run
    _snakemake(tmp_path, 0)

def test_unmarked_workflow_that_stops_before_any_job(tmp_path):
    _snakemake(tmp_path, 1)

def test_costly():
    spin(0.6)

@pytest.mark.slow
def test_costly_marked_slow():
    spin(0.6)

def test_cheap():
    pass

@pytest.fixture(scope="module")
def costly_fixture():
    spin(0.6)
    return 1

def test_first_user_of_a_costly_fixture(costly_fixture):
    assert costly_fixture == 1

def test_second_user_of_a_costly_fixture(costly_fixture):
    assert costly_fixture == 1
'''


def _outcomes(args: list[str], cwd: Path) -> tuple[dict[str, str], str]:
    proc = subprocess.run([PY, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "-o", "fast_cpu_budget=0.4",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    return {m.group(2): m.group(1) for m in re.finditer(r"^(PASSED|FAILED|ERROR) \S+::(\w+)", out, re.M)}, out


@pytest.fixture(scope="module")
def inner_suite(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inner")
    (d / "conftest.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        pytest_plugins = ["_markers"]
        """))
    (d / "test_inner.py").write_text(INNER)
    (d / "pytest.ini").write_text("[pytest]\nmarkers =\n    engine: e\n    e2e: e\n    slurm: s\n    slow: s\n")
    return d


def test_guard_fails_unmarked_engine_workflow_and_costly_tests(inner_suite):
    got, out = _outcomes(["."], inner_suite)
    assert got == {
        "test_unmarked_engine": "FAILED", "test_marked_engine": "PASSED",
        "test_unmarked_workflow": "FAILED", "test_unmarked_workflow_that_stops_before_any_job": "PASSED",
        "test_costly": "FAILED", "test_costly_marked_slow": "PASSED", "test_cheap": "PASSED",
        # the fixture's cost counts for every test that uses it, whichever set it up
        "test_first_user_of_a_costly_fixture": "FAILED", "test_second_user_of_a_costly_fixture": "FAILED",
    }, out
    assert "starts a vLLM engine (the test) but is not marked: add @pytest.mark.engine" in out
    assert "runs the whole Snakemake workflow (the test) but is not marked: add @pytest.mark.e2e" in out
    assert re.search(r"used 0\.\d CPU-seconds \(fixture costly_fixture 0\.\d s, the test 0\.0 s\), more than a test of "
                     r"the fast loop may \(fast_cpu_budget = 0\.4\): mark it @pytest\.mark\.slow", out), out


def test_not_slow_leaves_out_the_implied_markers(inner_suite):
    got, out = _outcomes([".", "-m", "not slow", "-k", "test_marked_engine or test_cheap or test_costly_marked_slow"], inner_suite)
    assert got == {"test_cheap": "PASSED"}, out


def test_every_marker_used_in_tests_is_registered():
    """pyproject.toml lists every marker the suite uses (and --strict-markers makes a typo an error)."""
    text = (REPO / "pyproject.toml").read_text()
    assert "--strict-markers" in text
    used = set()
    for f in TESTS.glob("*.py"):
        used |= set(re.findall(r"pytest\.mark\.(\w+)", f.read_text()))
    builtin = {"parametrize", "skipif", "skip", "xfail", "usefixtures", "filterwarnings"}
    for name in used - builtin:
        assert re.search(rf'^\s*"{name}: ', text, re.M), f"marker {name!r} is not registered in pyproject.toml"
