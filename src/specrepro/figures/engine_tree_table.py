"""Table for Fig. 2: every tree-study configuration per engine and batch size, with intervals and the lossless check."""

from __future__ import annotations

import math

import pandas as pd

from . import FigureSpec, TraceContext
from .engine_tree import SGLANG_OVERLAP_NOTE, VLLM_TREE_CAVEAT, lossless_summary, tree_table
from ..engine.results.metrics import load_points
from ..core.io import write_csv, write_text
from ..core.latex import grouped_rows, tex_escape

SPEC = FigureSpec(
    name="tab_tree",
    kind="table",
    title="Tree vs chain: every configuration on SGLang and on vLLM's tree path",
    paper_ref="Fig. 2",
    caption=(
        "The points of Fig. 2 ({subject_label}) per experiment, configuration and batch size B: the engine and its "
        "version, the configuration in the engine's own terms (SGLang: speculative_num_steps, _eagle_topk, "
        "_num_draft_tokens; vLLM: children per node at each level of its static tree), speedup over no SD of "
        "the same engine, accepted length and acceptance rate ((accepted length - 1) / k), each with its 95% "
        "bootstrap interval over requests, outputs identical to no SD's at the same request and B "
        "(identical/compared; greedy decoding should change nothing), and failed points (failed/all); under "
        "the table the same check summed over B per configuration. " + VLLM_TREE_CAVEAT + " " + SGLANG_OVERLAP_NOTE
    ),
    paper_statement=(
        "Qwen3-8B GSM8K EAGLE-3 on SGLang: chain k = 3 1.65/1.58/1.31/1.22x at B = 1/16/64/128, tree k = 6 "
        "1.68/1.50/1.09/1.03x, tree k = 21 1.85/1.34/0.58/0.56x; accepted length 2.25 (k = 3) and 2.92 (k = 21), "
        "acceptance rate 0.415 and 0.095. Llama-3-70B InstructCoder EAGLE: chain 2.42/2.05/1.55/1.34x, tree "
        "k = 21 2.40/1.51/0.66/0.61x."
    ),
    data="engine runs",
)


def add_arguments(p) -> None:
    p.add_argument("--points", nargs="+", required=True, help="bench tables of the tree-study experiments")
    p.add_argument("--csv", required=True, help="the same table as CSV")


def _ci(v, lo, hi, fmt="{:.2f}") -> str:
    if v is None or pd.isna(v) or (isinstance(v, float) and math.isnan(v)):
        return "--"
    text = fmt.format(v)
    if not (pd.isna(lo) or pd.isna(hi)):
        text += f" [{fmt.format(lo)}, {fmt.format(hi)}]"
    return text


def to_latex(t: pd.DataFrame) -> str:
    lines = [
        r"\resizebox{\linewidth}{!}{%",
        r"\begin{tabular}{@{}l l l r l l l r r@{}}",
        r"\toprule",
        r"Exp. (engine) & Config. & engine arguments & B & speedup & acc.\ length & acc.\ rate & identical & failed \\",
        r"\midrule",
    ]
    t = t.assign(group=[f"{x} ({e} {v})".strip() for x, e, v in zip(t["exp"], t["engine"], t["engine_version"])])
    for grp, r in grouped_rows(t.itertuples(index=False), "group", lines):
        ident = "--" if r.method == "none" or pd.isna(r.compared) else f"{int(r.identical)}/{int(r.compared)}"
        lines.append(
            f"{grp} & {tex_escape(r.shape)} & {tex_escape(r.engine_args)} & {int(r.batch_size)} & "
            f"{_ci(r.speedup, r.speedup_ci_low, r.speedup_ci_high)} & "
            f"{_ci(r.accepted_length, r.accepted_length_ci_low, r.accepted_length_ci_high)} & "
            f"{_ci(r.acceptance_rate, r.acceptance_rate_ci_low, r.acceptance_rate_ci_high, '{:.3f}')} & "
            f"{ident} & {int(r.failed)}/{int(r.points)} \\\\"
        )
    if not len(t):
        lines.append(r"\multicolumn{9}{c}{no tree-study points} \\")
    lines += [r"\bottomrule", r"\end{tabular}}", ""]
    summary = lossless_summary(t)
    if summary:
        parts = [f"{x['exp']} {x['config']}: {x['identical']}/{x['compared']}"
                 + (" (vLLM's tree path: verified as a chain)" if x["engine"] == "vllm" and x["tree"] else "")
                 for x in summary]
        lines += [r"\par\smallskip\footnotesize Lossless check, greedy outputs identical to no SD's (summed over B): "
                  + tex_escape("; ".join(parts)) + ".", ""]
    return "\n".join(lines)


def build(args, ctx: TraceContext) -> None:
    t = tree_table(load_points(args.points), ctx)
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.10g")
    write_text(args.output, to_latex(t))
