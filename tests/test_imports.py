"""The package's import graph (tools/import_graph.py, read by ast): the tool on a hand-made package, and a
check that the package has no import cycle and that nothing but ``__main__`` imports the CLI."""

from __future__ import annotations

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import import_graph as ig  # noqa: E402

#: the only module that imports the CLI (the engine modules that borrowed its helpers import them from their owners)
IMPORT_CLI = {"specrepro.__main__"}


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


def test_nothing_imports_the_cli():
    importers = {e.importer for e in ig.internal(ig.graph()) if e.target == "specrepro.cli"}
    assert importers <= IMPORT_CLI, f"{sorted(importers - IMPORT_CLI)} import specrepro.cli: move the " \
                                    "helper it needs down to the module that owns it (CONTRIBUTING.md, Layers)"
