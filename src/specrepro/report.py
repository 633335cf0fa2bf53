"""The LaTeX report: jinja2 templates -> ``report.tex`` -> latexmk -> ``paper/report.pdf``.

The report reads like an evaluation, in the order of :data:`SECTIONS`: a one-page verdict (claims by
status per paper figure, one headline claim of each against the paper's value), the paper's figures in the
paper's order (each section opens with its claims, then the evidence: released traces and the simulator,
then a GPU run's engine measurements), what goes beyond the paper, a real model on CPU (CPU runs), what
was run (provenance), and the appendices (the CPU engine exercise of the stand-ins; every claim).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import jinja2
import pandas as pd

from . import figures as figreg
from .figures.engine_exercise import methods_not_run
from .analysis.claims import CONSISTENT, NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, RULES, STATUSES, rule_counts
from .core.io import SpecReproError, atomic_path, read_json, write_text
from .core.latex import tex_breakable, tex_escape
from .core.layout import (MIN_PAGE_FILL, MIN_REQUESTS, MIN_TEXT_PT, PER_REQUEST, label_page, overfull_boxes, small_text,
                          sparse_pages)
from .core import provenance as prov
from .core.uncertainty import MIN_INTERVAL_REQUESTS
from .engine.models.families import STANDINS


#: what the figures of a subject speak for: the paper's claims (released traces, the simulator, a GPU run's
#: engines), a real model measured on a CPU run (trends only), or a CPU stand-in (tiny random model: the
#: engine code path only)
EVIDENCE, CPU_MODEL, STANDIN = "evidence", "cpu model", "stand-in"

#: parts of the report, in order
VERDICT, PAPER, BEYOND, CPU_PART, RUN, APPENDIX = "verdict", "paper", "beyond", "cpu", "run", "appendix"


@dataclass(frozen=True)
class Section:
    """One section of the report: the figures and tables it shows (by spec name, in this order, each of a
    subject whose role is in ``roles``) and the claims groups it opens with (by figure label)."""

    key: str  #: its LaTeX label, sec:<key>
    title: str
    part: str
    names: tuple[str, ...] = ()
    claims: tuple[str, ...] = ()  #: figure labels of claims groups ("Fig. 5", "Figs. 10, 12")
    roles: frozenset = frozenset({EVIDENCE})
    intro: str = ""


#: each experiment's upper bounds on its own traces and cost model: the closed loop (simulated against measured
#: speedups, the error) always before the bounds it qualifies
_UPPER_BOUNDS = ("tab_closed_loop_summary", "tab_closed_loop", "fig_closed_loop", "tab_falsification",
                 "fig10_sim_engine", "fig12_sim_engine", "tab_sim_engine")

#: a CPU run's real model: its speedup and the trends, then its measurements, then (on its own traces) the
#: simulator's bounds. The cost fit and the closed-loop summary span every experiment of the run, the stand-ins
#: included: on a CPU run they go to the engine exercise's appendix (on a GPU run, "What was run" and per model)
_ENGINE_FIGURES = ("fig01_speedup", "tab_trends", "fig05_acceptance_heatmap", "fig07_request_span",
                   "fig11_acceptance_diff", "tab_acceptance_stats", "fig04_breakdown", "fig09_engine_bleu",
                   "fig03_reasoning", *(n for n in _UPPER_BOUNDS if n != "tab_closed_loop_summary"),
                   "fig10_sim_speedup", "fig12_oracle_combine", "tab_oracle_gap")

CPU_MODEL_TITLE = "A real model on CPU"

#: The report's order. A figure or table is shown in the first section that names it and takes its subject's
#: role; a new figure is one more name in the ``names`` of its section (or a new Section here). Inside a
#: section: the released traces' and the simulator's items first, then the engine runs', each in ``names`` order.
SECTIONS: tuple[Section, ...] = (
    Section("fig1", "Paper Fig. 1: end-to-end speedup", PAPER, ("fig01_speedup",), ("Fig. 1",)),
    Section("lossless", "Greedy speculative decoding is lossless", PAPER, ("tab_lossless",)),
    Section("fig2", "Paper Fig. 2: tree versus chain verification", PAPER, ("fig02_tree", "tab_tree"), ("Fig. 2",)),
    Section("fig3", "Paper Fig. 3: reasoning workloads", PAPER, ("fig03_reasoning",), ("Fig. 3",)),
    Section("fig4", "Paper Fig. 4: where the time of a step goes", PAPER, ("fig04_breakdown",), ("Fig. 4",)),
    Section("memory", "Memory of the drafters", PAPER, ("tab_memory",), ("Memory",)),
    Section("fig5", "Paper Fig. 5: acceptance by position", PAPER, ("fig05_acceptance_heatmap", "tab_acceptance_stats"),
            ("Fig. 5",)),
    Section("fig7", "Paper Fig. 7: acceptance by request", PAPER, ("fig07_request_span",), ("Fig. 7",)),
    Section("fig9", "Paper Fig. 9: when n-gram beats EAGLE", PAPER, ("fig09_bleu_ngram", "fig09_engine_bleu"), ("Fig. 9",)),
    Section("fig10", "Paper Fig. 10: fixed k against an oracle (simulated)", PAPER, ("tab_ngram_agreement", "fig10_sim_speedup"),
            ("Fig. 10",)),
    Section("fig11", "Paper Fig. 11: where n-gram beats EAGLE", PAPER, ("fig11_acceptance_diff",), ("Fig. 11",)),
    Section("fig12", "Paper Fig. 12: Oracle Combine", PAPER, ("fig12_oracle_combine", "tab_oracle_gap"),
            ("Fig. 12", "Figs. 10, 12")),
    Section("beyond", "Beyond the paper: the upper bound under honest accounting", BEYOND,
            ("tab_sim_beyond", "fig_sim_beyond")),
    Section("per-model", "Beyond the paper: upper bounds per model, checked against measured speedups", BEYOND,
            _UPPER_BOUNDS, ("Figs. 10, 12 per model",)),
    Section("hybrid", "Beyond the paper: choosing the proposer online", BEYOND, ("tab_hybrid",)),
    Section("today", "Beyond the paper: today's engines", BEYOND, ("fig_today", "tab_today")),
    Section("digitiser", "Check: the paper's figures read independently", BEYOND, ("tab_digitiser",)),
    Section("sizing", "Check: sizing a GPU run on the released traces", BEYOND, ("tab_sizing_validation",)),
    Section("head-positions", "Beyond the paper: EAGLE-3 past its head's positions", BEYOND, ("fig_head_positions",)),
    Section("trends", "Trend checks", BEYOND, ("tab_trends",)),
    Section("cpu-model", CPU_MODEL_TITLE, CPU_PART, _ENGINE_FIGURES, roles=frozenset({CPU_MODEL}),
            intro="Measured on this CPU run with a small real model and drafters trained by the pipeline, on workloads "
                  "written to be shaped like the paper's datasets: whether it shows the paper's qualitative trends. "
                  "It never decides a paper claim."),
    # a CPU run's hybrid is measured on the CPU model: after its section, as every CPU engine figure
    Section("cpu-hybrid", "Beyond the paper: choosing the proposer online (the CPU model)", CPU_PART, ("tab_hybrid",),
            roles=frozenset({CPU_MODEL}),
            intro="The paper's suggested next step, built into vLLM through the project's plugin and measured on this "
                  "run's real CPU model: a policy picks n-gram's draft or the trained EAGLE head's per request and step "
                  "before the head drafts, and the head drafts only as far as the step's choices need (its first "
                  "pass alone where every request takes n-gram's). The finding above is the table's, from its CSV; where the hybrid "
                  "loses, and why, follows the table."),
    Section("run", "What was run", RUN, ("tab_engine_jobs", "tab_head_positions", "tab_runtime", "fig_costfit",
                                         "tab_costfit", "tab_engine_exercise")),
    # every other figure of a CPU run's engines (with report.standin_figures: the stand-ins' too): "*" = any name
    Section("exercise", "The CPU engine exercise", APPENDIX,
            ("tab_engine_exercise", "tab_engine_jobs", "tab_runtime", "tab_lossless", "tab_memory", "*"),
            roles=frozenset({CPU_MODEL, STANDIN})),
)

#: where items and claims no section names go (a new figure before it has its entry): before "What was run"
OTHER = Section("other", "Further figures and tables", BEYOND, roles=frozenset({EVIDENCE, CPU_MODEL, STANDIN}))


@dataclass(frozen=True)
class Item:
    """One figure or table of the report."""

    spec: figreg.FigureSpec
    subject: str
    subject_label: str
    path: str  #: relative to the .tex file
    caption: str
    data: str = ""  #: where the numbers come from (the spec's ``data``, naming engine traces as such)
    role: str = EVIDENCE  #: :data:`EVIDENCE`, :data:`CPU_MODEL` or :data:`STANDIN` (:func:`subject_role`)
    note: str = ""  #: a sentence under it from its own CSV (:func:`specrepro.figures.report_note`)
    finding: str = ""  #: its section's finding in one sentence, if its module states one (beyond-the-paper sections)
    #: a table file of several tabulars (two \toprule): set in the text's flow, breaking between them, never scaled
    flow: bool = False
    #: the files its numbers are in, relative to the run directory: its own CSV, or its spec's ``sources``
    files: tuple[str, ...] = ()
    key: str = ""  #: its LaTeX label (``item:<file stem>``)


def number_files(path: str | Path, spec: figreg.FigureSpec, subject: str) -> tuple[str, ...]:
    """Where the numbers of the figure or table at ``path`` (relative to the run directory) are: its CSV beside it,
    else the files its spec names (``sources``, ``{subject}`` filled in)."""
    csv = Path(path).with_suffix(".csv")
    if csv.exists():
        return (csv.as_posix(),)
    return tuple(s.format(subject=subject) for s in spec.sources)


def subject_role(subject: str, run_config: dict) -> str:
    """What a subject's figures speak for: a stand-in experiment's engine traces are :data:`STANDIN`; the engine
    runs (subject ``engine``) and a real model's engine traces are :data:`EVIDENCE` on a GPU run and
    :data:`CPU_MODEL` on any other; released traces, the simulator and the paper's images are :data:`EVIDENCE`."""
    info = run_config.get("trace_sets", {}).get(subject) or {}
    if subject != figreg.ENGINE_SUBJECT and info.get("origin") != "engine":
        return EVIDENCE
    exp = subject[len(figreg.ENGINE_SUBJECT) + 1:]
    if any(e["name"] == exp and e.get("stands_in_for") for e in run_config.get("experiments", [])):
        return STANDIN
    return EVIDENCE if run_config.get("run", {}).get("kind") == "gpu" else CPU_MODEL


def too_few_requests(run_config: dict) -> dict[str, int]:
    """Trace sets whose per-request figures the report leaves out: name -> fewest requests of a dataset, where
    the run config knows it (``trace_sets.<name>.requests``, engine trace sets) and it is below MIN_REQUESTS."""
    out = {}
    for name, info in run_config.get("trace_sets", {}).items():
        counts = (info.get("requests") or {}).values()
        if counts and min(counts) < MIN_REQUESTS:
            out[name] = int(min(counts))
    return out


def section_of(item: Item, sections: Sequence[Section] = SECTIONS) -> Section:
    """The first section that names the item's figure (or ``"*"``) and takes its role; :data:`OTHER` if none does."""
    return next((s for s in sections if (item.spec.name in s.names or "*" in s.names) and item.role in s.roles), OTHER)


def _subject_rank(item: Item, run_config: dict) -> tuple:
    """Released traces, the simulator and the paper's images first, then the engine runs, then each engine trace
    set in the config's order of experiments."""
    if item.role == EVIDENCE and item.subject != figreg.ENGINE_SUBJECT and not item.subject.startswith("engine-"):
        return (0, 0)
    if item.subject == figreg.ENGINE_SUBJECT:
        return (1, 0)
    names = [e["name"] for e in run_config.get("experiments", [])]
    exp = item.subject[len(figreg.ENGINE_SUBJECT) + 1:]
    return (2, names.index(exp) if exp in names else len(names))


def layout(items: Sequence[Item], summaries: Sequence[dict], run_config: dict, keep: Sequence[str] = ("run",)) -> list[dict]:
    """The report's sections in :data:`SECTIONS` order, each with its items (``figures``, evidence first) and the claims
    blocks of :func:`figure_summaries` it opens with; sections with neither are left out unless in ``keep``.
    Items and claims groups no section takes go to :data:`OTHER`, before "What was run"."""
    order = list(SECTIONS)
    run_at = next(i for i, s in enumerate(order) if s.part == RUN)
    order.insert(run_at, OTHER)
    placed: dict[str, dict] = {s.key: {"section": s, "figures": [], "claims": []} for s in order}
    for it in items:
        placed[section_of(it).key]["figures"].append(it)
    for b in summaries:
        sec = next((s for s in SECTIONS if b["label"] in s.claims), OTHER)
        placed[sec.key]["claims"].append(b)
        b["section"] = sec.key
    out = []
    for s in order:
        p = placed[s.key]
        idx = {n: i for i, n in enumerate(s.names) if n != "*"}
        p["figures"].sort(key=lambda it: (_subject_rank(it, run_config), idx.get(it.spec.name, len(idx)), it.subject))
        p["subjects"] = len({it.subject for it in p["figures"]})
        # the paper's statement: of the figure its claims are about, else of the section's first figure
        first = [figreg.spec(n) for n in s.names[:1] if n != "*"]
        # a beyond-the-paper section (and the CPU model's) opens with its finding: the first of its items that states one
        p["finding"] = (next((it.finding for it in p["figures"] if it.finding), "")
                        if s.part in (BEYOND, CPU_PART) else "")
        if s.part == BEYOND and not p["finding"] and p["claims"] and not any(b["measured"] for b in p["claims"]):
            # claims only, none measured (e.g. the per-model bounds of a CPU run): say so rather than open blank
            n = sum(b["total"] for b in p["claims"])
            p["finding"] = (f"Not measured on this run: none of its {n} claims has the data it needs here "
                            f"({'; '.join(b['title'] for b in p['claims'] if b['title'])})"
                            + (f"; the CPU model's own measured and simulated upper bounds are in "
                               f"the section “{CPU_MODEL_TITLE}”." if run_config.get("run", {}).get("kind") == "cpu" else "."))
        # a block of this very figure first: section 12's "Figs. 10, 12" block states Fig. 10's widening gap
        own = ref_numbers(first[0].paper_ref) if first else set()
        stated = [b for b in p["claims"] if b["statement"]]
        p["statement"] = next((b["statement"] for b in stated if ref_numbers(b["label"]) == own), "") or \
            next((b["statement"] for b in stated), "") or (first[0].paper_statement if first and s.part == PAPER else "")
        if p["figures"] or p["claims"] or s.key in keep:
            out.append(p)
    return out


def data_source(spec_data: str, info: dict) -> str:
    """The spec's data label for one subject: a trace figure over an engine trace set says so (its traces are
    this run's vLLM's, not the released ones)."""
    if info.get("origin") == "engine":
        kind = str(info.get("hardware") or "").upper()
        return spec_data.replace("released traces", f"this run's engine traces (vLLM, {kind} run)".replace(", )", ")"))
    return spec_data


class _Keep(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _subject_info(run_config: dict, subject: str) -> dict:
    for group in ("trace_sets", "subjects"):
        if subject in run_config.get(group, {}):
            return run_config[group][subject]
    return {"label": subject}


def build_items(paths: Sequence[str | Path], run_config: dict, tex_dir: Path) -> list[Item]:
    """Report sections for the given figure/table files, in registry order, then by subject."""
    params = run_config.get("figures", {})
    order = {s.name: i for i, s in enumerate(figreg.all_specs())}
    items = []
    for p in paths:
        name, subject = figreg.parse_output_name(p)
        try:
            spec = figreg.spec(name)
        except KeyError:
            raise SpecReproError(f"{p}: no figure or table named {name!r} in specrepro.figures") from None
        info = _subject_info(run_config, subject)
        labels = [label for _, label in info.get("proposers") or []]
        fmt = _Keep(
            subject_label=info.get("label", subject),
            color_max=params.get("heatmap_color_max", 10),
            max_position=params.get("heatmap_max_position", 512),
            first_label=labels[0] if labels else "",
            second_label=labels[1] if len(labels) > 1 else "",
        )
        rel = os.path.relpath(Path(p).resolve(), tex_dir.resolve())
        items.append(Item(spec, subject, info.get("label", subject), rel, spec.caption.format_map(fmt),
                          data_source(spec.data, info), subject_role(subject, run_config),
                          figreg.report_note(name, p), figreg.finding(name, p),
                          spec.kind == "table" and Path(p).exists() and Path(p).read_text().count("\\toprule") > 1,
                          number_files(p, spec, subject), f"item:{Path(p).stem}"))
    items.sort(key=lambda it: (order[it.spec.name], it.subject))
    return items


def _fmt_value(v: object, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "--"
    if isinstance(v, float):
        text = f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"
    else:
        text = str(v)
    return text


def make_env(template_dir: str | Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        block_start_string="((*", block_end_string="*))",
        variable_start_string="(((", variable_end_string=")))",
        comment_start_string="((=", comment_end_string="=))",
        line_statement_prefix=None, trim_blocks=True, lstrip_blocks=True,
        autoescape=False, undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
    )
    env.filters["tex"] = tex_escape
    env.filters["texbreak"] = tex_breakable
    env.filters["num"] = _fmt_value
    return env


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (not isinstance(v, str) and pd.isna(v))


def _num_text(v: object, unit: str = "") -> str:
    """Two decimals; trailing zeros dropped except for speedups (unit x), so counts read "84", shares "24.7"."""
    text = _fmt_value(float(v)) if not _missing(v) else "--"
    if unit not in ("", "x") and "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _same_decimals(texts: list[str]) -> list[str]:
    """Texts of one cell (a value and its interval) cut to the most decimals any of them keeps: "2.6 [2.4, 2.79]"
    becomes "2.60 [2.40, 2.79]"; "84 [80, 90]" stays."""
    dec = max((len(t.partition(".")[2]) for t in texts), default=0)
    return [t if t == "--" or not dec else (t if "." in t else t + ".") + "0" * (dec - len(t.partition(".")[2]))
            for t in texts]


def _value_text(v: object, low: object, high: object, unit: str = "") -> str:
    """``2.64 [2.40, 2.79]``: a value and its interval (none where a bound is missing) with the same decimals."""
    if _missing(low) or _missing(high):
        return _num_text(v, unit)
    a, lo, hi = _same_decimals([_num_text(x, unit) for x in (v, low, high)])
    return f"{a} [{lo}, {hi}]"


def claim_cells(row: dict) -> dict:
    """Display strings of one claims-table row: the paper's value(s), this run's value(s) with intervals (none over
    fewer than MIN_INTERVAL_REQUESTS requests: not a 95 % interval) and, for a claim no run decides (evidence none),
    why (its registry note)."""
    if not _missing(row.get("n")) and int(row["n"]) < MIN_INTERVAL_REQUESTS:
        row = {**row, "ci_low": None, "ci_high": None, "ci_low_b": None, "ci_high_b": None}
    u = "" if _missing(row.get("unit")) else str(row.get("unit") or "")
    unit = "" if u in ("", "x") else f" {u}"
    if row.get("kind") == "ordering":
        paper = "" if _missing(row.get("paper_value")) else \
            f"{_num_text(row['paper_value'], u)} > {_num_text(row.get('paper_value_b'), u)}"
        run = "--" if _missing(row.get("this_run")) else (
            f"{_value_text(row['this_run'], row.get('ci_low'), row.get('ci_high'), u)} vs "
            f"{_value_text(row.get('this_run_b'), row.get('ci_low_b'), row.get('ci_high_b'), u)}")
    else:
        paper = "--" if _missing(row.get("paper_value")) else f"{_num_text(row['paper_value'], u)}{unit}"
        run = "--" if _missing(row.get("this_run")) else _value_text(row["this_run"], row.get("ci_low"),
                                                                     row.get("ci_high"), u)
    # a claim no run may decide (evidence none) is a documented contradiction of the paper: its reason is the note
    why = row.get("note") if row.get("evidence") == "none" and not _missing(row.get("note")) else ""
    return {"paper": paper.strip(), "run": re.sub(r"\s+", " ", run).strip(), "why_undecided": why or ""}


def ref_numbers(text: str) -> set[int]:
    """Figure numbers a reference names: "Fig. 1" -> {1}; "Figs. 5-7, 11" -> {5, 6, 7, 11}; no "Fig" -> {}."""
    out: set[int] = set()
    for m in re.finditer(r"Figs?\.\s*([0-9][0-9,\s\-–]*)", text):
        for part in re.split(r"[,\s]+", m.group(1).strip()):
            rng = re.split(r"[-–]", part)
            if all(x.isdigit() for x in rng) and rng[0]:
                out.update(range(int(rng[0]), int(rng[-1]) + 1))
    return out


def figure_label(group: str) -> str:
    """The figure a claims group belongs to: the part of its name before the colon ("Fig. 10", "Memory")."""
    return group.split(":", 1)[0].strip()


#: claims shown per figure in the summary at most (the appendix has them all)
SUMMARY_ROWS = 12


def figure_summaries(claims: pd.DataFrame, items: Sequence[Item] = ()) -> list[dict]:
    """One block per paper figure (claims groups sharing a figure label), in figure order.

    Each block: label, titles (its groups' names after the colon), counts per status, the headline claims
    (``headline`` in the registry; else the first few) with display cells, how many more the appendix holds,
    the paper's statement (from the figure module whose reference is exactly this figure) and the report
    sections that show it.
    """
    blocks: dict[str, dict] = {}
    for rec in claims.to_dict("records"):
        label = figure_label(str(rec["group"]))
        b = blocks.setdefault(label, {"label": label, "titles": [], "rows": [], "all": []})
        title = str(rec["group"]).split(":", 1)[1].strip() if ":" in str(rec["group"]) else ""
        if title and title not in b["titles"]:
            b["titles"].append(title)
        b["all"].append(rec)
    out = []
    for label, b in blocks.items():
        recs = b["all"]
        counts = {st: sum(1 for r in recs if r["status"] == st) for st in STATUSES}
        head = [r for r in recs if str(r.get("headline", "")).lower() in ("true", "1")] or recs[:6]
        shown = head[:SUMMARY_ROWS]
        nums = ref_numbers(label)
        sections = [it for it in items if nums and ref_numbers(it.spec.paper_ref) & nums]
        exact = [it for it in sections if ref_numbers(it.spec.paper_ref) == nums]
        measured = [r for r in head if r["status"] != NOT_MEASURED] or [r for r in recs if r["status"] != NOT_MEASURED]
        out.append({
            "label": label, "title": "; ".join(b["titles"]), "counts": counts, "total": len(recs),
            "rows": [{**r, **claim_cells(r)} for r in shown], "more": len(recs) - len(shown),
            "headline": {**(measured or head)[0], **claim_cells((measured or head)[0])},
            "measured": counts[NOT_MEASURED] < len(recs),
            "statement": exact[0].spec.paper_statement if exact else "",
            "sections": list(dict.fromkeys(it.spec.name for it in sections)),
            "order": min(nums) + (0.5 if len(nums) > 1 else 0) if nums else 999,
        })
    out.sort(key=lambda b: (b["order"], b["label"]))
    return out


def standin_rows(run_config: dict) -> list[dict]:
    """One row per experiment that stands in for a paper experiment: which one, and which Hugging Face
    models its target and drafters are shaped like (their build kinds)."""
    def shaped(source: dict | None) -> str:
        kind = ((source or {}).get("build") or {}).get("kind")
        return STANDINS[kind].shaped_like if kind in STANDINS else (kind or "")

    rows = []
    models = run_config.get("models", {})
    for e in run_config.get("experiments", []):
        if not e.get("stands_in_for"):
            continue
        m = models.get(e["model"], {})
        used = {x["method"] for x in e["methods"]}
        drafters = [f"{meth}: {shaped(d.get('source')) or ('built into the target' if d.get('builtin') else '')}"
                    for meth, d in (m.get("drafters") or {}).items() if meth in used]
        rows.append({"experiment": e["name"], "stands_in_for": e["stands_in_for"], "model": e["model"],
                     "shaped_like": shaped(m.get("source")), "drafters": drafters})
    return rows


def render(
    template_dir: str | Path,
    run_config: dict,
    provenance: dict,
    claims: pd.DataFrame,
    items: list[Item],
    inputs: list[dict],
    template: str = "report.tex.j2",
) -> str:
    env = make_env(template_dir)
    claims = claims.copy()
    for col, default in (("kind", "value"), ("claim", ""), ("headline", False), ("decided_on", "")):
        if col not in claims:
            claims[col] = default
    status_counts = claims.groupby("status").size().to_dict() if len(claims) else {}
    claim_groups = []
    for group, grp in claims.groupby("group", sort=False):
        claim_groups.append({"name": group, "rows": [{**r, **claim_cells(r)} for r in grp.to_dict("records")]})
    summaries = figure_summaries(claims, items)
    standins = standin_rows(run_config)
    sections = layout(items, summaries, run_config, keep=("run", "exercise") if standins else ("run",))
    few = {n: k for n, k in too_few_requests(run_config).items() if subject_role(n, run_config) != STANDIN}
    return env.get_template(template).render(
        run=run_config["run"],
        config=run_config,
        prov=provenance,
        claims=claims.to_dict("records"),
        claim_groups=claim_groups,
        status_counts=status_counts,
        statuses={"reproduced": REPRODUCED, "consistent": CONSISTENT, "not_reproduced": NOT_REPRODUCED,
                  "not_measured": NOT_MEASURED},
        rules=rule_counts(claims),
        decided=RULES,
        summaries=summaries,
        sections=sections,
        items=items,
        inputs=inputs,
        not_run=methods_not_run(run_config),
        standins=standins,
        standin_figures=bool((run_config.get("report") or {}).get("standin_figures")),
        few_requests=[{"label": run_config["trace_sets"][n].get("label", n), "requests": k} for n, k in few.items()],
        min_requests=MIN_REQUESTS,
        min_interval_requests=MIN_INTERVAL_REQUESTS,
        per_request=[figreg.spec(n).title for n in PER_REQUEST],
    )


def latexmk(tex: Path) -> Path:
    """Compile ``tex`` in its own directory; raise with the first LaTeX error line on failure."""
    if not shutil.which("latexmk"):
        raise SpecReproError(
            "latexmk not found: install LaTeX (Debian/Ubuntu: apt-get install latexmk texlive-latex-base "
            "texlive-latex-recommended texlive-fonts-recommended)"
        )
    env = dict(os.environ)
    env.setdefault("SOURCE_DATE_EPOCH", "0")
    env.setdefault("FORCE_SOURCE_DATE", "1")
    proc = subprocess.run(
        ["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "-file-line-error", tex.name],
        cwd=tex.parent, capture_output=True, text=True, env=env,
    )
    pdf = tex.with_suffix(".pdf")
    if proc.returncode != 0 or not pdf.exists():
        log = tex.with_suffix(".log")
        text = log.read_text(errors="replace") if log.exists() else proc.stdout + proc.stderr
        first = next((ln for ln in text.splitlines() if ln.startswith("!") or ".tex:" in ln), "unknown error")
        raise SpecReproError(f"LaTeX failed on {tex}: {first.strip()} (full log: {log})")
    return pdf


def build_report(
    run_config_path: str | Path,
    claims_csv: str | Path,
    figure_paths: Sequence[str | Path],
    manifest: str | Path | None,
    template_dir: str | Path,
    tex_out: str | Path,
    pdf_out: str | Path,
    repo: str | Path,
) -> None:
    run_config = read_json(run_config_path)
    tex_out = Path(tex_out)
    tex_out.parent.mkdir(parents=True, exist_ok=True)
    claims = pd.read_csv(claims_csv, keep_default_na=False, na_values=[""])
    items = build_items(figure_paths, run_config, tex_out.parent)
    inputs = read_json(manifest)["inputs"] if manifest else []
    text = render(template_dir, run_config, prov.collect(repo), claims, items, inputs)
    write_text(tex_out, text)
    pdf = latexmk(tex_out)
    try:
        problems = layout_problems(tex_out)
    except ImportError:  # pypdf (the test extra) reads the pages; without it the log's check alone
        problems = [f"Overfull \\hbox {pt:.1f}pt {where}" for pt, where in
                    overfull_boxes(tex_out.with_suffix(".log").read_text(errors="replace"))]
    for line in problems:
        print(f"layout: {line}", file=sys.stderr)
    with atomic_path(pdf_out) as tmp:
        shutil.copyfile(pdf, tmp)


#: most pages of a report's body (before the appendices): 25 until the closed loop's falsification table and the
#: hybrid's section joined a CPU run's body (26 pages on 2026-12-05); moving CPU-only material to the appendix is open
MAX_BODY_PAGES = 27


def page_counts(tex: str | Path) -> tuple[int | None, int]:
    """(body pages: those before the appendices, all pages) of a compiled report."""
    from pypdf import PdfReader

    tex = Path(tex)
    start = label_page(tex.with_suffix(".aux").read_text(errors="replace"), "appendix")
    return (start - 1 if start else None), len(PdfReader(str(tex.with_suffix(".pdf"))).pages)


def layout_problems(tex: str | Path) -> list[str]:
    """What a reader would see as wrong in a compiled report: lines or tables wider than the text
    (``Overfull \\hbox`` > 1 pt in the LaTeX log), blank or near-blank pages, text of a table or caption set below
    MIN_TEXT_PT (one line per page: the smallest size and its text), a body longer than MAX_BODY_PAGES."""
    tex = Path(tex)
    out = [f"Overfull \\hbox {pt:.1f}pt {where}" for pt, where in overfull_boxes(tex.with_suffix(".log").read_text(errors="replace"))]
    out += [f"page {p.page} is {100 * p.fill:.0f} % filled (< {100 * MIN_PAGE_FILL:.0f} %) and has no figure"
            for p in sparse_pages(tex.with_suffix(".pdf"))]
    small: dict[int, tuple[float, str]] = {}
    for page, pt, text in small_text(tex.with_suffix(".pdf")):
        if page not in small or pt < small[page][0]:
            small[page] = (pt, text)
    out += [f"page {page}: text set at {pt:.1f} pt (< {MIN_TEXT_PT} pt): {text[:40]!r}" for page, (pt, text) in small.items()]
    body, _ = page_counts(tex)
    if body is not None and body > MAX_BODY_PAGES:
        out.append(f"the body is {body} pages (at most {MAX_BODY_PAGES})")
    return out


def add_cli(sub) -> None:
    """Register ``specrepro report``."""
    p = sub.add_parser("report", help="render the LaTeX report and compile it with latexmk")
    p.add_argument("--run-config", required=True)
    p.add_argument("--claims", required=True)
    p.add_argument("--figures", nargs="*", default=[])
    p.add_argument("--manifest", help="every input with its revision and checksum (results/manifest.json)")
    p.add_argument("--templates", required=True)
    p.add_argument("--tex", required=True)
    p.add_argument("--pdf", required=True)
    p.add_argument("--repo", default=".")

    def run(a):
        build_report(a.run_config, a.claims, a.figures, a.manifest, a.templates, a.tex, a.pdf, a.repo)

    p.set_defaults(func=run)
