"""Table: is speculative decoding lossless here? Outputs against no SD, acceptance, failed points."""

from __future__ import annotations

import math

import pandas as pd

from . import FigureSpec, TraceContext
from ..engine.results.metrics import config_label_text, load_points, lossless_detail
from ..core.io import write_csv, write_text
from ..core.latex import grouped_rows, tex_breakable, tex_escape

SPEC = FigureSpec(
    name="tab_lossless",
    kind="table",
    title="Lossless check and acceptance of the engine runs",
    paper_ref="Sec. 2 (greedy SD is lossless); Figs. 1, 3",
    caption=(
        "Per experiment and configuration of the engine runs ({subject_label}): of the points (request x batch "
        "size) that can be compared with the no-SD point of the same request and batch size, how many gave the "
        "identical output token for token (identical/compared) (greedy decoding: SD should change nothing, but batched floating-point kernels "
        "may); acceptance length (1 + accepted / drafts) and acceptance rate (accepted / draft tokens) and the "
        "acceptance rate of each draft position, all from vLLM's summed counters over the successful points, the "
        "first two with their 95 % bootstrap interval over requests in brackets; "
        "failed points (failed/all) and the first error. Draft jobs (oracle-*, controlled-*, hybrid-*: drafts substituted "
        "through the project's vLLM plugin; their acceptance is the substituted drafts') are checked the same way. "
        "On a CPU run the stand-ins are tiny and randomly initialised; SmolLM2-135M is a real model."
    ),
    paper_statement=(
        "With greedy sampling speculative decoding leaves the output unchanged; only speed differs between "
        "methods. Acceptance falls with the draft position (an earlier version of the authors' blog, not the paper: "
        "GLM-4.5-Air MTP on GPQA 0.92, 0.68, 0.38)."
    ),
    data="engine runs",
)

ERROR_CHARS = 70


def add_arguments(p) -> None:
    p.add_argument("--points", nargs="+", required=True, help="bench and draft-job tables (results/engine/<exp>/{bench,drafts}/*.parquet)")
    p.add_argument("--csv", required=True, help="the same table as CSV (full error texts)")


def _num(v, fmt: str = "{:.2f}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or pd.isna(v):
        return "--"
    return fmt.format(v)


def _ci(r, col: str) -> str:
    """`` [low, high]`` in small type, or nothing without an interval."""
    lo, hi = getattr(r, f"{col}_ci_low", math.nan), getattr(r, f"{col}_ci_high", math.nan)
    if any(v is None or pd.isna(v) for v in (lo, hi)) or lo == hi:
        return ""
    return f" {{\\scriptsize [{lo:.2f}, {hi:.2f}]}}"


def _short(text: str) -> str:
    text = str(text or "")
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def to_latex(t: pd.DataFrame, ctx: TraceContext) -> str:
    lines = [
        # experiment, configuration, the per-position rates and the error wrap
        r"\begin{tabular}{@{}>{\raggedright\arraybackslash}p{0.11\textwidth}>{\raggedright\arraybackslash}p{0.13\textwidth} r rr"
        r" >{\raggedright\arraybackslash}p{0.1\textwidth} r >{\raggedright\arraybackslash}p{0.13\textwidth}@{}}",
        r"\toprule",
        r"Exp. & Config. & identical & acc.\ len. & acc.\ rate & per position & failed & first error \\",
        r"\midrule",
    ]
    for exp, r in grouped_rows(t.itertuples(index=False), "exp", lines):
        k = None if pd.isna(r.k) else int(r.k)
        pos = " ".join(f"{float(x):.2f}" for x in str(r.acceptance_rate_per_pos).split()) or "--"
        err = r.first_error or (f"(counters) {r.first_counter_warning}" if r.first_counter_warning else "")
        ident = "--" if r.method == "none" else f"{int(r.identical)}/{int(r.compared)}"
        err_tex = f"{{\\scriptsize {tex_breakable(_short(err))}}}" if err else "--"
        cfg = tex_escape(config_label_text(r.method, k, ctx.proposers, r.config))
        lines.append(
            f"{exp} & {cfg} & {ident} & {_num(r.acceptance_length)}{_ci(r, 'acceptance_length')} & "
            f"{_num(r.acceptance_rate)}{_ci(r, 'acceptance_rate')} & {pos} & "
            f"{int(r.failed)}/{int(r.points)} & {err_tex} \\\\"
        )
    if not len(t):
        lines.append(r"\multicolumn{8}{c}{no engine points} \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def build(args, ctx: TraceContext) -> None:
    t = lossless_detail(load_points(args.points))
    order = {e["name"]: i for i, e in enumerate(ctx.experiments)}
    if len(t):
        t = t.assign(_o=t["exp"].map(lambda x: order.get(x, len(order)))).sort_values(
            ["_o", "exp"], kind="mergesort").drop(columns="_o").reset_index(drop=True)
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.10g")
    write_text(args.output, to_latex(t, ctx))
