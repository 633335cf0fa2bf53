"""The package's import graph (tools/import_graph.py, read by ast): the tool on a hand-made package, and a
check that the package has no import cycle and imports itself inside functions only in verbs' bodies (the layers
themselves are import-linter's contracts: tests/test_layers.py)."""

from __future__ import annotations

import ast
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import import_graph as ig  # noqa: E402

#: imports of the package inside a function outside a verb's body, and why (CONTRIBUTING.md, "Layers")
LOCAL_ALLOWED = {
    # the vLLM plugin loads in every vLLM process: its wrappers (and pandas) only when SPECREPRO_INSTRUMENT is set
    ("specrepro.vllm_plugin", "specrepro.engine.run.instrument"),
    # ... and its draft hook only when SPECREPRO_DRAFT is set
    ("specrepro.vllm_plugin", "specrepro.engine.run.drafts"),
}
#: functions that are a verb's body (``add_cli`` registers the verb, ``run`` runs it): what the verb drives is
#: imported there so that ``specrepro --help`` and the other verbs do not import it
VERB_BODIES = {"add_cli", "run", "_run"}


def test_the_tool_on_a_hand_made_package(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import numpy\nfrom . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n    import pandas\n")
    (pkg / "c.py").write_text("from .sub import d\n\ndef g():\n    from pkg import b\n")
    (pkg / "sub" / "d.py").write_text("from ..a import y\n")
    edges = ig.graph("pkg", tmp_path)
    got = {(e.importer, e.line, e.target, e.local, e.function) for e in ig.internal(edges, "pkg")}
    assert got == {("pkg.a", 2, "pkg.b", False, ""), ("pkg.b", 2, "pkg.a", True, "f"),
                   ("pkg.c", 1, "pkg.sub.d", False, ""), ("pkg.c", 4, "pkg.b", True, "g"),
                   ("pkg.sub.d", 1, "pkg.a", False, "")}
    assert ig.cycles(ig.internal(edges, "pkg")) == [["pkg.a", "pkg.b"]]
    assert ig.cycles([e for e in ig.internal(edges, "pkg") if not e.local]) == []  # Python never meets it
    local = {(e.importer, e.target): ig.why_local(edges, e) for e in ig.internal(edges, "pkg") if e.local}
    assert local == {("pkg.b", "pkg.a"): "dodges an import-time cycle",
                     ("pkg.c", "pkg.b"): "no cycle, no heavy package (could be module-level)"}
    assert ig.heavy_at_top(edges) == {"pkg.a": ["numpy"]}


def test_no_import_cycle():
    comps = ig.cycles(ig.internal(ig.graph()))
    assert not comps, (f"import cycles: {comps}; move the helper one side needs down to the layer that owns it "
                       "(python tools/import_graph.py lists the imports)")


def _enclosing(path, line: int) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.lineno <= line <= n.end_lineno}


def test_imports_inside_functions_only_in_verb_bodies_or_allowed():
    """Nothing imports the package inside a function to dodge a cycle: only a verb's body (start-up) and the
    allowed few; imports of vllm, torch, sglang, transformers or matplotlib inside functions are not internal."""
    mods = ig.modules()
    found = set()
    for e in ig.internal(ig.graph()):
        path = mods[e.importer]
        if not e.local or path.name in ("verbs.py", "cli.py") or _enclosing(path, e.line) & VERB_BODIES:
            continue
        found.add((e.importer, e.target))
        assert (e.importer, e.target) in LOCAL_ALLOWED, (
            f"{ig.where(e)}: {e.importer} imports {e.target} inside {e.function}: import it at module level "
            "(CONTRIBUTING.md, Layers), or move the helper to the layer that owns it")
    assert found == LOCAL_ALLOWED  # an allowance that is no longer needed goes too
