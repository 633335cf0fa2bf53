"""Check every engine job's arguments against the source of the vLLM it runs on, without a GPU.

The pinned engines cannot run here, but their source distributions (:mod:`specrepro.engine.check.sources`)
hold the code that parses every argument. This module reads them with :mod:`ast` only (nothing is
imported or executed) and checks, for each job ``specrepro engine-args`` prints (its ``llm_kwargs`` and
``sampling_params`` are exactly what the job passes):

* each ``llm_kwargs`` key is a field of that version's ``EngineArgs`` (or a parameter of ``LLM.__init__``);
* each ``speculative_config`` key is a field of its ``SpeculativeConfig``, the method is one of its
  ``SpeculativeMethod`` literal (after the renames its ``__post_init__`` applies, e.g. deepseek_mtp ->
  mtp in 0.11), no code path raises ``NotImplementedError`` for it, a method without ``model`` is
  one that version fills the model in for, and an optional package the method needs (``SpeculativeConfig``
  raises ``ImportError`` without it, e.g. arctic-inference for suffix decoding in 0.11) is in the lock of
  the job's image (``containers/vllm-<image>.lock``);
* each ``SamplingParams`` keyword is one of its fields;
* a job with drafts on a vLLM whose full decode CUDA graphs need a capture size that is a multiple of both k + 1
  and the TP size (0.11.1) has one, or runs without full decode graphs
  (:func:`specrepro.jobspec.images.cudagraph_shape_problem`);
* a suffix-decoding job turns the cross-request corpus off (:func:`suffix_corpus_problem`: the value the
  source gates the corpus on);
* a draft job (the oracle, controlled profiles, the hybrid: ``experiments[].drafts``) runs on a vLLM where the plugin
  substitutes drafts (:data:`specrepro.jobspec.hooks.DRAFT_TABLES`, ``runtime``), every hook and read of that table
  fits the source (:func:`specrepro.engine.check.hookcheck.check_draft_table`) and it schedules synchronously;
* the counters :mod:`specrepro.jobspec.counters` reads exist (names and the per-position label ``position``)
  and ``LLM.get_metrics`` exists.

A problem is one line naming the job, the key and the version. The SGLang jobs of Fig. 2 (``engine:
sglang``) and every job's ``VLLM_ATTENTION_BACKEND`` are checked by
:func:`specrepro.engine.check.sourcecheck_sglang.record_problems` against SGLang's (vLLM's) own source.
:class:`Source` is the reusable part:
other checks (hooks of a plugin, SGLang's server arguments) use its ``class_fields``, ``function_params``,
``literal_values``, ``string_constants`` and ``find_class``.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from ...core.errors import SpecReproError
from ...jobspec.images import DEFAULT_CUDAGRAPH_MODE, cudagraph_shape_problem, image_packages, requirement_name
from ...jobspec.counters import COUNTERS, PER_POS
from ...jobspec.hooks import DRAFT_HOOKS, draft_table_for
from .hookcheck import check_draft_table
from .sourcecheck_sglang import record_problems
from .sources import PINNED, source_tree

#: methods that never need a ``model`` (the proposer is not a network)
MODEL_FREE = ("ngram", "[ngram]", "suffix", "ngram_gpu")


class Source:
    """The unpacked source of one package version, parsed lazily with :mod:`ast`."""

    def __init__(self, root: str | Path, label: str = ""):
        self.root = Path(root)
        self.label = label or self.root.name
        self._trees: dict[str, ast.Module] = {}

    def tree(self, rel: str) -> ast.Module:
        if rel not in self._trees:
            path = self.root / rel
            if not path.is_file():
                raise SpecReproError(f"{self.label}: no file {rel}")
            self._trees[rel] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        return self._trees[rel]

    def find_class(self, name: str, under: str = "", hint: Iterable[str] = ()) -> tuple[str, ast.ClassDef]:
        """(file, class) of the top-level ``class name`` (``hint``: files tried first; else a search of ``under``)."""
        needle = f"class {name}"
        candidates = [h for h in hint if (self.root / h).is_file()]
        candidates += sorted(str(p.relative_to(self.root)) for p in (self.root / under).rglob("*.py")
                             if needle in p.read_text(encoding="utf-8", errors="replace"))
        for rel in dict.fromkeys(candidates):
            for node in self.tree(rel).body:
                if isinstance(node, ast.ClassDef) and node.name == name:
                    return rel, node
        raise SpecReproError(f"{self.label}: no class {name} under {under or '.'}")

    @staticmethod
    def class_fields(cls: ast.ClassDef) -> set[str]:
        """Annotated class attributes: the fields of a dataclass, msgspec.Struct or pydantic model."""
        return {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}

    @staticmethod
    def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
        return next((f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name),
                    None)

    @staticmethod
    def function_params(fn: ast.FunctionDef) -> tuple[list[str], bool]:
        """(parameter names, whether it takes ``**kwargs``)."""
        a = fn.args
        return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs], a.kwarg is not None

    def literal_values(self, rel: str, name: str) -> set[str]:
        """The strings of ``name = Literal[...]`` in module ``rel``, nested Literal names resolved."""
        assigns = {}
        for node in self.tree(rel).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigns[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                assigns[node.target.id] = node.value

        def values(n: str, seen: frozenset) -> set[str]:
            if n in seen or n not in assigns:
                return set()
            v = assigns[n]
            if not (isinstance(v, ast.Subscript) and getattr(v.value, "id", getattr(v.value, "attr", "")) == "Literal"):
                return set()
            elts = v.slice.elts if isinstance(v.slice, ast.Tuple) else [v.slice]
            out: set[str] = set()
            for e in elts:
                if isinstance(e, ast.Constant) and isinstance(e.value, str):
                    out.add(e.value)
                elif isinstance(e, ast.Name):
                    out |= values(e.id, seen | {n})
            return out

        if name not in assigns:
            raise SpecReproError(f"{self.label}: no {name} in {rel}")
        return values(name, frozenset())

    def string_constants(self, rel: str) -> set[str]:
        return {n.value for n in ast.walk(self.tree(rel)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


# --- vLLM ---------------------------------------------------------------------------------------


def _consts(node: ast.AST) -> set[str]:
    """String constants in an expression (a comparison's right side, a tuple of names)."""
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _mentions(node: ast.AST, attr: str) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr == attr) or (isinstance(n, ast.Name) and n.id == attr)
               for n in ast.walk(node))


def _method_compare_consts(test: ast.AST) -> set[str]:
    """Constants a condition compares the method with (``method == "x"``, ``self.method in (...)``,
    ``cfg.get("method") == "x"``)."""
    out: set[str] = set()
    for n in ast.walk(test):
        if isinstance(n, ast.Compare) and any(isinstance(o, (ast.Eq, ast.In)) for o in n.ops):
            left = n.left
            is_method = _mentions(left, "method") or (
                isinstance(left, ast.Call) and any(isinstance(a, ast.Constant) and a.value == "method" for a in left.args))
            if is_method:
                for c in n.comparators:
                    out |= _consts(c)
    return out


def _model_type_consts(test: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(test):
        if isinstance(n, ast.Compare) and _mentions(n.left, "model_type"):
            for c in n.comparators:
                out |= _consts(c)
    return out


def _raises_not_implemented(stmts: list[ast.stmt]) -> bool:
    for s in stmts:
        if isinstance(s, ast.Raise) and s.exc is not None:
            exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
            if getattr(exc, "id", None) == "NotImplementedError":
                return True
    return False


def _assigned_method(stmts: list[ast.stmt]) -> set[str]:
    out = set()
    for s in stmts:
        if isinstance(s, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "method" for t in s.targets):
            out |= _consts(s.value)
    return out


def _blocks(tree: ast.AST) -> Iterable[tuple[ast.AST | None, list[ast.stmt]]]:
    """Every statement block with the condition guarding it (None for else-blocks and bodies)."""
    for n in ast.walk(tree):
        if isinstance(n, ast.If):
            yield n.test, n.body
            yield None, n.orelse
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.While, ast.With, ast.Try)):
            yield None, n.body


def _if_chain(node: ast.If) -> list[tuple[ast.AST | None, list[ast.stmt]]]:
    out = []
    while True:
        out.append((node.test, node.body))
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            continue
        if node.orelse:
            out.append((None, node.orelse))
        return out


def _import_error_requirement(node: ast.AST) -> str | None:
    """The ``pip install <requirement>`` an ``ImportError`` raised in ``node`` names, or None."""
    for n in ast.walk(node):
        if isinstance(n, ast.Raise) and n.exc is not None:
            exc = n.exc.func if isinstance(n.exc, ast.Call) else n.exc
            if getattr(exc, "id", None) == "ImportError":
                m = re.search(r"pip install [`'\"]?([A-Za-z0-9][A-Za-z0-9_.\-]*(?:==[A-Za-z0-9_.+\-]+)?)",
                              " ".join(_consts(n.exc)))
                if m:
                    return m.group(1)
    return None


def _method_packages(cls: ast.ClassDef) -> dict[str, str]:
    """{method: pip requirement} of methods whose ``SpeculativeConfig`` code raises ``ImportError`` without an
    optional package: ``if self.method == "suffix": self._validate_suffix_decoding()`` where that helper
    raises ``ImportError("... pip install arctic-inference==0.1.1")`` (vLLM 0.11)."""
    helpers = {f.name: req for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
               for req in [_import_error_requirement(f)] if req}
    out: dict[str, str] = {}
    for test, body in _blocks(cls):
        methods = _method_compare_consts(test) if test is not None else set()
        if not methods:
            continue
        block = ast.Module(body=body, type_ignores=[])
        req = _import_error_requirement(block) or next(
            (helpers[n.func.attr] for n in ast.walk(block) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr in helpers), None)
        if req:
            for m in methods:
                out.setdefault(m, req)
    return out


def _registry_modelless(src: Source) -> set[str]:
    """Newer vLLM (0.2x on): one SpeculatorConfig class per method (``_CONFIG_BY_METHOD``) whose
    ``default_model`` gives the model when none is given; a method needs one when it raises there."""
    hits = [p for p in (src.root / "vllm").rglob("*.py")
            if "_CONFIG_BY_METHOD" in p.read_text(encoding="utf-8", errors="replace")]
    table: dict[str, str] = {}
    for p in hits:
        for node in src.tree(str(p.relative_to(src.root))).body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            if getattr(target, "id", None) == "_CONFIG_BY_METHOD" and isinstance(node.value, ast.Dict):
                for k, v in zip(node.value.keys, node.value.values):
                    names = [c for c in _consts(v)]
                    if isinstance(k, ast.Constant) and names:
                        # _builtin("mtp.config", "MTPSpeculatorConfig") or "pkg.module.Class"
                        last = [n for n in names if n[:1].isupper()] or [names[-1].rsplit(".", 1)[-1]]
                        table[k.value] = last[-1]
    out = set()
    for method, cls_name in table.items():
        if not _needs_model(src, cls_name, set()):
            out.add(method)
    return out


def _needs_model(src: Source, cls_name: str, seen: set[str]) -> bool:
    if cls_name in seen:
        return False
    seen.add(cls_name)
    try:
        _, cls = src.find_class(cls_name, "vllm/v1")
    except SpecReproError:
        return False
    fn = Source.method(cls, "default_model")
    if fn is not None:
        return any(isinstance(s, ast.Raise) for s in fn.body)
    return any(_needs_model(src, getattr(b, "id", getattr(b, "attr", "")), seen) for b in cls.bases)


REGISTRY_FILE = "vllm/model_executor/models/registry.py"
EAGLE_CONFIG_FILE = "vllm/transformers_utils/configs/eagle.py"


def _top_level_assigns(tree: ast.Module) -> dict[str, ast.expr]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def registry_architectures(src: Source) -> set[str]:
    """The architectures of ``_VLLM_MODELS`` (the dicts it unpacks, followed; a commented-out entry is absent)."""
    assigns = _top_level_assigns(src.tree(REGISTRY_FILE))

    def keys(name: str, seen: frozenset) -> set[str]:
        d = assigns.get(name)
        if name in seen or not isinstance(d, ast.Dict):
            return set()
        out: set[str] = set()
        for k, v in zip(d.keys, d.values):
            if k is None and isinstance(v, ast.Name):  # **_TEXT_GENERATION_MODELS
                out |= keys(v.id, seen | {name})
            elif isinstance(k, ast.Constant) and isinstance(k.value, str):
                out.add(k.value)
        return out

    if "_VLLM_MODELS" not in assigns:
        raise SpecReproError(f"{src.label}: no _VLLM_MODELS in {REGISTRY_FILE}")
    return keys("_VLLM_MODELS", frozenset())


def drafter_renames(src: Source) -> dict[str, ast.ListComp]:
    """{method: comprehension} of ``EAGLEConfig.__init__``: ``kwargs["architectures"] = [<rename of arch> for arch in
    self.model.architectures]`` under ``if method == "eagle"`` / ``elif method == "eagle3"`` (the name vLLM then
    loads; e.g. LlamaForCausalLM -> Eagle3LlamaForCausalLM, LlamaForCausalLMEagle3 unchanged)."""
    if not (src.root / EAGLE_CONFIG_FILE).is_file():
        return {}
    out: dict[str, ast.ListComp] = {}
    for node in ast.walk(src.tree(EAGLE_CONFIG_FILE)):
        if not isinstance(node, ast.If):
            continue
        for test, body in _if_chain(node):
            methods = _method_compare_consts(test) if test is not None else set()
            for stmt in body:
                if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.ListComp)
                        and any(isinstance(t, ast.Subscript) and "architectures" in _consts(t.slice) for t in stmt.targets)):
                    for m in methods:
                        out.setdefault(m, stmt.value)
    return out


def loaded_architecture(facts: "VllmFacts", method: str, declared: str) -> str:
    """The architecture vLLM looks up for a drafter of ``method`` that declares ``declared``: its EAGLEConfig
    rename (evaluated from the source: string operations on one name, nothing else in scope) or ``declared``."""
    comp = facts.drafter_renames.get(facts.renames.get(method, method))
    if comp is None:
        return declared
    gen = comp.generators[0]
    if not isinstance(gen.target, ast.Name):
        return declared
    scope = {gen.target.id: declared}
    if not all(eval(compile(ast.fix_missing_locations(ast.Expression(cond)), EAGLE_CONFIG_FILE, "eval"),
                    {"__builtins__": {}}, scope) for cond in gen.ifs):
        return declared
    expr = ast.fix_missing_locations(ast.Expression(comp.elt))
    return str(eval(compile(expr, EAGLE_CONFIG_FILE, "eval"), {"__builtins__": {}}, scope))


def async_scheduling_default(src: Source, engine_args: ast.ClassDef) -> bool | None:
    """Async scheduling when a job passes no ``async_scheduling``: the default of ``EngineArgs.async_scheduling``
    (through ``SchedulerConfig.async_scheduling``); ``None`` there is resolved by ``VllmConfig``: on when its
    ``if ...async_scheduling is None:`` block sets it True. None: the field does not exist."""
    def default_of(cls: ast.ClassDef):
        for s in cls.body:
            if isinstance(s, ast.AnnAssign) and getattr(s.target, "id", "") == "async_scheduling":
                return s.value
        return None

    v = default_of(engine_args)
    if v is None:
        return None
    if isinstance(v, ast.Attribute) and getattr(v.value, "id", "") == "SchedulerConfig":
        _, sched = src.find_class("SchedulerConfig", "vllm/config", hint=["vllm/config/scheduler.py",
                                                                         "vllm/config/__init__.py"])
        v = default_of(sched)
    if isinstance(v, ast.Call):  # Field(default=...)
        v = next((kw.value for kw in v.keywords if kw.arg == "default"), None)
    if not isinstance(v, ast.Constant):
        raise SpecReproError(f"{src.label}: cannot read the default of async_scheduling")
    if v.value is not None:
        return bool(v.value)
    for rel in ("vllm/config/vllm.py", "vllm/config/__init__.py"):
        if not (src.root / rel).is_file():
            continue
        for n in ast.walk(src.tree(rel)):
            if isinstance(n, ast.If) and _mentions(n.test, "async_scheduling") and any(
                    isinstance(c, ast.Compare) and any(isinstance(o, ast.Is) for o in c.ops) for c in ast.walk(n.test)):
                for a in ast.walk(ast.Module(body=n.body, type_ignores=[])):
                    if (isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant) and a.value.value is True
                            and any(getattr(t, "attr", "") == "async_scheduling" for t in a.targets)):
                        return True
    return False


def env_variables(src: Source) -> set[str]:
    """The keys of ``environment_variables`` in vllm/envs.py: the variables this vLLM reads."""
    v = _top_level_assigns(src.tree("vllm/envs.py")).get("environment_variables")
    if not isinstance(v, ast.Dict):
        raise SpecReproError(f"{src.label}: no environment_variables dict in vllm/envs.py")
    return {k.value for k in v.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _extends_draft_positions(sc: ast.ClassDef) -> bool:
    """SpeculativeConfig assigns a draft config's ``max_position_embeddings`` (vLLM 0.34's
    ``_maybe_override_draft_max_position_embeddings``: raised to the target's max_model_len)."""
    return any(isinstance(n, ast.Assign) and any(getattr(t, "attr", "") == "max_position_embeddings" for t in n.targets)
               for n in ast.walk(sc))


CUDAGRAPH_ADJUST = "adjust_cudagraph_sizes_for_spec_decode"


def cudagraph_facts(src: Source) -> tuple[bool, str | None]:
    """(whether ``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode`` exists, raises, and is called from the
    V1 GPU worker; the ``CUDAGraphMode`` member VllmConfig assigns first where ``cudagraph_mode is None``)."""
    try:
        _, cc = src.find_class("CompilationConfig", "vllm/config", hint=["vllm/config/compilation.py"])
    except SpecReproError:
        return False, None
    fn = Source.method(cc, CUDAGRAPH_ADJUST)
    raises = fn is not None and any(isinstance(n, ast.Raise) for n in ast.walk(fn))
    called = raises and any(f".{CUDAGRAPH_ADJUST}(" in p.read_text(encoding="utf-8", errors="replace")
                            for p in sorted((src.root / "vllm" / "v1" / "worker").rglob("*.py")))
    default = None
    rel = "vllm/config/vllm.py"
    if (src.root / rel).is_file():
        for n in ast.walk(src.tree(rel)):
            if not (isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and getattr(n.test.left, "attr", "")
                    == "cudagraph_mode" and isinstance(n.test.ops[0], ast.Is)):
                continue
            default = next((a.value.attr for a in ast.walk(ast.Module(body=n.body, type_ignores=[]))
                            if isinstance(a, ast.Assign) and isinstance(a.value, ast.Attribute)
                            and getattr(a.value.value, "id", "") == "CUDAGraphMode"), None)
            if default:
                break
    return bool(called), default


@dataclass
class VllmFacts:
    """What one vLLM version's source says about the arguments the project passes."""

    version: str
    engine_args: set[str]
    llm_params: set[str]
    spec_fields: set[str]
    methods: set[str]
    renames: dict[str, str]
    not_implemented: set[str]
    modelless_methods: set[str]  #: methods whose model __post_init__ fills in when none is given
    modelless_types: set[str]  #: target model types it fills the model in for (any method)
    method_packages: dict[str, str]  #: {method: pip requirement} of optional packages a method needs
    sampling_fields: set[str]
    metric_strings: set[str]
    has_get_metrics: bool
    files: dict = field(default_factory=dict)
    #: every architecture of its model registry (``_VLLM_MODELS`` of model_executor/models/registry.py)
    architectures: set[str] = field(default_factory=set)
    #: {method: the list comprehension that renames a drafter's declared architectures} (EAGLEConfig)
    drafter_renames: dict = field(default_factory=dict)
    #: async scheduling when a job does not set it: True (on, or "auto" resolved to on), False
    async_default: bool | None = None
    #: the environment variables it reads (keys of ``environment_variables`` in vllm/envs.py)
    env_vars: set[str] = field(default_factory=set)
    #: whether SpeculativeConfig raises a draft's max_position_embeddings to the target's context itself
    extends_draft_positions: bool = False
    #: whether its GPU model runner needs full decode CUDA-graph sizes that are multiples of k + 1 and TP (and raises)
    spec_cudagraph_shapes: bool = False
    #: the CUDA-graph mode VllmConfig sets when a job sets none (under VLLM_COMPILE), None where not read
    default_cudagraph_mode: str | None = None
    #: problems of its draft-substitution hook table against this source; None: the version has no table
    draft_hook_problems: list | None = None


def vllm_facts(src: Source, version: str = "") -> VllmFacts:
    """Read the facts of one vLLM source tree (see the module docstring)."""
    ea_file, ea = src.find_class("EngineArgs", "vllm/engine", hint=["vllm/engine/arg_utils.py"])
    llm_file, llm = src.find_class("LLM", "vllm/entrypoints", hint=["vllm/entrypoints/llm.py"])
    init = Source.method(llm, "__init__")
    llm_params = set(Source.function_params(init)[0]) - {"self"} if init else set()
    sc_file, sc = src.find_class("SpeculativeConfig", "vllm/config",
                                 hint=["vllm/config/speculative.py", "vllm/config/__init__.py"])
    methods = src.literal_values(sc_file, "SpeculativeMethod")
    post = Source.method(sc, "__post_init__")
    renames: dict[str, str] = {}
    modelless_methods: set[str] = set()
    modelless_types: set[str] = set()
    if post is not None:
        for n in ast.walk(post):
            if not isinstance(n, ast.If):
                continue
            # if self.method in get_args(MTPModelTypes) and self.method != "mtp": self.method = "mtp"
            to = _assigned_method(n.body)
            lits = [c.args[0].id for c in ast.walk(n.test) if isinstance(c, ast.Call)
                    and getattr(c.func, "id", "") == "get_args" and c.args and isinstance(c.args[0], ast.Name)]
            if len(to) == 1 and lits:
                target = next(iter(to))
                for lit in lits:
                    for m in src.literal_values(sc_file, lit):
                        if m != target:
                            renames[m] = target
            # if self.model is None and self.num_speculative_tokens is not None: <who gets a model>
            if _mentions(n.test, "model") and any(isinstance(c, ast.Compare) and any(isinstance(o, ast.Is) for o in c.ops)
                                                  and getattr(c.left, "attr", "") == "model" for c in ast.walk(n.test)):
                for stmt in n.body:
                    if isinstance(stmt, ast.If):
                        for test, body in _if_chain(stmt):
                            if test is None or not any(isinstance(s, ast.Assign) and any(
                                    isinstance(t, ast.Attribute) and t.attr == "model" for t in s.targets) for s in ast.walk(
                                    ast.Module(body=body, type_ignores=[]))):
                                continue
                            modelless_methods |= _method_compare_consts(test)
                            modelless_types |= _model_type_consts(test)
    modelless_methods |= _registry_modelless(src)
    not_impl: set[str] = set()
    for rel in dict.fromkeys([ea_file, sc_file]):
        for test, body in _blocks(src.tree(rel)):
            if not _raises_not_implemented(body):
                continue
            if test is not None:
                not_impl |= _method_compare_consts(test) & (methods | set(renames))
            not_impl |= _assigned_method(body)
    sp_file, sp = src.find_class("SamplingParams", "vllm", hint=["vllm/sampling_params.py"])
    metrics = set()
    for rel in ("vllm/v1/spec_decode/metrics.py", "vllm/v1/metrics/reader.py"):
        if (src.root / rel).is_file():
            metrics |= src.string_constants(rel)
    return VllmFacts(
        version=version or src.label, engine_args=Source.class_fields(ea), llm_params=llm_params,
        spec_fields=Source.class_fields(sc), methods=methods, renames=renames, not_implemented=not_impl,
        modelless_methods=modelless_methods, modelless_types=modelless_types, method_packages=_method_packages(sc),
        sampling_fields=Source.class_fields(sp), metric_strings=metrics,
        has_get_metrics=Source.method(llm, "get_metrics") is not None,
        files={"EngineArgs": ea_file, "LLM": llm_file, "SpeculativeConfig": sc_file, "SamplingParams": sp_file},
        architectures=registry_architectures(src), drafter_renames=drafter_renames(src),
        async_default=async_scheduling_default(src, ea), env_vars=env_variables(src),
        extends_draft_positions=_extends_draft_positions(sc),
        **dict(zip(("spec_cudagraph_shapes", "default_cudagraph_mode"), cudagraph_facts(src))),
        draft_hook_problems=check_draft_table(src.root, version) if version else None,
    )


@lru_cache(maxsize=None)
def pinned_vllm_facts(version: str) -> VllmFacts:
    """The facts of a pinned vLLM version (its sdist downloaded and checked on first use)."""
    return vllm_facts(Source(source_tree("vllm", version), f"vLLM {version}"), version)


def method_problem(facts: VllmFacts, method: str, has_model: bool, target_model_type: str | None = None,
                   packages: Iterable[str] | None = None, image: str | None = None) -> str | None:
    """Why this vLLM would refuse speculative method ``method`` (as passed), or None. ``packages``: the
    project names installed with it (image ``image``'s lock); None: optional packages are not checked."""
    v = facts.version
    if method not in facts.methods:
        return f"method {method!r} is not a SpeculativeMethod of vLLM {v} (it accepts {', '.join(sorted(facts.methods))})"
    m = facts.renames.get(method, method)
    if method in facts.not_implemented or m in facts.not_implemented:
        return f"vLLM {v} raises NotImplementedError for method {method!r}"
    req = facts.method_packages.get(method) or facts.method_packages.get(m)
    if req and packages is not None and requirement_name(req) not in {requirement_name(x) for x in packages}:
        where = f"image {image} (containers/vllm-{image}.lock)" if image else "this installation"
        return f"vLLM {v} needs {req} for method {method!r} (ImportError without it), which {where} does not install"
    if not has_model and m not in MODEL_FREE and m not in facts.modelless_methods:
        if facts.modelless_types and target_model_type in facts.modelless_types:
            return None
        types = f" and target model types {', '.join(sorted(facts.modelless_types))}" if facts.modelless_types else ""
        got = f" (this target: {target_model_type})" if target_model_type else " (this target's type is not known here)"
        return (f"vLLM {v} fills the speculative model in (no 'model' given) only for methods "
                f"{', '.join(sorted(facts.modelless_methods | set(MODEL_FREE) & facts.methods)) or 'none'}{types}"
                f"{got}: method {method!r} would fail at LLM()")
    return None


def check_job(rec: Mapping[str, Any], facts: VllmFacts, packages: Iterable[str] | None = None) -> list[str]:
    """Problems of one ``engine-args`` record against its vLLM's facts, one line each (``packages``: those of
    the record's image, for the optional packages a method needs)."""
    out = []
    job, v = rec["job"], facts.version

    def bad(msg: str) -> None:
        out.append(f"{job}: {msg} (vLLM {v})")

    kw = rec.get("llm_kwargs")
    if kw is None:
        return out
    for key in sorted(kw):
        if key not in facts.engine_args and key not in facts.llm_params:
            bad(f"llm_kwargs.{key} is not a field of EngineArgs ({facts.files['EngineArgs']}) "
                "nor a parameter of LLM.__init__")
    sc = kw.get("speculative_config")
    if sc:
        for key in sorted(sc):
            if key not in facts.spec_fields:
                bad(f"speculative_config.{key} is not a field of SpeculativeConfig ({facts.files['SpeculativeConfig']})")
        if "method" in sc:
            why = method_problem(facts, sc["method"], bool(sc.get("model")), rec.get("target_model_type"),
                                 packages, rec.get("image"))
            if why:
                bad(f"speculative_config.method: {why}")
    out += [f"{job}: {msg} (vLLM {v})" for msg in _model_problems(rec, facts, kw)]
    sampling = dict(rec.get("sampling_params") or {})
    sampling.update({f"<{k}>": v for k, v in (rec.get("other_sampling_params") or {}).items()})
    for use, params in sampling.items():
        for key in sorted(params):
            if key not in facts.sampling_fields:
                bad(f"sampling_params[{use}].{key} is not a field of SamplingParams ({facts.files['SamplingParams']})")
    return out


#: engine jobs that assume one batch in flight (positions from num_computed_tokens, step-by-step timing)
SYNC_RULES = {"engine_trace": "a k = 20 trace job", "engine_profile": "a profiled pass",
              "engine_draft_bench": "a draft job (the plugin replaces each step's drafts per request)"}


def draft_problems(rec: Mapping[str, Any], facts: VllmFacts) -> list[str]:
    """Why a draft job (``rec["draft"]``) would not run on this vLLM, one line each (no job prefix): the plugin
    substitutes drafts on it (a runtime hook table) and the table's hooks and reads fit its source."""
    if not rec.get("draft"):
        return []
    v, mode = facts.version, rec["draft"]["mode"]
    table = draft_table_for(v)
    supported = ", ".join(p + "x" for p in DRAFT_HOOKS)
    if table is None:
        return [f"{mode}: the plugin has no draft-substitution hook for this vLLM (specrepro.jobspec.hooks."
                f"DRAFT_TABLES; it substitutes drafts on {supported}): run the experiment on such an image"]
    if not table.runtime:
        return [f"{mode}: the plugin's draft hook for this vLLM is source-checked only and does not substitute drafts "
                f"(specrepro.jobspec.hooks.DRAFT_TABLES; it does on {supported}): run the experiment on such an image"]
    return [f"{mode}: draft hook: {p}" for p in facts.draft_hook_problems or []]


def _model_problems(rec: Mapping[str, Any], facts: VllmFacts, kw: Mapping[str, Any]) -> list[str]:
    """What the job's models, scheduling and environment need of this vLLM (one line each, no job prefix):

    * the target's and the drafter's architecture (the config's ``architecture``) are in its model registry, the
      drafter's also under the name its EAGLEConfig renames it to, and agree with their config.json where a
      manifest is there;
    * a trace or profile job on a vLLM that schedules asynchronously by default passes ``async_scheduling=False``;
    * every ``VLLM_*`` variable of the job's environment is one this vLLM reads (vllm/envs.py);
    * an EAGLE head with ``max_position_embeddings`` M runs with ``max_model_len <= M`` where this vLLM does not
      raise the head's positions itself.
    """
    out = []
    model, method = rec.get("model", "<model>"), rec.get("method")
    for who, key in (("target", f"models.{model}.architecture"),
                     ("drafter", f"models.{model}.drafters.{method}.architecture")):
        declared, found = rec.get(f"{who}_architecture"), rec.get(f"{who}_architecture_found")
        if declared and found and declared != found:
            out.append(f"{key} = {declared} but the downloaded config.json declares {found}: set it to {found}")
        arch = found or declared
        if not arch:
            continue
        name = f"{who} architecture {arch}" + (f" ({rec['drafter_source']})" if who == "drafter" and rec.get(
            "drafter_source") else "")
        if arch not in facts.architectures:
            out.append(f"{name} is not in its model registry ({REGISTRY_FILE}): the {who} does not load here; "
                       "run the experiment on an image whose vLLM registers it")
        elif who == "drafter" and method:
            loaded = loaded_architecture(facts, method, arch)
            if loaded not in facts.architectures:
                out.append(f"{name} loads as {loaded} ({EAGLE_CONFIG_FILE}), which is not in its model registry "
                           f"({REGISTRY_FILE}); run the experiment on an image whose vLLM registers it")
    kind = SYNC_RULES.get(rec.get("rule", ""))
    if kind and facts.async_default and kw.get("async_scheduling") is not False:
        out.append(f"{kind} assumes one batch in flight, but this vLLM schedules asynchronously by default "
                   "(EngineArgs.async_scheduling, resolved in VllmConfig): pass async_scheduling=False")
    for name in sorted(rec.get("env") or {}):
        # VLLM_ATTENTION_BACKEND: its value is checked against the backends (sourcecheck_sglang.record_problems)
        if (name.startswith("VLLM_") and name != "VLLM_ATTENTION_BACKEND" and facts.env_vars
                and name not in facts.env_vars):
            out.append(f"env {name} is not a variable this vLLM reads (vllm/envs.py): leave it out "
                       "(specrepro.jobspec.images.VLLM_ENV_READ)")
    sc = kw.get("speculative_config") or {}
    if facts.spec_cudagraph_shapes and sc.get("num_speculative_tokens"):
        why = cudagraph_shape_problem(sc["num_speculative_tokens"], kw.get("tensor_parallel_size", 1),
                                      (kw.get("compilation_config") or {}).get("cudagraph_mode"),
                                      bool(kw.get("enforce_eager")), facts.default_cudagraph_mode or DEFAULT_CUDAGRAPH_MODE)
        if why:
            out.append(f"{why} (CompilationConfig.{CUDAGRAPH_ADJUST})")
    m_pos = rec.get("drafter_max_position_embeddings") or rec.get("drafter_max_position_embeddings_found")
    found_pos = rec.get("drafter_max_position_embeddings_found")
    if rec.get("drafter_max_position_embeddings") and found_pos and found_pos != rec["drafter_max_position_embeddings"]:
        out.append(f"models.{model}.drafters.{method}.max_position_embeddings = {rec['drafter_max_position_embeddings']}"
                   f" but the downloaded config.json says {found_pos}: set it to {found_pos}")
    raised = rec.get("drafter_raise_max_position_embeddings")  # served with the target's context (served_drafter)
    if method in ("eagle", "eagle3") and m_pos and not facts.extends_draft_positions and not raised:
        mml = kw.get("max_model_len")
        if mml is None or int(mml) > int(m_pos):
            reach = mml or "the target's max_model_len"
            out.append(f"the {method} head ({rec.get('drafter_source') or 'drafter'}) has max_position_embeddings "
                       f"{m_pos} and the job's context may reach {reach}; this vLLM does not raise a draft's positions "
                       f"to the target's (SpeculativeConfig): set engine_settings.max_model_len of experiment "
                       f"{rec.get('experiment')} to {m_pos} or less, or raise_max_position_embeddings: true on the head")
    return out


def counter_problems(facts: VllmFacts) -> list[str]:
    """The counters the project reads (specrepro.jobspec.counters) and ``LLM.get_metrics``, in this vLLM."""
    out = []
    for name in [*COUNTERS, PER_POS, "position"]:
        if name not in facts.metric_strings:
            out.append(f"vLLM {facts.version}: {'label' if name == 'position' else 'counter'} {name!r} not found in "
                       "vllm/v1/spec_decode/metrics.py or vllm/v1/metrics/reader.py")
    if not facts.has_get_metrics:
        out.append(f"vLLM {facts.version}: LLM.get_metrics does not exist ({facts.files['LLM']})")
    return out


#: suffix decoding's setting of its cross-request corpus (vLLM 0.11.1 and 0.34.0 SpeculativeConfig)
SUFFIX_CORPUS_KEY = "suffix_decoding_max_cached_requests"


def suffix_corpus_facts(src: Source) -> tuple[Any, Any, str]:
    """(``SpeculativeConfig``'s default of :data:`SUFFIX_CORPUS_KEY`, the value that turns the cross-request
    corpus off, ``file:line`` where the source gates the corpus on it); None where the source does not say.
    The off value is read from a comparison ``<...>.suffix_decoding_max_cached_requests != c`` (or ``== c``)
    that decides the corpus, as vLLM 0.34.0's GPU suffix speculator does (``... if spec.<key> != 0 else 0``)."""
    _, sc = src.find_class("SpeculativeConfig", "vllm/config",
                           hint=["vllm/config/speculative.py", "vllm/config/__init__.py"])
    default = next((s.value.value for s in sc.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                    and s.target.id == SUFFIX_CORPUS_KEY and isinstance(s.value, ast.Constant)), None)
    for path in sorted((src.root / "vllm").rglob("*.py")):
        if SUFFIX_CORPUS_KEY not in path.read_text(encoding="utf-8", errors="replace"):
            continue
        rel = str(path.relative_to(src.root))
        for n in ast.walk(src.tree(rel)):
            if (isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.NotEq, ast.Eq))
                    and isinstance(n.left, ast.Attribute) and n.left.attr == SUFFIX_CORPUS_KEY
                    and isinstance(n.comparators[0], ast.Constant) and isinstance(n.comparators[0].value, int)):
                return default, n.comparators[0].value, f"{rel}:{n.lineno}"
    return default, None, ""


@lru_cache(maxsize=None)
def pinned_suffix_corpus_facts(version: str) -> tuple[Any, Any, str]:
    return suffix_corpus_facts(Source(source_tree("vllm", version), f"vLLM {version}"))


def suffix_corpus_problem(rec: Mapping[str, Any], facts_of=pinned_suffix_corpus_facts) -> str | None:
    """Why a suffix-decoding job would let requests accept other requests' outputs (its vLLM's cross-request
    corpus left on, or no value known to turn it off), or None (also for every other job)."""
    sc = (rec.get("llm_kwargs") or {}).get("speculative_config") or {}
    if sc.get("method") != "suffix":
        return None
    v = rec.get("vllm_version")
    default, off, where = facts_of(v)
    value = sc.get(SUFFIX_CORPUS_KEY, default)
    if off is None:
        return (f"{rec['job']}: vLLM {v}'s source shows no value of {SUFFIX_CORPUS_KEY} that turns suffix decoding's "
                "cross-request corpus off: repeated prompts would accept earlier requests' outputs")
    if value != off:
        return (f"{rec['job']}: speculative_config.{SUFFIX_CORPUS_KEY} = {value} (default {default}) keeps suffix "
                f"decoding's cross-request corpus: repeated prompts accept earlier requests' outputs; set {off} "
                f"({where}) (vLLM {v})")
    return None


def check_records(records: Iterable[Mapping[str, Any]], facts_of=pinned_vllm_facts) -> tuple[list[str], dict]:
    """(problems, {"vLLM <version>" | "SGLang <version>": jobs checked}) of engine-args records; jobs without a
    pinned engine are skipped."""
    problems: list[str] = []
    checked: dict[str, int] = {}
    versions_done = set()
    for rec in records:
        if rec.get("engine") == "sglang":
            v = rec.get("engine_version")
            if rec.get("sglang_kwargs") is None or ("sglang", v) not in PINNED:
                continue
            problems += record_problems(rec)
            checked[f"SGLang {v}"] = checked.get(f"SGLang {v}", 0) + 1
            continue
        v = rec.get("vllm_version")
        if rec.get("llm_kwargs") is None or not v or ("vllm", v) not in PINNED:
            continue
        facts = facts_of(v)
        if v not in versions_done:
            problems += counter_problems(facts)
            versions_done.add(v)
        problems += check_job(rec, facts, image_packages(rec["image"]) if rec.get("image") else None)
        problems += [f"{rec['job']}: {p} (vLLM {v})" for p in draft_problems(rec, facts)]
        problems += [p for p in [suffix_corpus_problem(rec)] if p]
        problems += record_problems(rec)
        checked[f"vLLM {v}"] = checked.get(f"vLLM {v}", 0) + 1
    return problems, checked


def add_cli(sub) -> None:
    p = sub.add_parser("source-check", help="check every engine job's vLLM (SGLang) arguments against the source of "
                                            "the engine it runs on (pinned sdists; no GPU)")
    p.add_argument("--run-config", help="results/run_config.json (its jobs, as engine-args prints them)")
    p.add_argument("--engine-args", help="or: a file of engine-args lines")
    p.add_argument("--workdir", default=".")

    def run(a):
        from ...core.io import read_json
        from ...jobspec.jobs import engine_args

        if a.engine_args:
            records = [json.loads(x) for x in Path(a.engine_args).read_text().splitlines() if x.strip()]
        elif a.run_config:
            records = list(engine_args(read_json(a.run_config), a.workdir))
        else:
            raise SpecReproError("give --run-config or --engine-args")
        problems, checked = check_records(records)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            raise SpecReproError(f"{len(problems)} problem(s) above")
        done = ", ".join(f"{n} on {v}" for v, n in sorted(checked.items())) or "none"
        print(f"source-check: ok ({len(records)} jobs; checked: {done})", file=sys.stderr)

    p.set_defaults(func=run)
