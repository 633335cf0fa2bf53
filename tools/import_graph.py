"""The package's import graph read from its source with ``ast``: every import (module level or inside a
function), the cycles, and the imports inside functions.

    python tools/import_graph.py                 # summary: cycles, function-local imports, heavy imports
    python tools/import_graph.py --edges         # every internal import: importer, line, imported, where

An import is "local" when it sits inside a function or method body (it runs when the function runs), "top"
otherwise (module body, also inside ``if``/``try`` at module level). ``from .x import name`` is an import of
``x.name`` when that is a module, else of ``x``. Cycles are the strongly connected components of the graph of
all internal imports (top and local): the cycles Python itself would meet at import time are those of the
top-level edges alone, so both are listed.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
#: third-party packages that cost start-up time (imported at module level, they load on ``specrepro --help``)
HEAVY = ("pandas", "numpy", "matplotlib", "scipy", "torch", "vllm", "sglang", "transformers", "pyarrow", "jinja2",
         "huggingface_hub", "jsonschema", "PIL", "gguf", "tokenizers", "safetensors", "yaml", "requests")


@dataclass(frozen=True)
class Import:
    importer: str      # dotted module name
    line: int
    target: str        # dotted module name (internal) or top-level package name (external)
    local: bool        # inside a function body
    function: str      # enclosing function ("" at module level)


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules(package: str = "specrepro", src: Path = SRC) -> dict[str, Path]:
    return {module_name(p, src): p for p in sorted((src / package).rglob("*.py"))}


def _resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute name of ``from <level dots><module> import ...`` inside ``importer``."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, function or getattr(child, "name", "<lambda>"))
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(name, child.lineno, _target(alias.name, known), bool(function), function))
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(name, is_package, child.level, child.module)
                for alias in child.names:
                    full = f"{base}.{alias.name}" if base else alias.name
                    target = full if full in known else _target(base, known)
                    found.append(Import(name, child.lineno, target, bool(function), function))
            visit(child, function)

    visit(tree, "")
    # one row per (line, target): "from .x import a, b" is one import of x
    return sorted(set(found), key=lambda i: (i.line, i.target))


def _target(dotted: str, known: set[str]) -> str:
    """The longest known module prefix of an internal name, else the external top-level package."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in known:
            return ".".join(parts[:n])
    return parts[0]


def graph(package: str = "specrepro", src: Path = SRC) -> list[Import]:
    mods = modules(package, src)
    known = set(mods)
    out: list[Import] = []
    for name, path in mods.items():
        out.extend(imports_of(name, path, known))
    return out


def internal(edges: list[Import], package: str = "specrepro") -> list[Import]:
    return [e for e in edges if e.target == package or e.target.startswith(package + ".")]


def cycles(edges: list[Import]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted, largest first."""
    succ: dict[str, set[str]] = {}
    for e in edges:
        if e.target != e.importer:
            succ.setdefault(e.importer, set()).add(e.target)
            succ.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(succ):
        if v not in index:
            strong(v)
    return sorted(comps, key=lambda c: (-len(c), c))


def cycle_edges(edges: list[Import], comp: list[str]) -> list[Import]:
    members = set(comp)
    return [e for e in edges if e.importer in members and e.target in members and e.importer != e.target]


def reaches(edges: list[Import], start: str, goal: str) -> bool:
    """``goal`` is imported (transitively) by importing ``start`` along these edges."""
    succ: dict[str, set[str]] = {}
    for e in edges:
        succ.setdefault(e.importer, set()).add(e.target)
    seen, todo = {start}, [start]
    while todo:
        for w in succ.get(todo.pop(), ()):
            if w == goal:
                return True
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return False


def heavy_closure(edges: list[Import], module: str) -> set[str]:
    """Heavy packages that importing ``module`` loads (its module-level imports, transitively, packages'
    ``__init__`` included)."""
    top = [e for e in edges if not e.local]
    succ: dict[str, set[str]] = {}
    for e in top:
        succ.setdefault(e.importer, set()).add(e.target)
    seen, todo, heavy = {module}, [module], set()
    while todo:
        m = todo.pop()
        parents = [".".join(m.split(".")[:n]) for n in range(1, m.count(".") + 1)]
        for w in [*succ.get(m, ()), *parents]:
            if w in HEAVY:
                heavy.add(w)
            elif w not in seen:
                seen.add(w)
                todo.append(w)
    return heavy


def why_local(edges: list[Import], e: Import) -> str:
    """Why an import sits inside a function: it closes a cycle of module-level imports, it closes a cycle of the
    design (through other function-local imports), or it keeps heavy packages off the importer's start-up."""
    top = [x for x in edges if not x.local]
    inner = internal(edges)
    if e.target not in {x.importer for x in edges} and not e.target.startswith("specrepro"):
        return "external"
    if reaches(top, e.target, e.importer):
        return "dodges an import-time cycle"
    if reaches(inner, e.target, e.importer):
        return "closes a design cycle (through other local imports)"
    extra = heavy_closure(edges, e.target) - heavy_closure(edges, e.importer)
    if extra:
        return "keeps " + ", ".join(sorted(extra)) + " off start-up"
    return "no cycle, no heavy package (could be module-level)"


def heavy_at_top(edges: list[Import]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in edges:
        if not e.local and e.target in HEAVY:
            out.setdefault(e.importer, [])
            if e.target not in out[e.importer]:
                out[e.importer].append(e.target)
    return out


def where(e: Import, src: Path = SRC) -> str:
    path = modules("specrepro", src).get(e.importer)
    rel = path.relative_to(src.parent) if path else e.importer
    return f"{rel}:{e.line}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", action="store_true", help="print every internal import")
    ap.add_argument("--local", action="store_true", help="every internal import inside a function, and why")
    ap.add_argument("--package", default="specrepro")
    a = ap.parse_args(argv)
    edges = graph(a.package)
    inner = internal(edges, a.package)
    if a.edges:
        for e in inner:
            print(f"{where(e)}\t{e.importer}\t->\t{e.target}\t{'local in ' + e.function if e.local else 'top'}")
        return 0
    if a.local:
        for e in (x for x in inner if x.local):
            print(f"{where(e)}\t{e.importer} -> {e.target}\tin {e.function}\t{why_local(edges, e)}")
        return 0
    for label, sel in (("all imports", inner), ("module-level imports only", [e for e in inner if not e.local])):
        comps = cycles(sel)
        print(f"== cycles over {label}: {len(comps)}")
        for comp in comps:
            print(f"  {len(comp)} modules: {', '.join(comp)}")
            for e in cycle_edges(sel, comp):
                print(f"    {where(e)}  {e.importer} -> {e.target}" + (f"  (in {e.function})" if e.local else ""))
    local = [e for e in inner if e.local]
    print(f"== internal imports inside functions: {len(local)} in {len({e.importer for e in local})} modules")
    heavy = heavy_at_top(edges)
    print(f"== modules importing heavy packages at module level: {len(heavy)}")
    for mod, pkgs in sorted(heavy.items()):
        print(f"  {mod}: {', '.join(pkgs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
