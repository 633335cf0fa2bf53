"""The ``specrepro`` command's exit: no teardown after a verb succeeded, unless a child process lives."""

import json
import subprocess
import sys

from _infra import REPO, env_with

SCRIPT = """
import atexit, sys, time
from specrepro.core.procexit import fast_exit
atexit.register(lambda: print("atexit ran", flush=True))
child = None
if sys.argv[1] == "child":
    import multiprocessing
    child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(30,), daemon=True)
    child.start()
print("written", end="")  # unflushed: fast_exit must flush it
fast_exit(0)
if child is not None:
    child.kill()
print(" / returned", end="")
"""


def _run(mode, **env):
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120,
                          env=env_with(**env), cwd=REPO)


def test_fast_exit_flushes_and_skips_the_teardown():
    proc = _run("alone")
    assert proc.returncode == 0 and proc.stdout == "written", (proc.stdout, proc.stderr)


def test_a_live_child_or_the_switch_keeps_the_normal_exit():
    """vLLM's engine core or tensor-parallel workers (GPU runs) must be stopped by its own shutdown."""
    proc = _run("child")
    assert proc.returncode == 0 and proc.stdout == "written / returnedatexit ran\n", (proc.stdout, proc.stderr)
    proc = _run("alone", SPECREPRO_FULL_EXIT="1")
    assert proc.returncode == 0 and proc.stdout == "written / returnedatexit ran\n", (proc.stdout, proc.stderr)


def test_the_command_writes_its_output_and_exits_zero(tmp_path):
    """The console script (specrepro.cli:run) after a verb: its output complete, status 0; an error keeps status 2."""
    exe = REPO / ".venv" / "bin" / "specrepro"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "specrepro"]
    out = tmp_path / "x.json"
    proc = subprocess.run([*cmd, "write-json", "--json", '{"b": 1, "a": [1, 2]}', "-o", str(out)], capture_output=True,
                          text=True, timeout=120, env=env_with(), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == {"a": [1, 2], "b": 1}
    proc = subprocess.run([*cmd, "trace-tables", str(tmp_path / "missing.jsonl"), "--dataset", "cnn", "--positions",
                           str(tmp_path / "p.parquet"), "--requests", str(tmp_path / "r.parquet")],
                          capture_output=True, text=True, timeout=120, env=env_with(), cwd=REPO)
    assert proc.returncode == 2 and "specrepro trace-tables: error:" in proc.stderr, proc.stderr
