"""The package's layers (CONTRIBUTING.md, "Layers"): import-linter's contracts in pyproject.toml hold, and the check
fails when an arrow points up again (shown on a copy of the package with one upward import added)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from conftest import REPO

CONTRACTS = ("layers", "engine", "startup", "no-engine")


def _lint(src, cwd) -> subprocess.CompletedProcess:
    """``lint-imports`` with the repository's contracts on the package under ``src`` (no cache)."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(REPO / 'pyproject.toml')!r}, no_cache=True))")
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env)


def test_every_contract_is_kept():
    r = _lint(REPO / "src", REPO)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in r.stdout


def test_an_upward_import_breaks_the_layers(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "specrepro", src / "specrepro", ignore=shutil.ignore_patterns("__pycache__"))
    bench = src / "specrepro" / "engine" / "run" / "bench.py"
    bench.write_text(bench.read_text() + "\n\ndef _upward():\n    from ...cli import main  # an arrow back up\n\n"
                     "    return main\n")
    r = _lint(src, tmp_path)
    assert r.returncode != 0
    assert "layers point down; every module is in one BROKEN" in r.stdout
    assert "specrepro.engine.run.bench -> specrepro.cli" in r.stdout
    assert "Contracts: 3 kept, 1 broken." in r.stdout
