"""The tree study's engine arguments checked against the engines' own source, without a GPU.

SGLang jobs: every keyword the bench passes to ``sglang.Engine(**kw)`` must be a field of SGLang
0.5.9's ``ServerArgs`` dataclass (``srt/server_args.py``; ``Engine.__init__`` builds ``ServerArgs(**kw)``),
with a value its command line allows where ``add_cli_args`` restricts it (``choices=``: the algorithm
name, the attention backends, the dtype ...), since the dataclass itself does not check them. The
speculative arguments must also be ones SGLang keeps: it silently rewrites ``num_draft_tokens`` to
``steps + 1`` when ``topk`` is 1 and can verify at most ``topk + (steps - 1) topk^2`` nodes. Every
sampling parameter must be a parameter of ``SamplingParams.__init__``, the meta-info keys the bench reads
must be written by ``tokenizer_manager.py``, and the drafter classes must exist. Values are checked too
(:func:`sglang_value_problems`): SGLang's ``ServerArgs`` takes ``mem_fraction_static = 1.5`` or ``tp_size = 3``
without complaint, so the check holds them against their meaning and against the experiment (every batch
size within ``max_running_requests`` and the CUDA-graph cap, the GPUs the job leases).

vLLM tree jobs: every ``speculative_config`` key must be a field of the job's vLLM ``SpeculativeConfig``
(so ``speculative_token_tree`` exists only in 0.10.1.1 and 0.11.1) and ``VLLM_ATTENTION_BACKEND`` a
backend that version knows.

The jobs are ``specrepro engine-args``'s records (:mod:`specrepro.jobspec.jobs`): ``specrepro source-check``
(:mod:`specrepro.engine.check.sourcecheck`) hands the SGLang ones and the attention backend of the vLLM ones to
:func:`record_problems`; ``specrepro tree-args`` lists and checks the tree study's jobs alone.

Everything is read with :mod:`ast` from the pinned sdists (:func:`specrepro.engine.check.sources.source_tree`).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .sources import source_tree
from ...jobspec.trees import sglang_candidates, tree_study
from ...jobspec.jobs import engine_args

SGLANG = ("sglang", "0.5.9")
#: keys of SGLang's per-request meta info the bench reads (specrepro.engine.run.sglang.request_counters)
META_KEYS = ("spec_verify_ct", "spec_accept_token_num", "spec_draft_token_num", "spec_accept_histogram",
             "completion_tokens", "finish_reason")
#: ServerArgs fields the bench passes beyond the printed keywords (a callable: specrepro.engine.run.sglang.open_engine)
RUNTIME_FIELDS = ("custom_sigquit_handler",)


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef) and n.name == name:
            return n
    raise LookupError(name)


def _fields(cls: ast.ClassDef) -> list[str]:
    return [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


@dataclass(frozen=True)
class SGLangSource:
    """What SGLang's source says about its arguments."""

    version: str
    fields: frozenset  #: ServerArgs fields
    choices: Mapping[str, tuple]  #: field -> values its command-line option allows
    sampling: frozenset  #: SamplingParams.__init__ parameters
    generate: frozenset  #: Engine.generate parameters
    meta_keys: frozenset  #: string keys tokenizer_manager.py writes into meta info
    drafter_classes: frozenset  #: EntryClass names of srt/models/*eagle*.py


@functools.lru_cache(maxsize=None)
def sglang_source(version: str = SGLANG[1]) -> SGLangSource:
    root = source_tree("sglang", version) / "sglang" / "srt"
    sa = _parse(root / "server_args.py")
    fields = frozenset(_fields(_class(sa, "ServerArgs")))
    consts = {}
    for n in sa.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            try:
                consts[n.targets[0].id] = ast.literal_eval(n.value)
            except ValueError:
                pass
    choices: dict[str, tuple] = {}
    for call in ast.walk(sa):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        if "choices" not in kw:
            continue
        opts = [a.value for a in call.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
        dest = kw["dest"].value if isinstance(kw.get("dest"), ast.Constant) else (opts[0][2:].replace("-", "_") if opts else None)
        c = kw["choices"]
        try:
            vals = consts[c.id] if isinstance(c, ast.Name) else ast.literal_eval(c)
        except (KeyError, ValueError):
            continue  # computed at run time (e.g. from an enum): not checked
        if dest:
            choices[dest] = tuple(vals)
    sp = _class(_parse(root / "sampling" / "sampling_params.py"), "SamplingParams")
    init = next(f for f in sp.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    eng = _class(_parse(root / "entrypoints" / "engine.py"), "Engine")
    gen = next(f for f in eng.body if isinstance(f, ast.FunctionDef) and f.name == "generate")
    tm = (root / "managers" / "tokenizer_manager.py").read_text(encoding="utf-8")
    meta = frozenset(k for k in META_KEYS if f'"{k}"' in tm)
    classes = set()
    for p in (root / "models").glob("*eagle*.py"):
        for n in _parse(p).body:
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in n.targets):
                vals = n.value.elts if isinstance(n.value, (ast.List, ast.Tuple)) else [n.value]
                classes |= {v.id for v in vals if isinstance(v, ast.Name)}
    return SGLangSource(version, fields, choices, frozenset(a.arg for a in init.args.args[1:]),
                        frozenset(a.arg for a in gen.args.args[1:]), meta, frozenset(classes))


def sglang_problems(kwargs: Mapping[str, Any], sampling: Mapping[str, Any] | None = None, *,
                    drafter_class: str | None = None, version: str = SGLANG[1]) -> list[str]:
    """Why SGLang ``version`` would reject or silently change these arguments; empty when it takes them as given."""
    src = sglang_source(version)
    where = f"SGLang {version}"
    out = []
    for key, value in kwargs.items():
        if key not in src.fields:
            out.append(f"{key}: not a field of {where}'s ServerArgs (srt/server_args.py)")
        elif key in src.choices and value is not None and value not in src.choices[key]:
            allowed = ", ".join(str(v) for v in src.choices[key])
            out.append(f"{key} = {value!r}: not allowed by {where} (allowed: {allowed})")
    steps, topk = kwargs.get("speculative_num_steps"), kwargs.get("speculative_eagle_topk")
    ndt = kwargs.get("speculative_num_draft_tokens")
    if kwargs.get("speculative_algorithm") in ("EAGLE", "EAGLE3"):
        if None in (steps, topk, ndt):
            out.append("speculative_num_steps, _eagle_topk and _num_draft_tokens must all be given "
                       "(SGLang picks its own otherwise)")
        elif topk == 1 and ndt != steps + 1:
            out.append(f"speculative_num_draft_tokens = {ndt}: {where} resets it to steps + 1 = {steps + 1} when topk is 1")
        elif topk > 1 and ndt - 1 > sglang_candidates(steps, topk):
            out.append(f"speculative_num_draft_tokens = {ndt}: more than the {sglang_candidates(steps, topk)} + 1 "
                       f"nodes {where}'s drafter scores (eagle_utils.organize_draft_results)")
        if topk and topk > 1 and kwargs.get("attention_backend") == "trtllm_mha":
            out.append(f"attention_backend = 'trtllm_mha': {where} allows it only with topk = 1")
    for key in sampling or {}:
        if key not in src.sampling:
            out.append(f"sampling parameter {key}: not a parameter of {where}'s SamplingParams")
    for key in RUNTIME_FIELDS:
        if key not in src.fields:
            out.append(f"{key}: not a field of {where}'s ServerArgs (the bench passes it to Engine())")
    for key in ("input_ids", "sampling_params"):
        if key not in src.generate:
            out.append(f"Engine.generate has no parameter {key} in {where}")
    for key in META_KEYS:
        if key not in src.meta_keys:
            out.append(f"meta info key {key!r} is not written by {where}'s tokenizer_manager.py")
    if drafter_class and drafter_class not in src.drafter_classes:
        out.append(f"drafter class {drafter_class}: no such EntryClass in {where}'s srt/models/*eagle*.py")
    return out


# --- values: SGLang's own rules and the experiment's batch sizes -----------------------------------


#: SGLang 0.5.9's default cuda_graph_max_bs on the paper's GPU (H100, 80 GB: 60-90 GB of memory) by tp_size
#: (srt/server_args.py, _handle_gpu_memory_settings: 256 if tp_size < 4 else 512; smaller GPUs get less)
H100_CUDA_GRAPH_MAX_BS = {"tp<4": 256, "tp>=4": 512}
#: max_running_requests SGLang 0.5.9 sets under EAGLE/EAGLE-3 when none is given (server_args.py)
SD_DEFAULT_RUNNING = 48


@functools.lru_cache(maxsize=None)
def overlap_forced_off_line(version: str = SGLANG[1]) -> int | None:
    """Line of ``server_args.py`` where SGLang sets ``disable_overlap_schedule = True`` inside the branch of
    ``speculative_algorithm in ("EAGLE", "EAGLE3", ...)``; None when it has no such line."""
    sa = _parse(source_tree("sglang", version) / "sglang" / "srt" / "server_args.py")
    for n in ast.walk(sa):
        if not (isinstance(n, ast.If) and any(isinstance(c, ast.Attribute) and c.attr == "speculative_algorithm"
                                              for c in ast.walk(n.test))
                and any(isinstance(c, ast.Constant) and c.value == "EAGLE3" for c in ast.walk(n.test))):
            continue
        for a in ast.walk(ast.Module(body=n.body, type_ignores=[])):
            if (isinstance(a, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "disable_overlap_schedule"
                                                  for t in a.targets)
                    and isinstance(a.value, ast.Constant) and a.value.value is True):
                return a.lineno
    return None


def sglang_value_problems(kwargs: Mapping[str, Any], batch_sizes, gpus: int | None,
                          version: str = SGLANG[1]) -> list[str]:
    """Values SGLang ``version`` would take but that break the measurement: a ``mem_fraction_static`` outside
    (0, 1) (SGLang defines it as (model weights + KV cache pool) / GPU memory; its ServerArgs never checks
    it), a ``tp_size`` other than the job's GPUs (SGLang only asserts tp_size x pp_size divisible by nnodes),
    a batch larger than ``max_running_requests`` (the extra copies wait: the batch never runs at once) or
    than the CUDA-graph cap (those batches run without CUDA graphs), and an overlap scheduler asked for
    under EAGLE (SGLang turns it off)."""
    where = f"SGLang {version}"
    out = []
    top = max((int(b) for b in batch_sizes or ()), default=0)
    mf = kwargs.get("mem_fraction_static")
    if mf is not None and not 0 < float(mf) < 1:
        out.append(f"mem_fraction_static = {mf!r}: a share of GPU memory ((weights + KV cache) / capacity, "
                   f"{where}'s srt/server_args.py), must lie in (0, 1)")
    tp = kwargs.get("tp_size")
    if tp is not None and (int(tp) < 1 or (gpus and int(tp) != int(gpus))):
        out.append(f"tp_size = {tp!r}: the job runs on {gpus} GPU(s) (the model's tensor_parallel_size); "
                   f"{where} would use {tp}")
    sd = kwargs.get("speculative_algorithm") in ("EAGLE", "EAGLE3")
    running = kwargs.get("max_running_requests")
    cap = running if running is not None else (SD_DEFAULT_RUNNING if sd else None)
    if cap is not None and top > int(cap):
        why = "" if running is not None else f" ({where}'s default under speculative decoding)"
        out.append(f"max_running_requests = {cap}{why} is below the largest batch size {top}: the copies beyond it "
                   "wait, so that batch never runs at once")
    if not kwargs.get("disable_cuda_graph"):
        graph = kwargs.get("cuda_graph_max_bs")
        if graph is None:
            graph = H100_CUDA_GRAPH_MAX_BS["tp<4" if int(tp or 1) < 4 else "tp>=4"]
            why = f" ({where}'s default on an 80 GB H100 at tp_size {tp or 1}; smaller GPUs get less)"
        else:
            why = ""
        if top > int(graph):
            out.append(f"cuda_graph_max_bs = {graph}{why} is below the largest batch size {top}: larger batches run "
                       "without CUDA graphs")
    if sd and kwargs.get("disable_overlap_schedule") is False:
        line = overlap_forced_off_line(version)
        out.append(f"disable_overlap_schedule = False under {kwargs['speculative_algorithm']}: {where} turns the "
                   f"overlap scheduler off there (srt/server_args.py:{line}) unless SGLANG_ENABLE_SPEC_V2 (topk 1 only)")
    return out


# --- vLLM's tree path -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def vllm_speculative_fields(version: str) -> frozenset:
    """Fields of ``SpeculativeConfig`` in vLLM ``version`` (wherever under ``vllm/config`` it is defined)."""
    root = source_tree("vllm", version) / "vllm" / "config"
    for p in sorted(root.rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        if "class SpeculativeConfig" in text:
            return frozenset(_fields(_class(_parse(p), "SpeculativeConfig")))
    raise LookupError(f"no SpeculativeConfig in vLLM {version}")


@functools.lru_cache(maxsize=None)
def vllm_attention_backends(version: str) -> frozenset:
    """Names ``VLLM_ATTENTION_BACKEND`` may take in vLLM ``version`` (members of its backend enum)."""
    root = source_tree("vllm", version) / "vllm"
    names: set[str] = set()
    for rel, cls in (("attention/backends/registry.py", "AttentionBackendEnum"), ("platforms/interface.py", "_Backend"),
                     ("v1/attention/backends/registry.py", "AttentionBackendEnum")):
        p = root / rel
        if p.exists():
            try:
                c = _class(_parse(p), cls)
            except LookupError:
                continue
            names |= {t.id for s in c.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    return frozenset(names)


def vllm_tree_problems(version: str, speculative_config: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """Why vLLM ``version`` would reject a tree job's speculative_config keys or attention backend."""
    fields = vllm_speculative_fields(version)
    out = [f"speculative_config.{k}: not a field of vLLM {version}'s SpeculativeConfig"
           for k in speculative_config if k not in fields]
    backend = env.get("VLLM_ATTENTION_BACKEND")
    if backend is not None and backend not in vllm_attention_backends(version):
        out.append(f"VLLM_ATTENTION_BACKEND = {backend!r}: not a backend of vLLM {version}")
    return out


# --- every job of the tree study, as it will run ------------------------------------------------------


def record_problems(rec: Mapping[str, Any]) -> list[str]:
    """This module's checks of one ``engine-args`` record, each problem naming the job: an SGLang job's
    keywords (:func:`sglang_problems`), a vLLM job's ``VLLM_ATTENTION_BACKEND`` and tree keys."""
    if rec.get("engine") == "sglang":
        sampling = dict(rec.get("sampling_params") or {})
        sampling.update({f"<{k}>": v for k, v in (rec.get("other_sampling_params") or {}).items()})
        probs = sglang_problems(rec["sglang_kwargs"], {k: v for p in sampling.values() for k, v in p.items()},
                                drafter_class=rec.get("drafter_class"), version=rec["engine_version"])
        probs += sglang_value_problems(rec["sglang_kwargs"], rec.get("batch_sizes"), rec.get("gpus"),
                                       version=rec["engine_version"])
    elif rec.get("llm_kwargs") is not None and rec.get("vllm_version"):
        probs = vllm_tree_problems(rec["vllm_version"], rec["llm_kwargs"].get("speculative_config") or {},
                                   rec.get("env") or {})
        probs = [p for p in probs if not p.startswith("speculative_config.")]  # sourcecheck.check_job names those
    else:
        return []
    return [f"{rec['job']}: {p}" for p in probs]


def tree_jobs(cfg: Mapping[str, Any], workdir: str = ".") -> list[dict]:
    """The ``engine-args`` records of the tree study's jobs (Fig. 2): what each passes to SGLang or vLLM.

    Model folders are known only after download; until then they appear as ``<path of <manifest>>``.
    """
    study = {e["name"] for e in cfg.get("experiments", []) if tree_study(e)}
    return [r for r in engine_args(cfg, workdir) if r["experiment"] in study]


def job_problems(rec: Mapping[str, Any]) -> list[str]:
    """The source check of one :func:`tree_jobs` record, each problem naming the job: SGLang's arguments, or
    a vLLM job's tree keys (``speculative_config``) and attention backend."""
    if rec.get("engine") == "sglang":
        return record_problems(rec)
    probs = vllm_tree_problems(rec["vllm_version"], rec["llm_kwargs"].get("speculative_config") or {},
                               rec.get("env") or {})
    return [f"{rec['job']}: {p}" for p in probs]


def add_cli(sub) -> None:
    """``specrepro tree-args``: the tree study's engine jobs with their arguments; ``--check``: against the sdists."""
    p = sub.add_parser("tree-args", help="Fig. 2's engine jobs (SGLang and vLLM trees) as engine-args prints them, "
                                         "one JSON line each")
    p.add_argument("--run-config", required=True, help="results/run_config.json (or a validated config as JSON)")
    p.add_argument("--workdir", default=".", help="where resources/models/*/manifest.json are (model paths)")
    p.add_argument("--check", action="store_true", help="check every argument against the engines' pinned source")

    def run(a):
        import json

        from ...core.io import SpecReproError, read_json

        recs = tree_jobs(read_json(a.run_config), a.workdir)
        problems = []
        for r in recs:
            print(json.dumps(r, sort_keys=True))
            if a.check:
                problems += job_problems(r)
        if problems:
            raise SpecReproError(f"{len(problems)} argument(s) the engines' source rejects; first: {problems[0]}")

    p.set_defaults(func=run)
