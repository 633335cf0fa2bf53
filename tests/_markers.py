"""The marker scheme of the test suite, kept by the suite itself (a plugin: ``pytest_plugins`` in ``conftest.py``).

``slow`` is every test the fast development loop (``pytest -m "not slow"``) leaves out; ``e2e``, ``slurm`` and
``engine`` imply it. While a test runs (setup, its fixtures, call) this plugin records the CPU time of the
test process and of its finished children, and every subprocess it starts. A test then fails when

- it starts a vLLM engine (``tests/engine_smoke.py``, an engine verb of ``specrepro``, a script that builds
  ``LLM(``) and is not marked ``engine`` (or ``e2e``/``slurm``);
- it runs the whole Snakemake workflow (a real run with no target that finishes with status 0) and is not marked
  ``e2e`` or ``slurm``;
- it is not marked ``slow`` and it, with the fixtures it uses (each fixture counted whole, whichever test set it
  up), took more than ``fast_cpu_budget`` CPU-seconds (``pyproject.toml``).

CPU time, not wall time: the machine is shared, and CPU time moves much less with the load than wall time (it
still grows under heavy contention: the slow tests of test_engine_traces.py took 212 CPU-s at load 1.5 and about
2.6 times that at load 12, so the budget is about twice the costliest fast test measured under load). ``--cost-report FILE``
writes every test's wall and CPU seconds (JSON lines) for measuring the suite file by file.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

IMPLY_SLOW = ("e2e", "slurm", "engine")
ENGINE_MARKS = ("engine", "e2e", "slurm")
WORKFLOW_MARKS = ("e2e", "slurm")
#: ``specrepro`` verbs that build a vLLM (or SGLang) engine
ENGINE_VERBS = frozenset({"bench", "draft-bench", "profile", "engine-trace", "sglang-bench", "train-generate"})
#: text of a script or ``-c`` program that builds an engine
ENGINE_CODE = ("LLM(", "engine_smoke")


def cpu_seconds() -> float:
    """User + system CPU of this process and of its children that have finished."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _script_text(argv: list[str]) -> str:
    """The program a Python command line runs: ``-c`` code, or the text of its script file."""
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-c" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.endswith(".py"):
            try:
                return Path(arg).read_text(encoding="utf-8", errors="replace")
            except OSError:
                return arg
    return ""


def _specrepro_verb(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "specrepro" and i > 0 and argv[i - 1] == "-m" or Path(arg).name == "specrepro" and i == 0:
            rest = [a for a in argv[i + 1:] if not a.startswith("-")]
            return rest[0] if rest else None
    return None


def _snakemake_args(argv: list[str]) -> list[str] | None:
    for i, arg in enumerate(argv):
        if arg == "snakemake" and i > 0 and argv[i - 1] == "-m" or Path(arg).name == "snakemake" and i == 0:
            return argv[i + 1:]
    return None


@functools.lru_cache(maxsize=1)
def _snakemake_parser():
    from snakemake.cli import get_argument_parser

    return get_argument_parser()


def whole_workflow_run(args: list[str]) -> bool:
    """Snakemake's own parser: a real run (no dry run, lint, listing) with no target builds the whole workflow."""
    try:
        a = _snakemake_parser().parse_args(args)
    except SystemExit:
        return False
    looks = (a.dryrun, a.lint is not None, a.dag is not None, a.rulegraph is not None, a.list_changes is not None,
             a.list_rules, a.list_target_rules, a.summary, a.detailed_summary, a.filegraph, a.d3dag,
             a.print_compilation, a.unlock, a.touch, a.delete_all_output, a.delete_temp_output)
    return not any(looks) and not a.targets and not a.until


def classify(argv) -> set[str]:
    """What a subprocess command line does: ``engine`` (builds a vLLM engine), ``workflow`` (runs all of Snakefile)."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = shlex.split(os.fsdecode(argv))
    argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
    kinds: set[str] = set()
    if not argv:
        return kinds
    if _specrepro_verb(argv) in ENGINE_VERBS and not {"-h", "--help"} & set(argv):  # a verb's help starts nothing
        kinds.add("engine")
    smk = _snakemake_args(argv)
    if smk is not None:
        if whole_workflow_run(smk):
            kinds.add("workflow")
    elif Path(argv[0]).name.startswith("python") and any(code in _script_text(argv) for code in ENGINE_CODE):
        kinds.add("engine")
    return kinds


@dataclass
class Record:
    cpu: float = 0.0
    wall: float = 0.0
    started: list[tuple[set[str], subprocess.Popen]] = field(default_factory=list)

    @property
    def kinds(self) -> set[str]:
        """What its subprocesses did: ``engine`` once one started vLLM, ``workflow`` once a run of the whole
        Snakefile finished with status 0 (a run that stops before any job, on a config error, costs nothing)."""
        out: set[str] = set()
        for kinds, proc in self.started:
            out |= {k for k in kinds if k != "workflow" or proc.returncode == 0}
        return out


class Meter:
    """A stack of open records; a subprocess and the CPU time of a nested fixture belong to the innermost one."""

    def __init__(self) -> None:
        self.stack: list[list] = []   # [record, cpu at start, wall at start, nested cpu, nested wall]
        self.fixtures: dict[tuple[str, str, str], Record] = {}
        self.tests: dict[str, Record] = {}

    def start(self, rec: Record) -> None:
        self.stack.append([rec, cpu_seconds(), time.monotonic(), 0.0, 0.0])

    def stop(self) -> None:
        rec, cpu0, wall0, nested_cpu, nested_wall = self.stack.pop()
        cpu, wall = cpu_seconds() - cpu0, time.monotonic() - wall0
        rec.cpu += cpu - nested_cpu
        rec.wall += wall - nested_wall
        if self.stack:
            self.stack[-1][3] += cpu
            self.stack[-1][4] += wall

    def popen(self, proc: subprocess.Popen, argv) -> None:
        if not self.stack:
            return
        cpu0 = cpu_seconds()
        try:
            kinds = classify(argv)
        except Exception:  # noqa: BLE001 - never break a test's subprocess over the bookkeeping
            kinds = set()
        self.stack[-1][3] += cpu_seconds() - cpu0  # the bookkeeping (Snakemake's parser) is not the test's
        if kinds:
            self.stack[-1][0].started.append((kinds, proc))

    def fixture_records(self, item) -> list[tuple[str, Record]]:
        """The records of the shared fixtures this test uses (the most specific definition of each name, the
        test's parameter of a parametrized one)."""
        out = []
        params = getattr(getattr(item, "callspec", None), "params", {})
        for name in item.fixturenames:
            best = None
            for (base, argname, param), rec in self.fixtures.items():
                if (argname == name and param == repr(params.get(name)) and item.nodeid.startswith(base)
                        and (best is None or len(base) > len(best[0]))):
                    best = (base, rec)
            if best:
                out.append((name, best[1]))
        return out


METER = Meter()
_POPEN_INIT = subprocess.Popen.__init__


def _recording_init(self, args, *a, **kw):
    _POPEN_INIT(self, args, *a, **kw)
    METER.popen(self, args)


def problems(item, own: Record, fixtures: list[tuple[str, Record]], budget: float) -> list[str]:
    marks = {m.name for m in item.iter_markers()}
    kinds = set(own.kinds).union(*(r.kinds for _, r in fixtures))
    where = [f"fixture {n}" for n, r in fixtures if r.kinds] + (["the test"] if own.kinds else [])
    found = []
    if "engine" in kinds and not marks & set(ENGINE_MARKS):
        found.append(f"starts a vLLM engine ({', '.join(where)}) but is not marked: add @pytest.mark.engine")
    if "workflow" in kinds and not marks & set(WORKFLOW_MARKS):
        found.append(f"runs the whole Snakemake workflow ({', '.join(where)}) but is not marked: add @pytest.mark.e2e")
    cpu = own.cpu + sum(r.cpu for _, r in fixtures)
    if "slow" not in marks and cpu > budget:
        parts = ", ".join(f"fixture {n} {r.cpu:.1f} s" for n, r in fixtures if r.cpu >= 0.1)
        found.append(f"used {cpu:.1f} CPU-seconds ({parts + ', ' if parts else ''}the test {own.cpu:.1f} s), more "
                     f"than a test of the fast loop may (fast_cpu_budget = {budget:g}): mark it @pytest.mark.slow, "
                     "or make it cheaper")
    return found


# --- hooks --------------------------------------------------------------------


def pytest_addoption(parser):
    parser.addini("fast_cpu_budget", "CPU-seconds a test outside the slow set may use, fixtures included", default="60")
    parser.addoption("--cost-report", metavar="FILE", help="write every test's wall and CPU seconds (JSON lines)")


def pytest_configure(config):
    subprocess.Popen.__init__ = _recording_init


def pytest_unconfigure(config):
    subprocess.Popen.__init__ = _POPEN_INIT


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(m) for m in IMPLY_SLOW) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.scope == "function":  # set up for each test: its cost is the test's own
        return (yield)
    key = (fixturedef.baseid, fixturedef.argname, repr(getattr(request, "param", None)))
    METER.start(METER.fixtures.setdefault(key, Record()))
    try:
        return (yield)
    finally:
        METER.stop()


def _own(item) -> Record:
    return METER.tests.setdefault(item.nodeid, Record())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    METER.start(_own(item))
    try:
        return (yield)
    finally:
        METER.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    METER.start(_own(item))
    try:
        result = yield
    finally:
        METER.stop()
    found = problems(item, _own(item), METER.fixture_records(item), float(item.config.getini("fast_cpu_budget")))
    if found:
        pytest.fail("marker scheme: this test " + "; ".join(found), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    METER.start(_own(item))
    try:
        return (yield)
    finally:
        METER.stop()
        path = item.config.getoption("--cost-report")
        if path:
            own, fx = _own(item), METER.fixture_records(item)
            row = {"nodeid": item.nodeid, "marks": sorted({m.name for m in item.iter_markers()} - {"parametrize"}),
                   "wall": round(own.wall, 2), "cpu": round(own.cpu, 2),
                   "fixtures": {n: {"cpu": round(r.cpu, 2), "wall": round(r.wall, 2)} for n, r in fx},
                   "kinds": sorted(own.kinds.union(*(r.kinds for _, r in fx)))}
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
