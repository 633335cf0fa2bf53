"""Table: each experiment's fitted cost-model coefficients and fit quality; the released traces' model against
the paper's H100 cost model, coefficient by coefficient.

Input: the per-experiment cost models and fit reports (:mod:`specrepro.engine.results.modelfit`). An experiment whose
model is the released traces' (``--paper-target``, Llama-3.1-8B on the GPU run) also gets the paper's value of every
coefficient (``--paper-model``, the authors' H100 fit) and the ratio fitted / paper; the paper's drafter
coefficients were fitted on the EAGLE-3 head, so each of that experiment's drafters is compared with them.
"""

from __future__ import annotations

import math

import pandas as pd
import yaml

from . import FigureSpec, TraceContext
from ..core.costmodel import load_cost_model
from ..core.io import SpecReproError, read_json, write_csv, write_text
from ..core.latex import tabular_per_group, tex_escape

SPEC = FigureSpec(
    name="tab_costfit",
    kind="table",
    title="Cost-model coefficients of each model",
    paper_ref="Sec. 6 (simulator cost model)",
    caption=(
        "Fitted coefficients of every experiment's cost model ({subject_label}; seconds, kv and n in tokens), with each "
        "role's R^2 over the steps it was fitted to, and the source (profiled steps, or benchmark wall times for an "
        "experiment without a profiled pass). Rows of the released traces' model also give the paper's H100 "
        "coefficients and the ratio fitted / paper. 'assumed' marks a coefficient the data cannot identify (one k: "
        "d_fixed = 0; d_tok, a drafter's time per token over the batch, is fitted where the profiled passes span several k and batch "
        "sizes and is left out where it is 0, the paper's form; so is overhead_per_token, the step's overhead per token it "
        "schedules, fitted with one constant per method where profiled steps schedule several token counts)."
    ),
    paper_statement=(
        "The paper's simulator uses one cost model, Llama-3.1-8B on an H100 fitted by the authors (target c_kv, "
        "c_compute, c_fixed; EAGLE d_kv, d_spec, d_fixed; n-gram a share of the target; a per-step overhead)."
    ),
    data="engine runs (profiled steps)",
)

COLUMNS = ["exp", "model", "source", "role", "coefficient", "value", "assumed", "r2", "n_points", "paper", "ratio"]
PAPER_ATTR = {"c_kv": "c_kv", "c_compute": "c_compute", "c_fixed": "c_fixed", "d_kv": "d_kv", "d_spec": "d_spec",
              "d_fixed": "d_fixed", "d_tok": "d_tok", "draft_fraction": "ngram_fraction", "overhead_per_step": "overhead",
              "overhead_per_token": "overhead_per_token"}


def add_arguments(p) -> None:
    p.add_argument("--models", nargs="+", required=True, help="results/engine/<exp>/cost_model.yaml")
    p.add_argument("--reports", nargs="+", required=True, help="results/engine/<exp>/cost_model.json")
    p.add_argument("--paper-model", required=True, help="the paper's cost model (built-in name or file)")
    p.add_argument("--paper-target", required=True, help="the model key of the released traces (e.g. llama3.1-8b)")
    p.add_argument("--csv", required=True)


def coefficient_rows(doc: dict, report: dict, paper=None) -> list[dict]:
    """One row per coefficient of one experiment (:data:`COLUMNS`); ``paper``: the paper's cost model to compare with."""
    base = {"exp": report["exp"], "model": doc.get("model", ""), "source": report.get("source", "")}
    assumed = doc.get("assumed") or {}
    rows = []

    def add(role, section, coefs, fit):
        for k, v in coefs.items():
            key = f"{section}.{k}" if section else k
            if k == "d_tok" and not v:  # the paper's form (no per-token drafting term): the caption says when
                continue
            p = getattr(paper, PAPER_ATTR[k]) if paper is not None else math.nan
            rows.append({**base, "role": role, "coefficient": k, "value": float(v), "assumed": key in assumed,
                         "r2": (fit or {}).get("r2", math.nan), "n_points": (fit or {}).get("n_points", 0),
                         "paper": p, "ratio": float(v) / p if paper is not None and p > 0 else math.nan})

    add("target", "target", doc["target"], report.get("target"))
    for m, coefs in (doc.get("drafters") or {}).items():
        add(m, f"drafters.{m}", coefs, (report.get("drafters") or {}).get(m))
    if report.get("ngram"):
        add("ngram", "ngram", doc["ngram"], report["ngram"])
    # the overhead per scheduled token is listed where it was fitted (the paper's form has none)
    add("overhead", "", {"overhead_per_step": doc["overhead_per_step"],
                         **({"overhead_per_token": doc["overhead_per_token"]} if doc.get("overhead_per_token") else {})},
        {"r2": math.nan, "n_points": report.get("overhead_points", 0)})
    return rows


def _num(v, f="{:.3g}") -> str:
    return "--" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f.format(v)


def to_latex(t: pd.DataFrame, note: str) -> str:
    """One tabular per experiment (:func:`~specrepro.core.latex.tabular_per_group`), then the note."""
    head = [r"\begin{tabular}{@{}llllrrrr@{}}", r"\toprule",
            r"experiment & role & coefficient & value & $R^2$ & steps & paper (H100) & ratio \\", r"\midrule"]

    def body(rows):
        for i, r in enumerate(rows.itertuples(index=False)):
            name = f"\\texttt{{{tex_escape(r.exp)}}} ({tex_escape(r.source)})" if i == 0 else ""
            val = _num(r.value) + (" (assumed)" if r.assumed else "")
            yield (f"{name} & {tex_escape(r.role)} & {tex_escape(r.coefficient)} & {val} & {_num(r.r2, '{:.2f}')} & "
                   f"{int(r.n_points)} & {_num(r.paper)} & {_num(r.ratio, '{:.2f}')} \\\\")

    lines = tabular_per_group(head, [list(body(g)) for _, g in t.groupby("exp", sort=False)])
    if note:
        lines += ["", r"\smallskip", f"{{\\footnotesize {tex_escape(note)}}}"]
    return "\n".join(lines) + "\n"


def build(args, ctx: TraceContext) -> None:
    if len(args.models) != len(args.reports):
        raise SpecReproError(f"{len(args.models)} cost models but {len(args.reports)} fit reports")
    paper = load_cost_model(args.paper_model)
    rows, compared = [], []
    for mpath, rpath in zip(args.models, args.reports):
        doc = yaml.safe_load(open(mpath, encoding="utf-8"))
        rep = read_json(rpath)
        same = doc.get("model") == args.paper_target
        if same:
            compared.append(rep["exp"])
        rows += coefficient_rows(doc, rep, paper if same else None)
    t = pd.DataFrame(rows, columns=COLUMNS)
    note = (f"Compared with the paper's {paper.name}: {', '.join(compared)}." if compared else
            f"No experiment of this run has the released traces' model ({args.paper_target}): nothing is compared with "
            f"the paper's {paper.name}.")
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.6g")
    write_text(args.output, to_latex(t, note))
