"""The independent digitiser: figures drawn here with known values are read back; the paper's own figure
images agree with the registry; matching readings to claims; the verb and the report table."""

from __future__ import annotations

import ast
import hashlib
import math
import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from specrepro.analysis.digitise.agreement import (  # noqa: E402
    agreement, claim_figure, image_facts, load_image_origins, nearest_tolerance, summary,
)
from specrepro.analysis.digitise.axes import Tick, calibrate, read_glyphs  # noqa: E402
from specrepro.analysis.digitise.bars import read_bars  # noqa: E402
from specrepro.analysis.digitise.image import Picture, components, load_image  # noqa: E402
from specrepro.analysis.digitise.layouts import Layout  # noqa: E402
from specrepro.analysis.digitise.read import read_markers  # noqa: E402
from specrepro.analysis.claims import Claim, load_claims  # noqa: E402
from specrepro.cli import main  # noqa: E402
from specrepro.core.io import SpecReproError, write_json  # noqa: E402

from conftest import REPO  # noqa: E402

PAPER_FIGURES = (REPO / ".." / "shared" / "reference" / "figures").resolve()
XS = [1, 8, 16, 32, 64, 128]
LINE_SERIES = {"k=1": ("#1f77b4", "o", "-"), "k=3": ("#ff7f0e", "s", "-"), "k=5": ("#2ca02c", "D", "-"),
               "Oracle": ("#d62728", "*", ":")}


def line_figure(path: Path, dpi: int, antialiased: bool) -> dict:
    """Two panels of four series (values on a 0.01 grid) with a legend above, as the paper draws Fig. 10."""
    rng = np.random.default_rng(1)
    truth = {}
    with plt.rc_context({"lines.antialiased": antialiased, "patch.antialiased": antialiased,
                         "text.antialiased": antialiased}):
        fig, axes = plt.subplots(1, 2, figsize=(6, 2.6))
        for j, ax in enumerate(axes):
            base = np.sort(rng.uniform(1.0, 2.4, len(XS)))[::-1]
            for i, (label, (color, marker, ls)) in enumerate(LINE_SERIES.items()):
                ys = np.round(base * (0.8 + 0.1 * i) + 0.02 * i, 2)
                truth[("ab"[j], label)] = dict(zip(map(str, XS), ys))
                ax.plot(XS, ys, color=color, marker=marker, linestyle=ls, markersize=10 if marker == "*" else 6,
                        linewidth=1.5 if marker == "*" else 2.5, alpha=0.8, label=label)
            ax.set_xticks(XS)
            ax.grid(True, linestyle="--", alpha=0.6)
            ax.set_xlabel("Batch Size")
            ax.set_ylabel("Speedup")
        h, lab = axes[0].get_legend_handles_labels()
        fig.legend(h, lab, loc="upper center", ncol=4)
        fig.tight_layout(rect=(0, 0, 1, 0.88))
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
    return truth


LINE_LAYOUT = Layout("Fig. X", "line.png", "markers", panels=(({"panel": "a"}, {"panel": "b"}),),
                        series={k: {"s": k} for k in LINE_SERIES}, key="t.{panel}.{s}.b{x}")


@pytest.mark.parametrize("dpi,antialiased", [(240, False), (150, True)])
def test_reads_known_markers_back(tmp_path, dpi, antialiased):
    truth = line_figure(tmp_path / "line.png", dpi, antialiased)
    df = read_markers(Picture.of(load_image(tmp_path / "line.png")), LINE_LAYOUT)
    assert len(df) == 2 * 4 * len(XS)
    assert set(df["x"]) == set(map(str, XS))  # the x tick labels were read, not assumed
    assert dict(zip(df["series"], df["marker"])) == {"k=1": "o", "k=3": "s", "k=5": "D", "Oracle": "*"}
    err_px = np.array([abs(r.read - truth[(r.panel, r.series)][r.x]) * r.px_per_unit
                       for r in df.itertuples() if r.readable])
    # every readable marker within a pixel and a half of where it was drawn
    assert len(err_px) >= 0.7 * len(df) and err_px.max() <= 1.5
    assert set(df[df["readable"]]["series"]) == set(LINE_SERIES)


def test_overlapping_markers_are_not_readable(tmp_path):
    """Two series of one colour and shape drawn on the same points: neither is told apart, none is readable."""
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(XS, [2.0, 1.9, 1.8, 1.6, 1.4, 1.2], color="#1f77b4", marker="o", label="k=1")
    ax.plot(XS, [2.0, 1.9, 1.8, 1.6, 1.4, 1.2], color="#1f77b4", marker="s", label="k=3")
    ax.set_xticks(XS)
    fig.legend(loc="upper center", ncol=2)
    fig.tight_layout(rect=(0, 0, 1, 0.85))
    fig.savefig(tmp_path / "o.png", dpi=200)
    plt.close(fig)
    layout = Layout("Fig. X", "o.png", "markers", panels=(({"panel": "a"},),),
                       series={"k=1": {"s": "1"}, "k=3": {"s": "3"}}, key="t.{s}.b{x}")
    df = read_markers(Picture.of(load_image(tmp_path / "o.png")), layout)
    circles = df[df["series"] == "k=1"]
    # the circles lie under the squares: a circle fits inside a square, but the square fits it better
    assert not circles["readable"].any()
    assert df[df["series"] == "k=3"]["readable"].all()


def bar_figure(path: Path, dpi: int) -> dict:
    rng = np.random.default_rng(2)
    truth, groups = {}, ["1", "8", "16"]
    colors = {"None": "#1f77b4", "N-gram": "#ff7f0e", "EAGLE-3": "#2ca02c"}
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.8))
    for j, ax in enumerate(axes):
        base = np.array([150, 800, 1200]) * (1 + 0.3 * j)
        for i, (label, c) in enumerate(colors.items()):
            v = np.round(base * (1 + 0.35 * i) + rng.uniform(-20, 20, 3))
            truth.update({("ab"[j], label, g): float(x) for g, x in zip(groups, v)})
            ax.bar(np.arange(3) + (i - 1) * 0.27, v, width=0.27, color=c, edgecolor="black", linewidth=0.6,
                   label=label)
        ax.set_xticks(range(3), groups)
        ax.legend(title="Method", loc="upper left")
        ax.set_ylabel("Throughput (tokens/sec)")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return truth


def test_reads_known_bars_back(tmp_path):
    truth = bar_figure(tmp_path / "bars.png", 150)
    layout = Layout("Fig. Y", "bars.png", "bars", panels=(({"panel": "a"}, {"panel": "b"}),),
                       series={"None": {"config": "none"}, "N-gram": {"config": "ngram"},
                               "EAGLE-3": {"config": "eagle3"}, "MTP": {"config": "mtp"}},
                       key="t.{panel}.{config}.{quantity}.b{x}", quantity="throughput")
    df = read_bars(Picture.of(load_image(tmp_path / "bars.png")), layout)
    tput = df[df["quantity"] == "throughput"]
    assert len(tput) == 18 and tput["readable"].all()
    # the renderer snaps bar edges to the pixel grid: within a pixel and a half, half a pixel on average
    err_px = np.array([abs(r.read - truth[(r.panel, r.series, r.x)]) * r.px_per_unit for r in tput.itertuples()])
    assert err_px.max() <= 1.5 and err_px.mean() <= 0.75
    sp = df[df["quantity"] == "speedup"].set_index(["panel", "series", "x"])["read"]
    assert len(sp) == 12
    assert sp[("a", "EAGLE-3", "8")] == pytest.approx(truth[("a", "EAGLE-3", "8")] / truth[("a", "None", "8")],
                                                       rel=0.01)
    assert df[df["quantity"] == "speedup"]["key"].str.startswith("t.a.ngram.speedup.b").sum() == 3


@pytest.mark.parametrize("text", ["2.75", "1.00", "0.95", "128", "10000", "16"])
def test_reads_numbers_glyph_by_glyph(tmp_path, text):
    fig = plt.figure(figsize=(1.2, 0.5), dpi=200)
    fig.text(0.5, 0.5, text, ha="center", va="center", fontsize=9)
    fig.savefig(tmp_path / "n.png")
    plt.close(fig)
    pic = Picture.of(load_image(tmp_path / "n.png"))
    glyphs = components(pic.text)
    assert read_glyphs(glyphs) == text


def test_calibration_needs_two_numbers_on_a_line():
    ticks = [Tick(100.0, 4), Tick(200.0, 4), Tick(300.0, 4)]
    ax = calibrate(ticks, ["2.0", "1.5", "1.0"], "y")
    assert ax.value(250.0) == pytest.approx(1.25) and ax.pixel(1.5) == pytest.approx(200.0)
    with pytest.raises(SpecReproError, match="do not lie on a line"):
        calibrate(ticks, ["2.0", "1.5", "0.5"], "y")
    with pytest.raises(SpecReproError, match="fewer than two"):
        calibrate(ticks, ["2.0", "", "x"], "y")


def test_the_reading_knows_no_registry_or_simulator():
    """Independence: the digitiser imports neither the claims registry nor the simulator."""
    trees = [ast.parse(f.read_text()) for f in (REPO / "src" / "specrepro" / "analysis" / "digitise").glob("*.py")]
    assert len(trees) >= 10  # the package's modules: __init__, image, axes, ..., verbs
    imported = {n.module or "" for t in trees for n in ast.walk(t) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for t in trees for n in ast.walk(t) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if any(k in m for k in ("claims", "simulator", "costmodel", "_sim"))}


def test_the_verb_module_loads_nothing_heavy():
    """The CLI registers the verb from ``verbs`` (``add_cli``); numpy, pandas, matplotlib, PIL load when it runs."""
    code = ("import sys, argparse; from specrepro.analysis.digitise import verbs; "
            "verbs.add_cli(argparse.ArgumentParser().add_subparsers()); "
            "print(sorted(m for m in ('numpy', 'pandas', 'matplotlib', 'PIL', 'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert out.stdout.strip() == "[]", out.stdout


def _claim(cid, value, source, key, abs_tol=0.005, rel=None):
    return Claim(id=cid, group="g", statement="s", value=value, unit="x", source=source, tolerance_abs=abs_tol,
                 tolerance_rel=rel, evidence="simulator", measured_by=key)


def test_agreement_matches_figure_panel_and_key():
    readings = pd.DataFrame([
        {"figure": "Fig. 10", "panel": "a", "series": "k=1", "x": "1", "quantity": "speedup", "key": "k1",
         "read": 1.423, "readable": True, "why": ""},
        {"figure": "Fig. 10", "panel": "a", "series": "k=3", "x": "1", "quantity": "speedup", "key": "k3",
         "read": 1.80, "readable": True, "why": ""},
        {"figure": "Fig. 10", "panel": "a", "series": "k=5", "x": "1", "quantity": "speedup", "key": "k5",
         "read": 9.0, "readable": False, "why": "partly hidden"},
        {"figure": "Fig. 12", "panel": "a", "series": "k=1_N-gram", "x": "1", "quantity": "speedup", "key": "k1",
         "read": 1.43, "readable": True, "why": ""},
    ])
    claims = [_claim("A", 1.42, "Fig. 10(a), digitised", "k1"), _claim("A2", 1.42, "Fig. 10(a); text", "k1"),
              _claim("B", 1.86, "Fig. 10(a)", "k3"), _claim("C", 2.10, "Fig. 10(b)", "k5"),
              _claim("T", 2.2, "Sec. 6 text (~2.2x)", "k1", abs_tol=0.05)]
    a = agreement(readings, claims).set_index(["figure", "series"])
    assert a.loc[("Fig. 10", "k=1"), "claim_id"] == "A;A2" and a.loc[("Fig. 10", "k=1"), "agrees"] is True
    assert a.loc[("Fig. 10", "k=3"), "agrees"] is False
    assert a.loc[("Fig. 10", "k=3"), "difference"] == pytest.approx(-0.06)
    # a claim of another panel is not this marker's; an unreadable marker is not judged
    assert a.loc[("Fig. 10", "k=5"), "claim_id"] == "" and a.loc[("Fig. 10", "k=5"), "agrees"] is None
    # Fig. 12 replots the value: compared with Fig. 10's claim, not judged against it
    row = a.loc[("Fig. 12", "k=1_N-gram")]
    assert row["claim_id"] == "" and row["other_figure_claim"] == "A" and row["other_agrees"] is False
    s = summary(agreement(readings, claims), claims).set_index("figure")
    assert s.loc["Fig. 10", "judged"] == 2 and s.loc["Fig. 10", "agree"] == 1 and s.loc["Fig. 10", "rate"] == 0.5
    assert s.loc["Fig. 10", "claims"] == 4 and s.loc["Fig. 10", "claims_unread"] == 1  # C: its marker is hidden
    assert s.loc["Fig. 12", "other_judged"] == 1 and s.loc["Fig. 12", "other_agree"] == 0
    # the differences themselves, not only the verdict: |1.423 - 1.42| = 0.003 (A and A2), |1.80 - 1.86| = 0.06
    assert s.loc["Fig. 10", "median_abs_difference"] == pytest.approx(0.0315)
    assert s.loc["Fig. 10", "max_abs_difference"] == pytest.approx(0.06)
    assert (s.loc["Fig. 10", "tolerance_min"], s.loc["Fig. 10", "tolerance_max"]) == (0.005, 0.005)
    assert s.loc["Fig. 10", "max_share_of_tolerance"] == pytest.approx(12.0)
    near = nearest_tolerance(agreement(readings, claims), 1)
    assert near["claim_id"].tolist() == ["B"] and near["share_of_tolerance"].iloc[0] == pytest.approx(12.0)


def test_claim_figure_parsing():
    assert claim_figure("Fig. 10(a), digitised from the figure image") == ("Fig. 10", "a")
    assert claim_figure("Fig. 1, read from the vector figure") == ("Fig. 1", "")
    assert claim_figure("Fig. 3 / text") == ("Fig. 3", "")
    assert claim_figure("Sec. 4 text") == ("", "")


def test_verb_checks_the_images(tmp_path, capsys):
    line_figure(tmp_path / "paper-fig10.png", 100, False)
    rc = main(["digitise", "--figures", str(tmp_path), "--sha256", f"paper-fig10.png={'0' * 64}", "-o",
               str(tmp_path / "r.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and "paper-fig10.png: SHA-256" in err and "paper_figures.files" in err
    assert len(err.strip().splitlines()) == 1
    rc = main(["digitise", "--figures", str(tmp_path), "--sha256", f"paper-fig99.png={'0' * 64}", "-o",
               str(tmp_path / "r.csv")])
    assert rc == 2 and "no layout for paper-fig99.png" in capsys.readouterr().err
    assert not (tmp_path / "r.csv").exists()


@pytest.fixture(scope="module")
def paper_readings(tmp_path_factory):
    files = {f: hashlib.sha256((PAPER_FIGURES / f).read_bytes()).hexdigest()
             for f in ("paper-fig1.png", "paper-fig3.png", "paper-fig10.png", "paper-fig12.png")
             if (PAPER_FIGURES / f).exists()}
    if len(files) < 4:
        pytest.skip(f"the paper's figure images are not in {PAPER_FIGURES}")
    out = tmp_path_factory.mktemp("dig") / "readings.csv"
    assert main(["digitise", "--figures", str(PAPER_FIGURES), "--sha256", *[f"{k}={v}" for k, v in files.items()],
                 "--traceset", "h100-llama3.1-8b", "-o", str(out)]) == 0
    return out


def test_paper_figures_agree_with_the_registry(paper_readings):
    claims = load_claims(REPO / "paper" / "claims.yaml")
    from specrepro.figures.digitiser_table import load_readings

    a = agreement(load_readings(paper_readings), claims)
    s = summary(a, claims).set_index("figure")
    for fig in ("Fig. 10", "Fig. 12", "Fig. 1", "Fig. 3"):
        assert s.loc[fig, "rate"] >= 0.95, (fig, a[a["agrees"] == False])  # noqa: E712
    # most of each figure's claims are read (the rest hide under other markers)
    assert s.loc["Fig. 10", "judged"] >= 150 and s.loc["Fig. 12", "judged"] >= 20
    assert s.loc["Fig. 1", "judged"] >= 100 and s.loc["Fig. 3", "judged"] == 20
    # Fig. 12's replotted series agree with Fig. 10's claims as well
    assert s.loc["Fig. 12", "other_agree"] >= 0.95 * s.loc["Fig. 12", "other_judged"] > 40
    # readings without a claim are plausible speedups
    sp = a[a["readable"] & (a["quantity"] == "speedup")]["read"]
    assert sp.between(0.8, 5.1).all()


def test_digitiser_table(paper_readings, tmp_path):
    cfg = {"run": {"name": "t", "kind": "cpu"}, "subjects": {"paper": {"label": "the paper's figure images"}},
           "trace_sets": {}}
    write_json(tmp_path / "rc.json", cfg)
    assert main(["figure", "tab_digitiser", "--run-config", str(tmp_path / "rc.json"), "--subject", "paper",
                 "--readings", str(paper_readings), "--claims", str(REPO / "paper" / "claims.yaml"),
                 "--csv", str(tmp_path / "t.csv"), "-o", str(tmp_path / "t.tex")]) == 0
    tex = (tmp_path / "t.tex").read_text()
    assert tex.startswith(r"{\footnotesize") and "Fig. 10 & 160 &" in tex and "100.0\\%" in tex
    t = pd.read_csv(tmp_path / "t.csv", keep_default_na=False, na_values=[""])
    assert len(t) == len(pd.read_csv(paper_readings)) and set(t["figure"]) == {"Fig. 1", "Fig. 3", "Fig. 10", "Fig. 12"}
    # each figure's row shows how far its judged readings lie from the registry and the tolerance they are held to
    from specrepro.figures.digitiser_table import _num, _tol

    judged = t[t["agrees"].isin([True, "True"])]
    for fig, g in judged.groupby("figure"):
        d, tol = g["difference"].astype(float).abs(), g["tolerance"].astype(float)
        row = next(x for x in tex.splitlines() if x.startswith(f"{fig} & "))
        assert f"& {_num(d.median())} / {_num(d.max())} & {_tol(tol.min(), tol.max())} &" in row, row
    worst = judged.assign(share=judged["difference"].astype(float).abs() / judged["tolerance"].astype(float)) \
        .sort_values("share", ascending=False).iloc[0]
    assert f"{worst['claim_id']}" in tex and f"{float(worst['difference']):+.4f}" in tex
    assert "Where the images come from" not in tex  # without --images
    assert main(["figure", "tab_digitiser", "--run-config", str(tmp_path / "rc.json"), "--subject", "paper",
                 "--readings", str(paper_readings), "--claims", str(REPO / "paper" / "claims.yaml"),
                 "--images", str(REPO / "paper" / "figure_images.yaml"),
                 "--csv", str(tmp_path / "t3.csv"), "-o", str(tmp_path / "t3.tex")]) == 0
    tex3 = (tmp_path / "t3.tex").read_text()
    assert "Where the images come from" in tex3 and r"\texttt{599a1b7885940506}" in tex3
    assert "GPL Ghostscript 9.55.0" in tex3
    # a wrong registry value is listed as a disagreement
    claims = (REPO / "paper" / "claims.yaml").read_text().replace("  value: 2.73\n", "  value: 2.83\n", 1)
    (tmp_path / "claims.yaml").write_text(claims)
    assert main(["figure", "tab_digitiser", "--run-config", str(tmp_path / "rc.json"), "--subject", "paper",
                 "--readings", str(paper_readings), "--claims", str(tmp_path / "claims.yaml"),
                 "--csv", str(tmp_path / "t2.csv"), "-o", str(tmp_path / "t2.tex")]) == 0
    tex2 = (tmp_path / "t2.tex").read_text()
    assert "Disagreements" in tex2 and "2.830" in tex2
    assert not math.isnan(pd.read_csv(tmp_path / "t2.csv")["difference"].abs().max())


# --- where the images come from (issue 15, item 11) ----------------------------------------------------------


def test_every_config_image_has_a_recorded_origin():
    """paper/figure_images.yaml records every image a config reads, with the config's SHA-256, and says what is not
    known as 'unknown' (arXiv version, page) together with how to obtain and check an image."""
    import yaml

    images = load_image_origins(REPO / "paper" / "figure_images.yaml")
    for name in ("paper.yaml", "paper-quick.yaml", "cpu.yaml"):
        cfg = yaml.safe_load((REPO / "config" / name).read_text())
        files = (cfg.get("paper_figures") or {}).get("files") or {}
        for f, sha in files.items():
            assert images[f]["sha256"] == sha, (name, f)
    for f, rec in images.items():
        assert rec["arxiv_version"] == "unknown" and rec["page"] == "unknown"  # not recorded anywhere: not invented
        assert rec["dpi"] == 300 and rec["pixels"][0] == 2042
    text = (REPO / "paper" / "figure_images.yaml").read_text()
    assert "https://arxiv.org/abs/2601.11580" in text and "-r300" in text and "paper_figures.files" in text


def test_recorded_image_facts_are_the_files(tmp_path):
    """SHA-256, pixel size, dpi and the writing program recorded per image are what each file says about itself."""
    images = load_image_origins(REPO / "paper" / "figure_images.yaml")
    if not all((PAPER_FIGURES / f).exists() for f in images):
        pytest.skip(f"the paper's figure images are not in {PAPER_FIGURES}")
    for f, rec in images.items():
        got = image_facts(PAPER_FIGURES / f)
        assert got == {k: rec[k] for k in ("sha256", "pixels", "dpi", "software")}, f
        assert (rec["software"] is None) == ("unknown" in rec["rasterised"]), f
    # the reader itself, on an image written here: 2 x 3 px at 150 dpi, a Software chunk
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text("Software", "test writer 1.0")
    Image.new("RGB", (2, 3)).save(tmp_path / "x.png", dpi=(150, 150), pnginfo=info)
    got = image_facts(tmp_path / "x.png")
    assert (got["pixels"], got["dpi"], got["software"]) == ([2, 3], 150, "test writer 1.0")
    assert got["sha256"] == hashlib.sha256((tmp_path / "x.png").read_bytes()).hexdigest()


def test_an_origin_record_without_its_fields_is_one_line(tmp_path):
    from specrepro.core.io import SpecReproError

    (tmp_path / "o.yaml").write_text("images:\n  paper-fig1.png: {figure: 'Fig. 1', sha256: abc}\n")
    with pytest.raises(SpecReproError, match="lacks pixels, dpi, software, arxiv_version, page, rasterised"):
        load_image_origins(tmp_path / "o.yaml")
