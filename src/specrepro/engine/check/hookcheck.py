"""Checks, without a GPU, that every vLLM internal the instrumentation plugin hooks exists as expected.

For a vLLM source tree (a pinned sdist from :func:`specrepro.engine.check.sources.source_tree`, or an
installed vLLM) and the hook table of its version (:data:`specrepro.engine.run.instrument.FAMILIES`),
reading the source with :mod:`ast` (nothing is imported):

* every :class:`~specrepro.engine.run.instrument.Hook`: the class exists in the module, the method in the
  class (or a base class of the same module), and its positional parameters after ``self`` start
  with the ones the wrapper relies on, in that order (a required hook must exist; an optional one,
  when it exists, must fit);
* every :class:`~specrepro.engine.run.instrument.Read`: the attribute is a class-body field, a property,
  a method, or assigned as ``self.<attr>`` in one of the class's methods (a module-level name when
  the read has no class).

Each problem is one line naming the engine version, the internal and the hook family.
"""

from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from ...core.errors import SpecReproError
from ...jobspec.hooks import FAMILIES, Family, Hook, Read, draft_table_for, family_for
from .sources import source_tree

#: the engines the hook tables are checked against (pinned sdists)
PINNED_VLLM = ("0.10.1.1", "0.11.1", "0.34.0")


def module_file(root: Path, module: str) -> Path | None:
    base = Path(root).joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _parse(path: str) -> ast.Module:
    st = Path(path).stat()
    return _parse_cached(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=256)
def _parse_cached(path: str, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _mro(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    """The class and its bases defined in the same module (by name), depth first."""
    out, todo = [], [cls]
    while todo:
        c = todo.pop(0)
        if c in out:
            continue
        out.append(c)
        todo.extend(classes[b.id] for b in c.bases if isinstance(b, ast.Name) and b.id in classes)
    return out


def _method(cls: ast.ClassDef, classes, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for c in _mro(cls, classes):
        for n in c.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name:
                return n
    return None


def _has_attr(cls: ast.ClassDef, classes, name: str) -> bool:
    for c in _mro(cls, classes):
        for n in c.body:
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == name:
                return True
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
                return True
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if n.name == name:
                    return True
                for sub in ast.walk(n):
                    targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(
                        sub, (ast.AnnAssign, ast.AugAssign)) else []
                    for t in targets:
                        if (isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name)
                                and t.value.id == "self"):
                            return True
    return False


def _module_has(tree: ast.Module, name: str) -> bool:
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name:
            return True
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            return True
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == name:
            return True
    return False


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    return names[1:] if names and names[0] in ("self", "cls") else names


def check_hook(root: Path, version: str, hook: Hook, family: str) -> list[str]:
    where = f"vLLM {version}: {hook.module}.{hook.qualname} (hook family {family}, {hook.kind})"
    path = module_file(root, hook.module)
    required = hook.required(version)
    if path is None:
        return [f"{where}: module not found"] if required else []
    classes = _classes(_parse(str(path)))
    cls = classes.get(hook.cls)
    if cls is None:
        return [f"{where}: class {hook.cls} not found in {path.name}"] if required else []
    fn = _method(cls, classes, hook.attr)
    if fn is None:
        return [f"{where}: {hook.cls} has no method {hook.attr}"] if required else []
    got = _params(fn)
    if got[: len(hook.params)] != list(hook.params):
        return [f"{where}: parameters {got[: len(hook.params) + 2]}, the wrapper expects {list(hook.params)} first"]
    return []


def check_read(root: Path, version: str, read: Read, family: str) -> list[str]:
    name = f"{read.cls}.{read.attr}" if read.cls else read.attr
    where = f"vLLM {version}: {read.module}.{name} (read by hook family {family})"
    path = module_file(root, read.module)
    if path is None:
        return [f"{where}: module not found"]
    tree = _parse(str(path))
    if read.cls is None:
        return [] if _module_has(tree, read.attr) else [f"{where}: no module-level {read.attr}"]
    classes = _classes(tree)
    cls = classes.get(read.cls)
    if cls is None:
        return [f"{where}: class {read.cls} not found in {path.name}"]
    return [] if _has_attr(cls, classes, read.attr) else [f"{where}: {read.cls} has no attribute {read.attr}"]


def check_tree(root: str | Path, version: str, family: Family | None = None) -> list[str]:
    """Every problem of the hook table of ``version`` (or ``family``) against the source under ``root``
    (the directory holding the ``vllm`` package)."""
    root = Path(root)
    if not (root / "vllm").is_dir():
        raise SpecReproError(f"{root}: no vllm package here (expected {root / 'vllm'})")
    fam = family or family_for(version)
    out: list[str] = []
    for h in fam.hooks:
        out += check_hook(root, version, h, fam.name)
    for r in fam.reads:
        out += check_read(root, version, r, fam.name)
    if family is None:
        out += check_draft_table(root, version, fam.name) or []
    return out


def check_draft_table(root: str | Path, version: str, family: str = "") -> list[str] | None:
    """Every problem of the draft-substitution hook table of ``version`` (:data:`specrepro.jobspec.hooks.DRAFT_TABLES`)
    against the source under ``root``; None where the version has no table."""
    dt = draft_table_for(version)
    if dt is None:
        return None
    root, name = Path(root), f"{family or family_for(version).name} draft"
    out: list[str] = []
    for h in dt.hooks:
        out += check_hook(root, version, h, name)
    for r in dt.reads:
        out += check_read(root, version, r, name)
    return out


def check_pinned(versions: Iterable[str] = PINNED_VLLM) -> dict[str, list[str]]:
    """{version: problems} for the pinned sdists (downloaded once into the cache, SHA-256 checked)."""
    return {v: check_tree(source_tree("vllm", v), v) for v in versions}


def installed_tree() -> tuple[Path, str] | None:
    """(source root, version) of the vLLM importable here, or None."""
    try:
        import vllm
    except ImportError:
        return None
    return Path(vllm.__file__).resolve().parents[1], vllm.__version__


def add_cli(sub) -> None:
    p = sub.add_parser("check-hooks", help="check the vLLM internals the instrumentation plugin hooks against "
                                           "engine sources (pinned sdists, or a tree)")
    p.add_argument("--version", action="append", help=f"pinned vLLM version(s) (default: {', '.join(PINNED_VLLM)})")
    p.add_argument("--tree", help="check this source tree instead (the directory holding vllm/); needs --version")
    p.add_argument("--installed", action="store_true", help="also check the vLLM installed here")

    def run(a):
        results: dict[str, list[str]] = {}
        if a.tree:
            if not a.version or len(a.version) != 1:
                raise SpecReproError("--tree needs exactly one --version (the tree's vLLM version)")
            results[a.version[0]] = check_tree(a.tree, a.version[0])
        else:
            results.update(check_pinned(a.version or PINNED_VLLM))
        if a.installed:
            inst = installed_tree()
            if inst is None:
                raise SpecReproError("--installed: vLLM is not importable here")
            results[f"{inst[1]} (installed)"] = check_tree(inst[0], inst[1])
        bad = 0
        for v, problems in results.items():
            fam = family_for(v.split()[0]).name
            print(f"vLLM {v} ({fam}): {'ok' if not problems else f'{len(problems)} problem(s)'}")
            for line in problems:
                print(f"  {line}")
            bad += len(problems)
        if bad:
            raise SpecReproError(f"{bad} hook(s) do not fit their engine (listed above)")

    p.set_defaults(func=run)


__all__ = ["FAMILIES", "PINNED_VLLM", "check_draft_table", "check_pinned", "check_tree", "installed_tree"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: specrepro check-hooks")
