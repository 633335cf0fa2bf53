"""Helpers of the infrastructure tests: the checkout under test, an apptainer stand-in, snakemake runs."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # this checkout's specrepro, whatever is installed


def fake_apptainer(tmp_path):
    """A folder with a two-line `apptainer` (Snakemake checks its version even in a dry run)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "apptainer"
    exe.write_text('#!/bin/sh\necho "apptainer version 1.4.5"\n')
    exe.chmod(0o755)
    return bin_dir


def env_with(path_dir=None, **extra):
    env = dict(os.environ)
    if path_dir:
        env["PATH"] = f"{path_dir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(REPO / "src")
    env.update(extra)
    return env


def snakemake(*args, env=None, cwd=REPO, timeout=300):
    """Run this Python's snakemake; returns the CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env or env_with(),
                          capture_output=True, text=True, timeout=timeout)
