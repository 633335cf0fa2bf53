"""workflow/bin/specrepro, the launcher every rule runs: it takes Snakemake's Python when that one has pandas,
else the ``python3`` of the job's PATH (a conda env's, a container's), and it finds pandas without importing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO

LAUNCHER = REPO / "workflow" / "bin" / "specrepro"


def _shim(path, name, log, python):
    """An executable ``name`` that logs its arguments and runs ``python`` with them."""
    path.mkdir(exist_ok=True)
    exe = path / name
    exe.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexec {python} "$@"\n')
    exe.chmod(0o755)
    return exe


def _run(tmp_path, specrepro_python):
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    _shim(bin_dir, "python3", log, sys.executable)  # the PATH's python3 (a job's env), runs the venv's Python
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SPECREPRO_PYTHON=str(specrepro_python))
    env.pop("APPTAINER_CONTAINER", None)
    env.pop("SINGULARITY_CONTAINER", None)
    out = tmp_path / "x.json"
    proc = subprocess.run(["bash", str(LAUNCHER), "write-json", "--json", '{"b": 1, "a": 2}', "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == {"a": 2, "b": 1}
    return log.read_text().splitlines() if log.exists() else []


def test_snakemakes_python_with_pandas_runs_the_verb(tmp_path):
    wrapper = _shim(tmp_path / "snake", "snakepy", tmp_path / "calls.log", sys.executable)
    calls = _run(tmp_path, wrapper)
    # the probe, then the verb, both with Snakemake's Python; the PATH's python3 is not used
    assert len(calls) == 2 and all(c.startswith("snakepy ") for c in calls), calls
    probe, verb = calls
    assert "find_spec('pandas')" in probe and "import pandas" not in probe
    assert verb == "snakepy -m specrepro write-json --json {\"b\": 1, \"a\": 2} -o " + str(tmp_path / "x.json")


def test_a_python_without_pandas_falls_back_to_the_paths_python3(tmp_path):
    # a Python that finds no pandas: the venv's Python without its site-packages (-S)
    bare = _shim(tmp_path / "snake", "barepy", tmp_path / "calls.log", f"{sys.executable} -S")
    calls = _run(tmp_path, bare)
    assert [c.split(" ")[0] for c in calls] == ["barepy", "python3"], calls
    assert calls[1].startswith("python3 -m specrepro write-json")
