"""The CLI's verb table and its start-up: ``specrepro --help`` and a verb's ``--help`` import no verb module they
do not need and nothing heavy (issue 18 item 5)."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO

from specrepro import cli, figures
from specrepro.figures.verbs import FIGURES

HEAVY = ("pandas", "numpy", "matplotlib", "scipy", "torch", "vllm", "pyarrow")
#: verbs whose ``--help`` still imports a heavy package, and why (their ``add_cli`` sits in the module it drives)
HEAVY_HELP = {
    "report": "report.py (jinja2, pandas): the layer holds one module",
    "train-generate": "engine/models/drafters.py (numpy, pandas); its --kind choices are that module's KINDS",
    "train-states": "engine/models/drafters.py",
    "train-drafter": "engine/models/drafters.py",
    "build-model": "engine/models/standins.py (numpy): its --kind choices are the stand-ins' table",
    "convert-gguf": "engine/models/from_gguf.py (numpy)",
}


def _registered(module: str) -> dict[str, str]:
    """verb -> help of everything ``module.add_cli`` registers."""
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(module).add_cli(sub)
    return {a.dest: a.help for a in sub._choices_actions}


def test_every_verb_of_the_table_is_registered_by_its_module_with_its_help():
    by_module: dict[str, dict[str, str]] = {}
    for verb, (help_, module) in cli.VERBS.items():
        got = by_module.setdefault(module, _registered(module))
        assert got.get(verb) == help_, f"{verb}: {module}.add_cli registers {got.get(verb)!r}"
    listed = {m: {v for v, (_, mm) in cli.VERBS.items() if mm == m} for m in by_module}
    for module, got in by_module.items():
        assert set(got) == listed[module], f"{module} registers verbs the table does not list: {set(got) - listed[module]}"


def test_the_figure_table_is_the_modules_specs():
    want = {}
    for mod in figures.MODULES:
        s = figures.module(mod).SPEC
        want[s.name] = (f"{s.paper_ref}: {s.title}", mod)
    assert FIGURES == want
    assert list(FIGURES) == list(want)  # the order --help lists them in


def test_parser_builds_only_the_named_verb(capsys):
    with pytest.raises(SystemExit):
        cli.parser(["write-json", "--help"]).parse_args(["write-json", "--help"])
    assert "--json" in capsys.readouterr().out
    args = cli.parser(["figure", "fig05_acceptance_heatmap", "--run-config", "r", "--subject", "s", "-o", "o",
                       "--positions", "p", "--requests", "q"]).parse_args(
        ["figure", "fig05_acceptance_heatmap", "--run-config", "r", "--subject", "s", "-o", "o", "--positions", "p",
         "--requests", "q"])
    assert args.figure == "fig05_acceptance_heatmap" and callable(args.func)


def _imports(*argv: str) -> tuple[set[str], float]:
    """Top-level packages ``python -X importtime -m specrepro <argv>`` imports, and its wall time (s)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "specrepro", *argv], capture_output=True, text=True,
                       env=env, cwd=REPO)
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    mods = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in r.stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}
    return mods, wall


@pytest.mark.parametrize("argv", [("--help",), ("simulate", "--help"), ("bench", "--help"), ("figure", "--help")])
def test_help_imports_nothing_heavy(argv):
    mods, wall = _imports(*argv)
    assert "specrepro" in mods
    assert not mods & set(HEAVY), f"specrepro {' '.join(argv)} imports {sorted(mods & set(HEAVY))}"
    print(f"specrepro {' '.join(argv)}: {wall:.2f} s wall (with -X importtime)")


def test_every_verbs_help_imports_nothing_heavy_but_the_listed():
    heavy = {}
    for verb in cli.VERBS:
        mods, _ = _imports(verb, "--help")
        if mods & set(HEAVY):
            heavy[verb] = sorted(mods & set(HEAVY))
    assert set(heavy) <= set(HEAVY_HELP), {v: h for v, h in heavy.items() if v not in HEAVY_HELP}
