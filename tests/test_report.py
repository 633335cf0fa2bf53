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
    mtp, suffix = methods_not_run(cfg)
    assert mtp["method"] == "mtp" and "MTP layers" in mtp["reason"]
    assert suffix["method"] == "suffix" and "arctic-inference" in suffix["reason"]
    assert methods_not_run({"experiments": []}) == []
