"""The LaTeX report: jinja2 templates -> ``report.tex`` -> latexmk -> ``paper/report.pdf``."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import jinja2
import pandas as pd

from . import figures as figreg
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
        items.append(Item(spec, subject, info.get("label", subject), rel, spec.caption.format_map(fmt)))
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
    "mtp": "needs a target with MTP layers (GLM-4.5-Air in config/paper.yaml); vllm-cpu has no such tiny model. "
           "Its speculative_config is checked by the tests and the paper DAG's dry run",
    "suffix": "is GPU-only here (experiment llama3.1-8b-today, vLLM 0.34.0): vllm-cpu 0.32 runs suffix decoding "
              "only through arctic-inference 0.1.1, a source-only package whose build pins torch 2.7.0, so it is "
              "not installed. Its arguments are checked against vLLM 0.34.0's source; the simulator covers it "
              "on the released traces",
}
SD_METHODS = ("ngram", "eagle", "eagle3", "draft_model", "mtp", "suffix")


def methods_not_run(run_config: dict) -> list[dict]:
    """SD methods of the paper's grid that no experiment of this run uses, with the reason where known."""
    used = {m["method"] for e in run_config.get("experiments", []) for m in e["methods"]}
    return [{"method": m, "reason": NOT_RUN_REASON.get(m, "not in this config's experiments")}
            for m in SD_METHODS if m not in used and run_config.get("experiments")]


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
    status_counts = claims.groupby("status").size().to_dict() if len(claims) else {}
    claim_groups = []
    for group, grp in claims.groupby("group", sort=False):
        claim_groups.append({"name": group, "rows": grp.to_dict("records")})
    return env.get_template(template).render(
        run=run_config["run"],
        config=run_config,
        prov=provenance,
        claims=claims.to_dict("records"),
        claim_groups=claim_groups,
        status_counts=status_counts,
        items=items,
        inputs=inputs,
        not_run=methods_not_run(run_config),
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
