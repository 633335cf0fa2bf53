"""Helpers of the infrastructure tests: the checkout under test, an apptainer stand-in, snakemake runs."""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
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


def slurm_controller_listens() -> bool:
    """Whether the controller that slurm.conf (``$SLURM_CONF`` or /etc/slurm/slurm.conf) names accepts a connection;
    answers at once, where SLURM's own clients wait about 9 s for a controller that is down."""
    try:
        text = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")).read_text(errors="replace")
    except OSError:
        return False
    host = re.search(r"^\s*SlurmctldHost\s*=\s*([^\s(#,]+)", text, re.M | re.I)
    port = re.search(r"^\s*SlurmctldPort\s*=\s*(\d+)", text, re.M | re.I)
    if host is None:
        return False
    try:
        with socket.create_connection((host.group(1), int(port.group(1)) if port else 6817), timeout=2):
            return True
    except OSError:
        return False


def scontrol_without_controller() -> Path | None:
    """Where ``scontrol`` is installed but no controller listens: a folder holding an ``scontrol`` that fails at once,
    for the front of PATH (None elsewhere). Snakemake's SLURM executor plugin runs ``scontrol show config`` when it is
    imported, i.e. at every Snakemake start, dry runs included; with slurm-wlm installed and its controller down
    (CI's machine between its SLURM stages) each start waited 9 s for it: 13 s for a dry run of the CPU config
    instead of 3.4 s, about 5 min over the suite. The plugin takes a failing scontrol as "MinJobAge unknown", which
    only changes one option's help text."""
    if shutil.which("scontrol") is None or slurm_controller_listens():
        return None
    folder = Path(tempfile.mkdtemp(prefix="scontrol-no-controller-"))
    exe = folder / "scontrol"
    exe.write_text("#!/bin/sh\necho 'scontrol: no SLURM controller listens here (tests/_infra.py)' >&2\nexit 1\n")
    exe.chmod(0o755)
    return folder
