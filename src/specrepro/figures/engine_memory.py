"""Table: memory overhead of each drafter (weights, per-token KV cache), from the architectures and from vLLM.

Rows: every experiment x method of the run config that needs a proposer (n-gram: no extra memory;
eagle, eagle3, draft_model: the drafter's checkpoint). The architecture columns come from
:func:`specrepro.engine.results.memory.memory_table` on the models' ``config.json`` (the model manifests give their
directories) in the run config's ``engine.dtype``; the vLLM columns from the bench metadata
(``vllm_memory``, what the loaded engine reported: :func:`specrepro.engine.results.memory.vllm_reported_memory`).

Metric keys (architecture, the first experiment of a model in config order)::

    engine.memory.<model>.<method>.kv_per_token_ratio     (target + drafter KV bytes per token) / target's
    engine.memory.<model>.<method>.weight_ratio           (target + drafter weights) / target's
    engine.memory.<model>.<method>.drafter_params
    engine.memory.<model>.<method>.vllm_kv_per_token_ratio  vLLM's KV bytes per token with the drafter over
                                                            without (the experiment's no-SD engine), if both reported
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pandas as pd

from . import ENGINE_METHODS, FigureSpec, TraceContext
from ..core.io import SpecReproError, read_json, write_csv, write_json, write_text
from ..core.latex import grouped_rows, tex_escape
from ..engine.results.memory import MEMORY_COLUMNS, memory_table

SPEC = FigureSpec(
    name="tab_memory",
    kind="table",
    title="Memory overhead of the drafters",
    paper_ref="Sec. 5 (memory)",
    caption=(
        "Memory a proposer adds to the target ({subject_label}), per experiment and method: parameters and weight "
        "bytes of the target and of what the drafter adds as vLLM loads it (an EAGLE head shares the target's "
        "embeddings and LM head; a draft model brings its own), KV-cache bytes per token (2 x layers x KV heads x "
        "head dim x bytes per element, target and drafter) and the ratio (target + drafter) / target. n-gram adds "
        "nothing. All from the models' config.json in the run's dtype. Last columns: vLLM's own report at load "
        "(KV bytes per token over all KV layers, loaded parameters; -- where the engine reported nothing) and its "
        "ratio to the architecture count. On a CPU run the models are tiny and randomly initialised: the ratios "
        "check the accounting, not the paper's models."
    ),
    paper_statement=(
        "n-gram needs no extra memory; EAGLE/EAGLE-3 heads add little; a Qwen3-0.6B draft model next to Qwen3-8B "
        "raises the per-token KV memory 1.77x ((36 + 28) / 36 layers = 1.778, truncated)."
    ),
    data="engine runs (model configs) and vLLM's load report",
)

DRAFTER_METHODS = ("ngram", "eagle", "eagle3", "draft_model")
COLUMNS = (["exp", "model", "method"] + [c for c in MEMORY_COLUMNS if c not in ("target", "drafter", "kind")]
           + ["shares_embeddings", "vllm_config", "vllm_kv_bytes_per_token", "vllm_kv_layers", "vllm_params",
              "vllm_target_params", "vllm_drafter_params", "vllm_kv_check", "vllm_params_check",
              "vllm_kv_per_token_ratio"])


def add_arguments(p) -> None:
    p.add_argument("--manifests", nargs="+", required=True,
                   help="model manifests (resources/models/<name>/manifest.json): name and path of each model")
    p.add_argument("--meta", nargs="*", default=[],
                   help="bench metadata (results/engine/<exp>/bench/<config>.json) with vLLM's memory report")
    p.add_argument("--csv", required=True, help="the same table as CSV")
    p.add_argument("--metrics", required=True, help="flat metrics JSON for the claims table")


def load_configs(paths) -> dict:
    """manifest name -> (config.json dict, model directory)."""
    out = {}
    for p in paths:
        m = read_json(p)
        if not isinstance(m, dict) or "name" not in m or "path" not in m:
            raise SpecReproError(f"{p}: not a model manifest (needs 'name' and 'path')")
        cfg_path = Path(m["path"]) / "config.json"
        if not cfg_path.exists():
            raise SpecReproError(f"{p}: {cfg_path} not found (model {m['name']!r})")
        out[str(m["name"])] = (read_json(cfg_path), Path(m["path"]))
    return out


def checkpoint_has_embeddings(model_dir: Path) -> bool | None:
    """Whether a checkpoint's safetensors hold an ``embed_tokens`` tensor (None if no safetensors file)."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        if any("embed_tokens" in k for k in header):
            return True
    return False


def _methods(exp: dict) -> list[str]:
    out = []
    for m in exp.get("methods", []):
        name = m["method"] if isinstance(m, dict) else str(m)
        if name in DRAFTER_METHODS and name not in out:
            out.append(name)
    return sorted(out, key=DRAFTER_METHODS.index)


def _vllm_reports(paths) -> dict:
    """(exp, method) -> (config, vllm_memory) of the first metadata file (by config name) that has a report."""
    found: dict = {}
    metas = []
    for p in paths:
        m = read_json(p)
        if isinstance(m, dict) and m.get("exp") is not None:
            metas.append(m)
    for m in sorted(metas, key=lambda m: (str(m.get("exp")), str(m.get("config", "")))):
        rep = m.get("vllm_memory")
        if isinstance(rep, dict) and rep:
            method = m.get("method") or str(m.get("config", "")).split("-k")[0]
            found.setdefault((str(m["exp"]), str(method)), (str(m.get("config", "")), rep))
    return found


def _num(v):
    return math.nan if v is None else v


def memory_rows(ctx: TraceContext, run_config: dict, configs: dict, reports: dict) -> pd.DataFrame:
    dtype = str((run_config.get("engine") or {}).get("dtype", "bfloat16"))
    rows = []
    for exp in ctx.experiments:
        model = exp["model"]
        methods = _methods(exp)
        if not methods:
            continue
        if model not in configs:
            raise SpecReproError(f"no manifest for target {model!r} of experiment {exp['name']!r} (--manifests)")
        tcfg, _ = configs[model]
        base_rep = (reports.get((exp["name"], "none")) or (None, {}))[1]
        for method in methods:
            dcfg, shares = None, True
            if method != "ngram":
                key = f"{model}/drafters/{method}"
                if key not in configs:
                    raise SpecReproError(f"no manifest for drafter {key!r} of experiment {exp['name']!r} (--manifests)")
                dcfg, ddir = configs[key]
                if method in ("eagle", "eagle3"):
                    shares = not bool(checkpoint_has_embeddings(ddir))
            arch = memory_table([{"target": model, "target_config": tcfg, "kind": method, "drafter": method,
                                  "drafter_config": dcfg, "dtype": dtype, "shares_embeddings": shares}]).iloc[0]
            cfg, rep = reports.get((exp["name"], method), ("", {}))
            arch_kv = arch["target_kv_bytes_per_token"] + arch["drafter_kv_bytes_per_token"]
            arch_params = arch["target_params"] + arch["drafter_params"]
            vkv, vp = rep.get("kv_bytes_per_token"), rep.get("params")
            bkv = base_rep.get("kv_bytes_per_token")
            row = {"exp": exp["name"], "model": model, "method": method}
            row.update({c: arch[c] for c in MEMORY_COLUMNS if c not in ("target", "drafter", "kind")})
            row.update(
                shares_embeddings=shares if method in ("eagle", "eagle3") else None, vllm_config=cfg,
                vllm_kv_bytes_per_token=_num(vkv), vllm_kv_layers=_num(rep.get("kv_layers")), vllm_params=_num(vp),
                vllm_target_params=_num(rep.get("target_params")), vllm_drafter_params=_num(rep.get("drafter_params")),
                vllm_kv_check=vkv / arch_kv if vkv is not None and arch_kv else math.nan,
                vllm_params_check=vp / arch_params if vp is not None and arch_params else math.nan,
                vllm_kv_per_token_ratio=vkv / bkv if vkv is not None and bkv else math.nan,
            )
            rows.append(row)
    t = pd.DataFrame(rows, columns=COLUMNS)
    for c in ("vllm_kv_bytes_per_token", "vllm_kv_layers", "vllm_params", "vllm_target_params",
              "vllm_drafter_params"):
        t[c] = t[c].astype(float)
    return t


def metrics(t: pd.DataFrame) -> dict:
    out: dict[str, float] = {}
    for r in t.itertuples(index=False):
        pre = f"engine.memory.{r.model}.{r.method}"
        if f"{pre}.kv_per_token_ratio" in out:
            continue  # a later experiment of the same model: same architecture
        out[f"{pre}.kv_per_token_ratio"] = float(r.kv_ratio_per_token)
        out[f"{pre}.weight_ratio"] = float(r.weight_ratio)
        out[f"{pre}.drafter_params"] = int(r.drafter_params)
    for r in t.itertuples(index=False):
        key = f"engine.memory.{r.model}.{r.method}.vllm_kv_per_token_ratio"
        if key not in out and not math.isnan(r.vllm_kv_per_token_ratio):
            out[key] = float(r.vllm_kv_per_token_ratio)
    return dict(sorted(out.items()))


def _count(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "--"
    v = float(v)
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.2f}{unit}"
    return f"{int(v)}"


def _bytes(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "--"
    v = float(v)
    for div, unit in ((2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if abs(v) >= div:
            return f"{v / div:.2f} {unit}"
    return f"{int(v)} B"


def _ratio(v, fmt="{:.3f}x") -> str:
    return "--" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(float(v))


def to_latex(t: pd.DataFrame, ctx: TraceContext) -> str:
    lines = [
        r"\resizebox{\linewidth}{!}{%",  # ten columns: shrink to the text width rather than run into the margin
        r"\begin{tabular}{@{}>{\raggedright\arraybackslash}p{0.12\textwidth}l rrr rrr rr@{}}",
        r"\toprule",
        r" & & \multicolumn{3}{c}{parameters / weights} & \multicolumn{3}{c}{KV bytes per token} & "
        r"\multicolumn{2}{c}{vLLM at load} \\",
        r"\cmidrule(lr){3-5}\cmidrule(lr){6-8}\cmidrule(l){9-10}",
        r"Exp. & Method & target & drafter & ratio & target & drafter & ratio & KV/token (check) & params (check) \\",
        r"\midrule",
    ]
    for exp, r in grouped_rows(t.itertuples(index=False), "exp", lines):
        vkv = "--" if math.isnan(r.vllm_kv_bytes_per_token) else \
            f"{int(r.vllm_kv_bytes_per_token)} ({_ratio(r.vllm_kv_check, '{:.2f}')})"
        vp = "--" if math.isnan(r.vllm_params) else f"{_count(r.vllm_params)} ({_ratio(r.vllm_params_check, '{:.2f}')})"
        lines.append(
            f"{exp} & {tex_escape(ctx.proposers.get(r.method, ENGINE_METHODS.get(r.method, r.method)))} & "
            f"{_count(r.target_params)} / {_bytes(r.target_weight_bytes)} & "
            f"{_count(r.drafter_params)} / {_bytes(r.drafter_weight_bytes)} & {_ratio(r.weight_ratio)} & "
            f"{int(r.target_kv_bytes_per_token)} & {int(r.drafter_kv_bytes_per_token)} & "
            f"{_ratio(r.kv_ratio_per_token)} & {vkv} & {vp} \\\\"
        )
    if not len(t):
        lines.append(r"\multicolumn{10}{c}{no experiment uses a proposer} \\")
    lines += [r"\bottomrule", r"\end{tabular}}", ""]
    return "\n".join(lines)


def build(args, ctx: TraceContext) -> None:
    run_config = read_json(args.run_config)
    t = memory_rows(ctx, run_config, load_configs(args.manifests), _vllm_reports(args.meta or []))
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.10g")
    write_json(args.metrics, metrics(t))
    write_text(args.output, to_latex(t, ctx))
