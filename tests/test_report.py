"""The report renders from its templates, escapes text, compiles with latexmk, and fails in one line."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from specrepro import figures as figreg
from specrepro.io import SpecReproError
from specrepro.latex import tex_breakable, tex_escape
from specrepro.report import Item, latexmk, render

from conftest import REPO

TEMPLATES = REPO / "paper" / "templates"


def test_tex_escape():
    assert tex_escape("50% of a_b & {c} #1 $2 ±3") == r"50\% of a\_b \& \{c\} \#1 \$2 $\pm$3"
    assert tex_breakable("F1-x.y") == r"F1-\allowbreak{}x.\allowbreak{}y"


def minimal(kind="cpu"):
    run_config = {
        "run": {"name": "t", "kind": kind, "description": "A test run with 100% & more_symbols."},
        "report": {"title": "Test report"},
        "config_files": ["config/cpu.yaml"],
        "config_hash": "abc",
    }
    prov = {"date": "2026-01-01 00:00 UTC", "git": {"commit": "deadbeef", "dirty": False}, "host": "h", "os": "Linux",
            "python": "3.11", "cpu": "x", "cpu_count": 2, "memory_gib": 1.0, "gpus": [], "packages": {"pandas": "3"}}
    claims = pd.DataFrame([
        {"id": "C1", "group": "Fig. 7", "statement": "a_b", "paper_value": 1.0, "unit": "x", "source": "Fig. 7",
         "tolerance": "±10%", "evidence": "trace", "measured_by": "k", "this_run": 1.05, "status": "reproduced", "note": ""},
        {"id": "C2", "group": "Fig. 1", "statement": "c", "paper_value": 2.0, "unit": "x", "source": "Fig. 1",
         "tolerance": "±10%", "evidence": "engine", "measured_by": "k2", "this_run": float("nan"),
         "status": "not measured in this run", "note": ""},
    ])
    return run_config, prov, claims


def test_render_cpu_banner_and_claims():
    run_config, prov, claims = minimal("cpu")
    tex = render(TEMPLATES, run_config, prov, claims, [], [])
    assert r"\textbf{This is a CPU run.}" in tex
    assert r"100\% \& more\_symbols" in tex
    assert r"reproduced \textcolor{ok}{1}" in tex and r"did not measure \textcolor{none}{1}" in tex
    gpu = render(TEMPLATES, *minimal("gpu")[:1], prov, claims, [], [])
    assert "This is a CPU run" not in gpu


@pytest.mark.skipif(shutil.which("latexmk") is None, reason="latexmk not installed")
def test_compiles_with_a_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_path = tmp_path / "figures" / "fig07_request_span-toy.pdf"
    fig_path.parent.mkdir()
    plt.figure(figsize=(2, 1)).savefig(fig_path)
    run_config, prov, claims = minimal()
    item = Item(figreg.spec("fig07_request_span"), "toy", "Toy", "../figures/fig07_request_span-toy.pdf", "Caption 5%.")
    build = tmp_path / "build"
    build.mkdir()
    tex = build / "report.tex"
    tex.write_text(render(TEMPLATES, run_config, prov, claims, [item], []))
    pdf = latexmk(tex)
    assert pdf.read_bytes().startswith(b"%PDF")


@pytest.mark.skipif(shutil.which("latexmk") is None, reason="latexmk not installed")
def test_latex_error_is_one_line(tmp_path):
    tex = tmp_path / "bad.tex"
    tex.write_text("\\documentclass{article}\\begin{document}\\undefinedmacro\\end{document}\n")
    with pytest.raises(SpecReproError) as exc:
        latexmk(tex)
    assert "Undefined control sequence" in str(exc.value) and "\n" not in str(exc.value)


def test_methods_the_run_does_not_cover_are_named():
    from specrepro.report import methods_not_run

    cfg = {"experiments": [{"methods": [{"method": "none"}, {"method": "ngram"}, {"method": "eagle"},
                                        {"method": "eagle3"}, {"method": "draft_model"}]}]}
    (mtp,) = methods_not_run(cfg)
    assert mtp["method"] == "mtp" and "MTP layers" in mtp["reason"]
    assert methods_not_run({"experiments": []}) == []


def test_report_names_the_paper_experiment_of_each_standin(tmp_path):
    import yaml

    from specrepro.report import standin_rows

    cpu = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    rows = {r["experiment"]: r for r in standin_rows(cpu)}
    assert {r["stands_in_for"] for r in rows.values()} == {
        "llama3.1-8b", "llama3-70b", "qwen3-8b", "qwen3-8b-thinking", "glm-4.5-air"}
    l70 = next(r for r in rows.values() if r["stands_in_for"] == "llama3-70b")
    assert l70["shaped_like"] == "meta-llama/Meta-Llama-3-70B-Instruct"
    assert "draft_model: meta-llama/Llama-3.2-1B-Instruct" in l70["drafters"]
    glm = next(r for r in rows.values() if r["stands_in_for"] == "glm-4.5-air")
    assert glm["drafters"] == ["mtp: built into the target"]
    l31 = rows["standin-llama3.1-8b"]
    assert l31["drafters"] == ["eagle: yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "eagle3: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                               "draft_model: copy-of-target"]  # the self-draft counter check rides along
    run_config, prov, claims = minimal("cpu")
    run_config.update(models=cpu["models"], experiments=cpu["experiments"])
    tex = render(TEMPLATES, run_config, prov, claims, [], [])
    assert r"Stand-ins for the paper's experiments" in tex and r"\texttt{qwen3-8b-thinking}" in tex
    assert r"Qwen3-\allowbreak{}0.\allowbreak{}6B" in tex
    if shutil.which("latexmk"):
        (tmp_path / "r.tex").write_text(tex)
        assert latexmk(tmp_path / "r.tex").read_bytes().startswith(b"%PDF")
