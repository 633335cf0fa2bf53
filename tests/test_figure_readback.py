"""What the figures plot, read back from their matplotlib artists, against the CSVs they write, the inputs
they read and values computed here by hand (see tests/_figread.py). Intervals (error bars, bands) are
checked against the table's ``ci_low``/``ci_high`` wherever a panel draws them."""

from __future__ import annotations

import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from specrepro import cli  # noqa: E402
from specrepro.figures import style  # noqa: E402
from specrepro.core.io import write_json  # noqa: E402

import _figread as fr  # noqa: E402
from test_engine_figures import RUN_CONFIG as ENGINE_RC, engine_run  # noqa: E402,F401
from test_engine_figures2 import RUN_CONFIG as ENGINE_RC2, breakdown_run, costfit_run  # noqa: E402,F401
from test_figures import traceset  # noqa: E402,F401
from test_sim_figures import simulated  # noqa: E402,F401


def build(monkeypatch, *args) -> plt.Figure:
    with fr.captured(monkeypatch) as figs:
        assert cli.main([str(a) for a in args]) == 0
    assert len(figs) == 1
    return figs[0]


def pairs(series: fr.Series) -> dict:
    return dict(zip(series.x.tolist(), series.y.tolist()))


# --- the helpers themselves ------------------------------------------------------------------------------


def test_readers_return_what_was_drawn():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [4.0, 5.0, 6.0], color="#ff0000", marker="s", label="a")
    ax.axhline(1.0)
    ax.errorbar([1, 2], [2.0, 3.0], yerr=[[0.5, 0.25], [1.0, 0.75]], fmt="none", label="e")
    ax.fill_between([1, 2, 3], [0.1, 0.2, 0.3], [0.5, 0.6, 0.7], label="band")
    ax.bar([5, 6], [7.0, 8.0], bottom=[1.0, 0.0], label="bars")
    ax.scatter([1.5], [2.5])
    ax.text(2, 3, "2.00x")
    s = fr.series_by_label(ax)
    assert list(s) == ["a"] and pairs(s["a"]) == {1: 4.0, 2: 5.0, 3: 6.0} and s["a"].marker == "s"
    assert fr.hlines(ax) == [1.0]
    assert [(i.x, i.low, i.high) for i in fr.error_bars(ax)] == [(1, 1.5, 3.0), (2, 2.75, 3.75)]
    (label, xs, lo, hi), = fr.bands(ax)
    assert list(xs) == [1, 2, 3] and np.allclose(lo, [0.1, 0.2, 0.3]) and np.allclose(hi, [0.5, 0.6, 0.7])
    assert [(b.x, b.bottom, b.height) for b in fr.bars(ax)] == [(5, 1.0, 7.0), (6, 0.0, 8.0)]
    assert fr.scatter(ax)[0][0].tolist() == [[1.5, 2.5]]
    assert fr.texts(ax) == [(2, 3, "2.00x")]
    table = pd.DataFrame({"x": [1, 2, 3, 1, 2], "y_ci_low": [1.5, 2.75, 0.3, 0.1, 0.2],
                          "y_ci_high": [3.0, 3.75, 0.7, 0.5, 0.6]})
    expected = fr.table_intervals(table, "x", "y")
    assert len(expected) == 5 and fr.assert_intervals(ax, expected) == 5
    with pytest.raises(AssertionError, match="is not the table's"):
        fr.assert_intervals(ax, expected[1:])
    assert fr.table_intervals(table[["x"]], "x", "y") == []
    fig2, ax2 = plt.subplots()
    assert fr.assert_intervals(ax2, expected) == 0
    with pytest.raises(AssertionError, match="5 intervals in the table, 0 drawn"):
        fr.assert_intervals(ax2, expected, all_drawn=True)
    plt.close(fig2)
    plt.close(fig)


# --- Fig. 1: end-to-end speedup ------------------------------------------------------------------------


def test_fig01_lines_are_the_speedup_table(engine_run, monkeypatch, tmp_path):
    root, paths = engine_run
    rc = root / "rc-gpu.json"
    write_json(rc, {**ENGINE_RC, "run": {"name": "t", "kind": "gpu"}})
    claims = tmp_path / "claims.yaml"
    claims.write_text(
        "claims:\n- {id: X, group: g, statement: s, value: 1.4, unit: x, source: 'Fig. 1', tolerance: {rel: 0.1},\n"
        "   evidence: engine, measured_by: engine.e1.d1.ngram-k3.speedup.b1}\n")
    csv = tmp_path / "f1.csv"
    fig = build(monkeypatch, "figure", "fig01_speedup", "--run-config", rc, "--subject", "engine", "--points", *paths,
                "--csv", csv, "--claims", claims, "-o", tmp_path / "f1.pdf")
    (ax,) = fr.visible_axes(fig)
    s = fr.series_by_label(ax)
    # by hand (tests/test_engine_figures.py): n-gram 22.5/15 and 50/50; EAGLE 30/15 (one point failed), 75/50
    assert pairs(s["n-gram (k=3)"]) == pytest.approx({1: 1.5, 4: 1.0})
    assert pairs(s["EAGLE (k=3)"]) == pytest.approx({1: 2.0, 4: 1.5})
    t = pd.read_csv(csv)
    for label, cfg in (("n-gram (k=3)", "ngram-k3"), ("EAGLE (k=3)", "eagle-k3")):
        rows = t[(t["exp"] == "e1") & (t["dataset"] == "d1") & (t["config"] == cfg)].sort_values("batch_size")
        assert pairs(s[label]) == pytest.approx(dict(zip(rows["batch_size"], rows["speedup"])))
        assert s[label].color == to_hex(style.method_color(cfg.split("-")[0]))
    # whiskers, where drawn, are the table's intervals, one per point of at least 8 requests (issue 24, item 4: the
    # fixture's points have fewer, so none is drawn and the footnote says so)
    enough = t[t["requests"] >= 8]
    expected = [iv for cfg in ("ngram-k3", "eagle-k3")
                for iv in fr.table_intervals(enough[(enough["exp"] == "e1") & (enough["config"] == cfg)], "batch_size",
                                             "speedup")]
    fr.assert_intervals(ax, expected, all_drawn=True)
    assert not expected and t["speedup_ci_low"].notna().any()
    assert any("fewer than 8 requests" in x.get_text() and "show no interval" in x.get_text() for x in fig.texts)
    assert fr.hlines(ax) == [1.0]
    # the paper's value is a ring at its batch size, in the configuration's colour
    (pts, face, edge), = fr.scatter(ax)
    assert pts.tolist() == [[1.0, 1.4]] and to_hex(edge[0]) == to_hex(style.method_color("ngram"))
    assert ax.get_title().endswith("Data One")


# --- Fig. 3: reasoning throughput ------------------------------------------------------------------------


def test_fig03_bars_are_the_throughput_table(engine_run, monkeypatch, tmp_path):
    root, paths = engine_run
    csv = tmp_path / "f3.csv"
    fig = build(monkeypatch, "figure", "fig03_reasoning", "--run-config", root / "run_config.json", "--subject",
                "engine", "--points", *paths, "--csv", csv, "-o", tmp_path / "f3.pdf")
    (ax,) = fr.visible_axes(fig)
    got = {(b.label, round(b.x, 6)): b.height for b in fr.bars(ax)}
    # r1: no SD 100 and 180 tokens/s at B = 1, 2; MTP 150 and 200; two configurations share 0.8 of a slot
    assert got == pytest.approx({("no SD", -0.2): 100.0, ("no SD", 0.8): 180.0, ("MTP (k=3)", 0.2): 150.0,
                                 ("MTP (k=3)", 1.2): 200.0})
    assert all(b.bottom == 0 for b in fr.bars(ax))
    t = pd.read_csv(csv)
    t = t[t["exp"] == "r1"]
    assert sorted(got.values()) == pytest.approx(sorted(t["throughput"]))
    assert [lab.get_text() for lab in ax.get_xticklabels()] == ["1", "2"]
    # the speedup printed over each SD bar is the table's
    assert sorted((round(x, 6), s) for x, _, s in fr.texts(ax)) == [(0.2, "1.50x"), (1.2, "1.11x")]
    xpos = [{"none": -0.2, "mtp-k3": 0.2}[r.config] + [1, 2].index(r.batch_size) for r in t.itertuples()]
    expected = fr.table_intervals(t, xpos, "throughput")
    fr.assert_intervals(ax, expected, all_drawn=True)
    # room above the tallest bar or whisker
    assert ax.get_ylim()[1] == pytest.approx(1.25 * max([200.0] + [hi for _, _, hi in expected]))


# --- Fig. 4: time breakdown ------------------------------------------------------------------------------


def test_fig04_stacked_bars_are_the_shares(breakdown_run, monkeypatch, tmp_path):
    root, paths = breakdown_run
    rc = root / "rc2.json"
    write_json(rc, ENGINE_RC2)
    csv = tmp_path / "f4.csv"
    fig = build(monkeypatch, "figure", "fig04_breakdown", "--run-config", rc, "--subject", "engine",
                "--breakdown", *paths, "--csv", csv, "--metrics", tmp_path / "m.json", "-o", tmp_path / "f4.pdf")
    (ax,) = fr.visible_axes(fig)
    t = pd.read_csv(csv)
    drawn = {}
    for b in fr.bars(ax):
        drawn.setdefault(b.x, []).append((b.label, b.bottom, b.height))
    # four bars: no SD at x = 0, 1 (B = 1, 4), a gap, the draft model at 3, 4
    assert sorted(drawn) == [0, 1, 3, 4]
    assert [lab.get_text() for lab in ax.get_xticklabels()] == ["1", "4", "1", "4"]
    for x, (cfg, b) in zip([0, 1, 3, 4], [("none", 1), ("none", 4), ("draft_model-k3", 1), ("draft_model-k3", 4)]):
        row = t[(t["config"] == cfg) & (t["batch_size"] == b)].iloc[0]
        stack = drawn[x]
        assert [lab for lab, _, _ in stack] == ["Drafting", "Verification", "Sampling", "Overhead"]
        heights = [h for _, _, h in stack]
        assert heights == pytest.approx([row[f"{p}_pct"] for p in ("drafting", "verification", "sampling", "overhead")])
        # stacked: each phase starts where the one below ends, and they fill 100 %
        assert [bot for _, bot, _ in stack] == pytest.approx(np.cumsum([0] + heights[:-1]))
        assert sum(heights) == pytest.approx(100.0)
    # by hand: no SD at B = 1 verifies (8 + 27) / (10 + 30); the draft model drafts 4.5 of 10 s at B = 1
    assert drawn[0][1][2] == pytest.approx(87.5) and drawn[3][0][2] == pytest.approx(45.0)
    # whiskers, where drawn, sit on the phase's segment: its bottom plus the table's interval of the share
    expected = []
    for x, (cfg, b) in zip([0, 1, 3, 4], [("none", 1), ("none", 4), ("draft_model-k3", 1), ("draft_model-k3", 4)]):
        row = t[(t["config"] == cfg) & (t["batch_size"] == b)]
        for i, p in enumerate(("drafting", "verification", "sampling", "overhead")):
            expected += fr.table_intervals(row, [x], f"{p}_pct", offset=[drawn[x][i][1]])
    fr.assert_intervals(ax, expected)


# --- Figs. 5, 11, 7: released-trace figures --------------------------------------------------------------


def _expected(ds_n: int, kind: str, max_pos: int = 16) -> np.ndarray:
    """Per-position matrices of the ``traceset`` fixture (tests/test_figures.py), rows by output length."""
    m = np.full((ds_n, max_pos), np.nan)
    for i in range(ds_n):
        n = 4 + i
        ng = np.array([1 + (j % 3) for j in range(n)], dtype=float)
        ea = np.full(3 + i, 2.0)
        if kind == "ngram":
            m[i, :n] = ng
        elif kind == "eagle":
            m[i, :3 + i] = ea
        else:
            m[i, :3 + i] = ng[:3 + i] - ea
    return m


def _trace_fig(monkeypatch, tmp_path, paths, name, requests=True):
    args = ["figure", name, "--run-config", tmp_path / "run_config.json", "--subject", "toy",
            "--positions", *paths["positions"], "-o", tmp_path / f"{name}.pdf"]
    if requests:
        args += ["--requests", *paths["requests"]]
    return build(monkeypatch, *args)


def test_fig05_images_are_the_traces(traceset, monkeypatch):
    tmp_path, paths = traceset
    fig = _trace_fig(monkeypatch, tmp_path, paths, "fig05_acceptance_heatmap")
    axes = fr.visible_axes(fig)
    assert [ax.get_title() for ax in axes] == ["Alpha, n-gram", "Beta, n-gram", "Alpha, EAGLE", "Beta, EAGLE"]
    for ax, (n, kind) in zip(axes, [(5, "ngram"), (3, "ngram"), (5, "eagle"), (3, "eagle")]):
        (arr, extent), = fr.images(ax)
        want = np.ma.masked_invalid(_expected(n, kind))
        assert (arr.mask == want.mask).all() and np.array_equal(arr.compressed(), want.compressed())
        assert extent == (0, 16, n, 0)


def test_fig11_images_are_the_differences(traceset, monkeypatch):
    tmp_path, paths = traceset
    fig = _trace_fig(monkeypatch, tmp_path, paths, "fig11_acceptance_diff")
    for ax, n in zip(fr.visible_axes(fig), (5, 3)):
        (arr, _), = fr.images(ax)
        want = np.ma.masked_invalid(_expected(n, "diff"))
        # n-gram minus EAGLE where both traces have a value, nothing where either has none
        assert (arr.mask == want.mask).all() and np.array_equal(arr.compressed(), want.compressed())


def test_fig07_boxes_are_the_request_percentiles(traceset, monkeypatch):
    from specrepro.analysis.acceptance import request_mean_percentiles
    from specrepro.figures._data import load_concat

    tmp_path, paths = traceset
    fig = _trace_fig(monkeypatch, tmp_path, paths, "fig07_request_span", requests=False)
    claimed = request_mean_percentiles(load_concat(paths["positions"])).set_index(["dataset", "proposer"])
    for ax, (ds, n) in zip(fr.visible_axes(fig), (("alpha", 5), ("beta", 3))):
        boxes = fr.boxplot_stats(ax)
        assert [round(b["x"]) for b in boxes] == [0, 1]
        means = {"ngram": [np.mean([1 + (j % 3) for j in range(4 + i)]) for i in range(n)], "eagle": [2.0] * n}
        for b, prop in zip(boxes, ("ngram", "eagle")):
            drawn = (b["low"], b["q1"], b["median"], b["q3"], b["high"])
            # whiskers at the 5th and 95th percentiles, as the caption says and the claims' metrics compute
            assert drawn == pytest.approx(tuple(np.percentile(means[prop], [5, 25, 50, 75, 95])))
            assert drawn == pytest.approx(tuple(claimed.loc[(ds, prop), ["p5", "p25", "p50", "p75", "p95"]]))
        assert [t.get_text() for t in ax.get_xticklabels()] == ["n-gram", "EAGLE"]


# --- Figs. 9, 10, 12 and beyond the paper: the simulator ------------------------------------------------


def _paper_summaries(out) -> pd.DataFrame:
    df = pd.concat([pd.read_csv(p) for p in out["paper"]], ignore_index=True)
    return df[(df["batching"] == "replicate") & (df["pairing"] == "index") & (df["combine_cost"] == "ngram")]


def _sim_claims(tmp_path, keys: dict) -> str:
    lines = ["claims:"]
    for i, (k, v) in enumerate(keys.items()):
        lines.append(f"- {{id: c{i}, group: g, statement: s, value: {v}, unit: x, source: 'Fig. 10',"
                     f" tolerance: {{abs: 0.005}}, evidence: simulator, measured_by: {k}}}")
    p = tmp_path / "claims.yaml"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_fig10_lines_are_the_simulated_speedups(simulated, monkeypatch, tmp_path):
    tmp, out = simulated
    claims = _sim_claims(tmp_path, {"sim.toy.cnn.ngram.oracle.b1": 1.23, "sim.toy.gsm8k.eagle.fixed-3.b4": 0.97})
    fig = build(monkeypatch, "figure", "fig10_sim_speedup", "--run-config", tmp / "run_config.json", "--subject",
                "toy", "--summaries", *out["paper"], "--claims", claims, "-o", tmp_path / "f10.pdf")
    df = _paper_summaries(out)
    axes = fr.visible_axes(fig)
    assert len(axes) == 4
    rings = {}
    for ax, (prop, ds) in zip(axes, [("ngram", "cnn"), ("ngram", "gsm8k"), ("eagle", "cnn"), ("eagle", "gsm8k")]):
        s = fr.series_by_label(ax)
        assert list(s) == ["k=1", "k=3", "k=5", "Oracle"]
        for label, pol in zip(s, ("fixed-1", "fixed-3", "fixed-5", "oracle")):
            rows = df[(df["dataset"] == ds) & (df["proposer"] == prop) & (df["policy"] == pol)]
            assert pairs(s[label]) == pytest.approx(dict(zip(rows["batch_size"], rows["speedup"])))
        sub = df[(df["dataset"] == ds) & (df["proposer"] == prop)]
        fr.assert_intervals(ax, fr.table_intervals(sub, "batch_size", "speedup"))
        assert s["Oracle"].marker == "*" and s["Oracle"].linestyle == ":"
        for pts, _, _ in fr.scatter(ax):
            rings[(prop, ds)] = pts.tolist()
    assert rings == {("ngram", "cnn"): [[1.0, 1.23]], ("eagle", "gsm8k"): [[4.0, 0.97]]}


def test_fig12_lines_are_the_simulated_speedups(simulated, monkeypatch, tmp_path):
    tmp, out = simulated
    fig = build(monkeypatch, "figure", "fig12_oracle_combine", "--run-config", tmp / "run_config.json", "--subject",
                "toy", "--summaries", *out["paper"], "-o", tmp_path / "f12.pdf")
    df = _paper_summaries(out)
    for ax, ds in zip(fr.visible_axes(fig), ("cnn", "gsm8k")):
        s = fr.series_by_label(ax)
        assert len(s) == 9
        for prop, plabel in (("ngram", "n-gram"), ("eagle", "EAGLE")):
            for pol, klabel in (("fixed-1", "k=1"), ("fixed-3", "k=3"), ("fixed-5", "k=5"), ("oracle", "Oracle")):
                rows = df[(df["dataset"] == ds) & (df["proposer"] == prop) & (df["policy"] == pol)]
                assert pairs(s[f"{klabel} {plabel}"]) == pytest.approx(dict(zip(rows["batch_size"], rows["speedup"])))
        rows = df[(df["dataset"] == ds) & (df["proposer"] == "combined") & (df["policy"] == "oracle")]
        assert pairs(s["Oracle Combine"]) == pytest.approx(dict(zip(rows["batch_size"], rows["speedup"])))
        # Oracle Combine takes the longer acceptance at every position: never below either single oracle
        single = df[(df["dataset"] == ds) & (df["policy"] == "oracle") & (df["proposer"] != "combined")]
        best = single.groupby("batch_size")["speedup"].max()
        assert all(v >= best[b] - 1e-9 for b, v in pairs(s["Oracle Combine"]).items())
        fr.assert_intervals(ax, fr.table_intervals(df[df["dataset"] == ds], "batch_size", "speedup"))


def test_fig09_cells_are_the_csv(simulated, monkeypatch, tmp_path):
    tmp, out = simulated
    csv = tmp_path / "f9.csv"
    fig = build(monkeypatch, "figure", "fig09_bleu_ngram", "--run-config", tmp / "run_config.json", "--subject",
                "toy", "--batches", *out["batches"], "--bleu", *out["bleu"], "--csv", csv, "-o", tmp_path / "f9.pdf")
    cells = pd.read_csv(csv)
    axes = fr.visible_axes(fig)
    assert len(axes) == 4
    # one row per dataset, one column per n-gram k
    panels = [("fixed-3", "cnn"), ("fixed-5", "cnn"), ("fixed-3", "gsm8k"), ("fixed-5", "gsm8k")]
    for ax, (pol, ds) in zip(axes, panels):
        (arr, _), = fr.images(ax)
        c = cells[(cells["dataset"] == ds) & (cells["ngram_policy"] == pol)]
        bss = sorted(c["batch_size"].unique(), reverse=True)  # largest batch on top
        want = np.full((len(bss), 5), np.nan)
        for r in c.itertuples():
            want[bss.index(r.batch_size), int(round(r.bleu_low / 0.2))] = 100 * r.relative_improvement
        want = np.ma.masked_invalid(want)
        assert (arr.mask == want.mask).all() and np.allclose(arr.compressed(), want.compressed())
        # the printed percentages are the cells' (with the cell's interval, where the table has one)
        printed: dict = {}
        for x, y, t in fr.texts(ax):
            printed.setdefault((round(y), round(x)), []).append(t)
        # (issue 24, item 4: no interval printed over fewer than 8 requests)
        ci = {(bss.index(r.batch_size), int(round(r.bleu_low / 0.2))): (100 * r.ci_low, 100 * r.ci_high)
              for r in c.itertuples() if {"ci_low", "ci_high"} <= set(c.columns) and np.isfinite(r.ci_low)
              and r.requests >= 8}
        few = {(bss.index(r.batch_size), int(round(r.bleu_low / 0.2))) for r in c.itertuples() if r.requests < 8}
        for (y, x), v in np.ndenumerate(want.filled(np.nan)):
            if np.isfinite(v):
                # whole percent, no sign on a value that rounds to 0 ("-0" read as slower beside a "0" cell)
                n = round(v)
                assert (f"{n:+d}" if n else "0") in printed[(y, x)]
                if (y, x) in ci:
                    lo, hi = (round(b) for b in ci[(y, x)])
                    assert f"{lo}…{hi}" in printed[(y, x)]
                if (y, x) in few:
                    assert not any("…" in t for t in printed[(y, x)])
        assert [lab.get_text() for lab in ax.get_yticklabels()] == [str(b) for b in bss]


def test_fig_beyond_lines_are_the_beyond_table(simulated, monkeypatch, tmp_path):
    from specrepro.figures.sim_beyond_figure import LINES

    tmp, out = simulated
    csv = tmp_path / "beyond.csv"
    assert cli.main(["figure", "tab_sim_beyond", "--run-config", str(tmp / "run_config.json"), "--subject", "toy",
                     "--summaries", *map(str, out["paper"] + out["variants"]), "--csv", str(csv),
                     "-o", str(tmp_path / "beyond.tex")]) == 0
    fig = build(monkeypatch, "figure", "fig_sim_beyond", "--run-config", tmp / "run_config.json", "--subject", "toy",
                "--summaries", *out["paper"], *out["variants"], "-o", tmp_path / "fb.pdf")
    t = pd.read_csv(csv)
    for ax, ds in zip(fr.visible_axes(fig), ("cnn", "gsm8k")):
        s = fr.series_by_label(ax)
        assert set(s) == {label for *_, label in LINES.values()}
        for key, (color, ls, marker, label) in LINES.items():
            rows = t[(t["dataset"] == ds) & (t["row"] == key)]
            assert pairs(s[label]) == pytest.approx(dict(zip(rows["batch_size"], rows["speedup"])))
            assert s[label].color == color and s[label].marker == marker
        fr.assert_intervals(ax, fr.table_intervals(t[t["dataset"] == ds], "batch_size", "speedup"))
        # charging the winner's drafting cost can only cost time
        winner = pairs(s["winner's drafting cost"])
        assert all(winner[b] <= v + 1e-12 for b, v in pairs(s["Oracle Combine (paper)"]).items())


# --- the paper's question on today's engines (simulator) ------------------------------------------------


@pytest.fixture(scope="module")
def today(simulated):
    """The today stage on the simulated toy set: suffix traces, a fixed-k grid, schedules, today's simulations."""
    tmp, out = simulated
    summaries = list(out["paper"]) + [p for p in out["variants"] if "adaptive-" in p.name]
    grids = []
    for ds in ("cnn", "gsm8k"):
        st = tmp / f"today-{ds}.suffix.jsonl"
        assert cli.main(["suffix-trace", str(tmp / f"{ds}.jsonl"), "--dataset", ds, "-o", str(st)]) == 0
        common = ["--trace", str(st), "--dataset", ds, "--batch-sizes", "1", "4", "--num-requests", "10"]
        grid = tmp / f"today-grid-{ds}.csv"
        assert cli.main(["simulate", *common, "--proposer", "ngram", "eagle", "suffix", "--policy", "fixed-1",
                         "fixed-2", "fixed-3", "fixed-5", "-o", str(grid)]) == 0
        grids.append(grid)
    schedule = tmp / "today-schedule.json"
    assert cli.main(["k-schedule", "--grids", *map(str, grids), "-o", str(schedule)]) == 0
    for ds in ("cnn", "gsm8k"):
        common = ["--trace", str(tmp / f"today-{ds}.suffix.jsonl"), "--dataset", ds, "--batch-sizes", "1", "4",
                  "--num-requests", "10"]
        a, b = tmp / f"today-{ds}.csv", tmp / f"today-{ds}.today-suffix.csv"
        assert cli.main(["simulate", *common, "--proposer", "ngram", "eagle", "suffix", "--policy", "batch-schedule",
                         "--schedule", str(schedule), "-o", str(a)]) == 0
        assert cli.main(["simulate", *common, "--proposer", "suffix", "combined3", "--policy", "fixed-1", "fixed-3",
                         "fixed-5", "oracle", "-o", str(b)]) == 0
        summaries += [a, b]
    # as the rules pass them: the grids give the best fixed k over the schedules' own candidates
    return tmp, summaries + grids, schedule


def _all_summaries(paths) -> pd.DataFrame:
    df = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    df = df[(df["batching"] == "replicate") & (df["pairing"] == "index") & (df["combine_cost"] == "ngram")]
    # the grids repeat the paper summaries' fixed k = 1, 3, 5 (the same simulation): the first of each
    return df.drop_duplicates(["dataset", "proposer", "policy", "batch_size"])


def _today_table(monkeypatch, today, tmp_path):
    tmp, summaries, schedule = today
    csv = tmp_path / "today.csv"
    assert cli.main(["figure", "tab_today", "--run-config", str(tmp / "run_config.json"), "--subject", "toy",
                     "--summaries", *map(str, summaries), "--schedule", str(schedule), "--csv", str(csv),
                     "-o", str(tmp_path / "today.tex")]) == 0
    return pd.read_csv(csv), (tmp_path / "today.tex").read_text()


def test_tab_today_values_are_the_simulations_and_their_intervals(today, monkeypatch, tmp_path):
    from specrepro.analysis.today import METHODS, PAPER_FIXED

    t, tex = _today_table(monkeypatch, today, tmp_path)
    df = _all_summaries(today[1]).set_index(["dataset", "proposer", "policy", "batch_size"])
    assert len(t) == 4
    for r in t.itertuples():
        # by hand: the best of the paper's six fixed-k runs, with that run's own interval
        fixed = {(p, pol): df.loc[(r.dataset, p, pol, r.batch_size), "speedup"] for p, pol in PAPER_FIXED}
        (bp, bpol), best = max(fixed.items(), key=lambda kv: kv[1])
        assert (r.best_fixed, r.best_fixed_proposer, r.best_fixed_k) == (pytest.approx(best), bp, int(bpol[6:]))
        src = df.loc[(r.dataset, bp, bpol, r.batch_size)]
        assert (r.best_fixed_ci_low, r.best_fixed_ci_high) == pytest.approx((src["ci_low"], src["ci_high"]))
        oracle = r.combined3_oracle
        # by hand: the best n-gram/EAGLE fixed k of the grid's and the paper's k (1, 2, 3, 5), its own interval
        wide = {(p, pol): v for (d, p, pol, b), v in df["speedup"].items() if d == r.dataset and b == r.batch_size
                and p in ("ngram", "eagle") and pol.startswith("fixed-")}
        (wp, wpol), wbest = max(wide.items(), key=lambda kv: kv[1])
        assert {int(pol[6:]) for _, pol in wide} == {1, 2, 3, 5} and r.wide_candidates == "1, 2, 3, 5"
        assert (r.best_fixed_wide, r.best_fixed_wide_proposer, r.best_fixed_wide_k) == (
            pytest.approx(wbest), wp, int(wpol[6:]))
        wsrc = df.loc[(r.dataset, wp, wpol, r.batch_size)]
        assert (r.best_fixed_wide_ci_low, r.best_fixed_wide_ci_high) == pytest.approx((wsrc["ci_low"], wsrc["ci_high"]))
        for key, prop, pol, _ in METHODS:
            if not prop:
                continue
            row = df.loc[(r.dataset, prop, pol, r.batch_size)]
            assert getattr(r, key) == pytest.approx(row["speedup"])
            lo, hi = getattr(r, f"{key}_ci_low"), getattr(r, f"{key}_ci_high")
            assert (lo, hi) == pytest.approx((row["ci_low"], row["ci_high"]), nan_ok=True)
            assert lo <= getattr(r, key) <= hi or (lo == hi == 1.0)  # k = 0 of a schedule: exactly 1
            if key != "combined3_oracle":
                assert getattr(r, f"{key}_closed") == pytest.approx((row["speedup"] - best) / (oracle - best))
                assert getattr(r, f"{key}_closed_wide") == pytest.approx(
                    (row["speedup"] - wbest) / (oracle - wbest) if oracle > wbest else math.nan, nan_ok=True)
        # the tex row prints the two speedups with their intervals under them
        cell = "\\begin{tabular}[t]{@{}r@{}}%s\\\\{\\scriptsize [%.2f, %.2f]}\\end{tabular}"
        best_text = f"{r.best_fixed:.2f} ({'E' if bp == 'eagle' else 'n'}{r.best_fixed_k})"
        assert cell % (best_text, r.best_fixed_ci_low, r.best_fixed_ci_high) in tex
        wide_text = f"{r.best_fixed_wide:.2f} ({'E' if wp == 'eagle' else 'n'}{r.best_fixed_wide_k})"
        assert cell % (wide_text, r.best_fixed_wide_ci_low, r.best_fixed_wide_ci_high) in tex
        assert cell % (f"{oracle:.2f}", r.combined3_oracle_ci_low, r.combined3_oracle_ci_high) in tex
    # the statement up front carries the same intervals
    r = t[(t["dataset"] == "cnn") & (t["batch_size"] == 1)].iloc[0]
    assert (f"CNN/DM: at B = 1 the paper's best fixed k gives {r.best_fixed:.2f}x [{r.best_fixed_ci_low:.2f}, "
            f"{r.best_fixed_ci_high:.2f}] and the oracle {r.combined3_oracle:.2f}x [{r.combined3_oracle_ci_low:.2f}, "
            f"{r.combined3_oracle_ci_high:.2f}]") in tex


def test_fig_today_lines_and_bands_are_the_table(today, monkeypatch, tmp_path):
    from specrepro.figures.today_figure import BANDS, LINES

    tmp, summaries, _ = today
    t, _ = _today_table(monkeypatch, today, tmp_path)
    fig = build(monkeypatch, "figure", "fig_today", "--run-config", tmp / "run_config.json", "--subject", "toy",
                "--summaries", *summaries, "-o", tmp_path / "ft.pdf")
    axes = fr.visible_axes(fig)
    assert [ax.get_title() for ax in axes] == ["CNN/DM", "GSM8K"]
    for ax, ds in zip(axes, ("cnn", "gsm8k")):
        s = fr.series_by_label(ax)
        rows = t[t["dataset"] == ds].sort_values("batch_size")
        assert set(s) == {label for *_, label in LINES.values()}
        for key, (color, ls, marker, label) in LINES.items():
            assert pairs(s[label]) == pytest.approx(dict(zip(rows["batch_size"], rows[key])))
            assert (s[label].color, s[label].marker) == (to_hex(color), marker)
        # adding suffix to Oracle Combine can only add accepted tokens at the same drafting cost
        assert all(v >= pairs(s["Oracle Combine (n-gram, EAGLE)"])[b] - 1e-12
                   for b, v in pairs(s["Oracle Combine (+ suffix)"]).items())
        # a band behind each of BANDS' lines, each exactly that line's intervals from the table
        expected = [iv for key in BANDS for iv in fr.table_intervals(rows, "batch_size", key)]
        assert len(expected) == 2 * len(BANDS)
        fr.assert_intervals(ax, expected, all_drawn=True)
        assert fr.hlines(ax) == [1.0]


# --- the cost fit ----------------------------------------------------------------------------------------


def test_costfit_points_are_the_profiled_steps(costfit_run, monkeypatch, tmp_path):
    root, fits = costfit_run
    rc = root / "rc2.json"
    write_json(rc, ENGINE_RC2)
    fig = build(monkeypatch, "figure", "fig_costfit", "--run-config", rc, "--subject", "engine",
                "--reports", *[f / "cost_model.json" for f in fits.values()],
                "--residuals", *[f / "cost_model.residuals.csv" for f in fits.values()],
                "--csv", tmp_path / "fit.csv", "-o", tmp_path / "fit.pdf")
    axes = fr.visible_axes(fig)
    assert len(axes) == 4  # one row per experiment: measured vs fitted, residuals
    ax, axr = axes[0], axes[1]
    res = pd.read_csv(fits["e1"] / "cost_model.residuals.csv", dtype={"drafter": str}).fillna({"drafter": ""})
    drawn = fr.scatter(ax)
    # one scatter per role: target, then the EAGLE drafter; each point (fitted, measured) of the residual table
    assert len(drawn) == 2
    for (pts, _, _), (_, g) in zip(drawn, res.groupby(["role", "drafter"], sort=False)):
        assert np.allclose(np.sort(pts[:, 1]), np.sort(g["seconds"].to_numpy() * 1e3))
        assert np.allclose(pts[:, 0], pts[:, 1], rtol=1e-5)  # exactly linear steps: the fit returns them
    (eq,) = fr.lines(ax)
    assert np.allclose(eq.x, eq.y) and eq.x[0] <= res["seconds"].min() * 1e3
    rep = json.loads((fits["e1"] / "cost_model.json").read_text())
    assert f"target R$^2$ {rep['target']['r2']:.2f} (n={rep['target']['n_points']})" in axr.get_title()
    assert fr.hlines(axr) == [0.0]


def test_fig09_engine_bars_are_the_csv(monkeypatch, tmp_path):
    # two requests per bucket and batch size; n-gram at half EAGLE's throughput on low overlap, 1.5x on high
    rows = []
    for b in (1, 4):
        reqs = [(0.1, 5.0, 10.0), (0.15, 7.0, 14.0), (0.5, 15.0, 10.0), (0.55, 30.0, 20.0)]
        for r, (bleu, ng, ea) in enumerate(reqs):
            for cfg, tput in (("ngram-k3", ng * b), ("eagle-k3", ea * b)):
                rows.append({"exp": "x", "dataset": "ic", "config": cfg, "batch_size": b, "request_index": r,
                             "bleu4": bleu, "throughput": tput})
    pd.DataFrame(rows).to_csv(tmp_path / "bleu.csv", index=False)
    write_json(tmp_path / "rc.json", {**ENGINE_RC, "datasets": {"ic": {"label": "IC"}}})
    csv = tmp_path / "f9e.csv"
    fig = build(monkeypatch, "figure", "fig09_engine_bleu", "--run-config", tmp_path / "rc.json", "--subject",
                "engine", "--bleu", tmp_path / "bleu.csv", "--csv", csv, "-o", tmp_path / "f9e.pdf")
    (ax,) = fr.visible_axes(fig)
    drawn = {(b.label, round(b.x, 6)): b.height for b in fr.bars(ax)}
    # bucket 0 (BLEU 0-0.2) at x = 0, bucket 2 (0.4-0.6) at x = 2; B = 1 left of the bucket's centre, B = 4 right
    assert drawn == pytest.approx({("B=1", -0.2): -50.0, ("B=4", 0.2): -50.0, ("B=1", 1.8): 50.0, ("B=4", 2.2): 50.0})
    t = pd.read_csv(csv)
    assert sorted(drawn.values()) == pytest.approx(sorted(t["rel_pct"]))
    assert [lab.get_text() for lab in ax.get_xticklabels()][:3] == ["0.0-0.2\n(2)", "0.2-0.4\n(0)", "0.4-0.6\n(2)"]
    xpos = [r.bucket - 0.4 + 0.4 * ([1, 4].index(r.batch_size) + 0.5) for r in t.itertuples()]
    expected = fr.table_intervals(t, xpos, "rel_pct")
    fr.assert_intervals(ax, expected, all_drawn=True)


# --- Fig. 2: tree vs chain -----------------------------------------------------------------------------------


def test_fig02_lines_bars_and_rings_are_the_tree_table(monkeypatch, tmp_path):
    """Every line of every panel is the table's speedup / accepted length / acceptance rate of one (experiment,
    configuration) against B, in its shape's colour and its engine's line style; the whiskers are the table's
    intervals; speedup panels mark 1; the paper's values are rings at their keys (GPU run)."""
    from specrepro.figures import engine_tree as T
    from test_tree import TREE21, _points

    exps = [
        {"name": "tree-q-sglang", "model": "qwen3-8b", "engine": "sglang", "datasets": ["gsm8k"], "batch_sizes": [1, 64],
         "methods": [{"method": "none"}, {"method": "eagle3", "k": [3]}, {"method": "eagle3", "k": [21], "tree": TREE21}]},
        {"name": "tree-q-vllm", "model": "qwen3-8b", "datasets": ["gsm8k"], "batch_sizes": [1, 64],
         "methods": [{"method": "none"}, {"method": "eagle3", "k": [21], "tree": TREE21}]},
    ]
    rc = tmp_path / "rc.json"
    write_json(rc, {"run": {"name": "t", "kind": "gpu"}, "experiments": exps, "figures": {},
                    "datasets": {"gsm8k": {"label": "GSM8K"}}, "models": {"qwen3-8b": {"label": "Qwen3-8B"}}})
    rows = []
    for b, scale in ((1, 1.0), (64, 3.0)):
        rows += _points("tree-q-sglang", "none", "none", None, b, [10 * scale, 20 * scale, 30 * scale, 12 * scale],
                        [0] * 4, [0] * 4)
        rows += _points("tree-q-sglang", "eagle3-k3", "eagle3", 3, b, [16 * scale, 29 * scale, 44 * scale, 20 * scale],
                        [4, 5, 4, 6], [4, 8, 1, 6])
        rows += _points("tree-q-sglang", "eagle3-k21-tree-d3b4", "eagle3", 21, b, [6 * scale, 9 * scale, 17 * scale,
                                                                                  7 * scale], [2, 3, 2, 2], [2, 5, 1, 2])
        rows += _points("tree-q-vllm", "none", "none", None, b, [10, 11, 9, 10], [0] * 4, [0] * 4, version="0.10.1.1")
        rows += _points("tree-q-vllm", "eagle3-k21-tree-d3b4", "eagle3", 21, b, [8, 9, 7, 8], [5, 4, 5, 6],
                        [1, 2, 1, 3], version="0.10.1.1")
    paths = []
    for exp in ("tree-q-sglang", "tree-q-vllm"):
        p = tmp_path / f"{exp}.parquet"
        pd.DataFrame([r for r in rows if r["exp"] == exp]).to_parquet(p)
        paths.append(p)
    claims = tmp_path / "claims.yaml"
    claims.write_text(
        "claims:\n- {id: X, group: g, statement: s, value: 0.56, unit: x, source: 'Fig. 2', tolerance: {rel: 0.1},\n"
        "   evidence: engine, measured_by: tree.tree-q-sglang.gsm8k.eagle3-k21-tree-d3b4.speedup.b64}\n"
        "- {id: Y, group: g, statement: s, value: 2.25, unit: tokens, source: 'Fig. 2', tolerance: {rel: 0.1},\n"
        "   evidence: engine, measured_by: tree.tree-q-sglang.gsm8k.eagle3-k3.accepted_length.b1}\n")
    csv = tmp_path / "f2.csv"
    fig = build(monkeypatch, "figure", "fig02_tree", "--run-config", rc, "--subject", "engine", "--points", *paths,
                "--csv", csv, "--claims", claims, "-o", tmp_path / "f2.pdf")
    t = pd.read_csv(csv)
    sd = t[t["method"] != "none"]
    axes = fr.visible_axes(fig)
    assert len(axes) == 3  # one model x dataset row, three quantities
    shapes = list(dict.fromkeys(sd.sort_values("k")["shape"]))
    colour = {s: to_hex(T.SHAPE_COLORS[i]) for i, s in enumerate(shapes)}
    rings = {"speedup": [[64.0, 0.56]], "accepted_length": [[1.0, 2.25]], "acceptance_rate": []}
    for ax, q in zip(axes, ("speedup", "accepted_length", "acceptance_rate")):
        drawn = {(s.color, s.linestyle): pairs(s) for s in fr.lines(ax)}
        want = {}
        for (exp, cfg), g in sd.groupby(["exp", "config"]):
            engine = g["engine"].iloc[0]
            want[(colour[g["shape"].iloc[0]], T.ENGINE_STYLE[engine][0])] = dict(zip(g["batch_size"], g[q]))
        assert drawn.keys() == want.keys()
        for key, got in drawn.items():
            assert got == pytest.approx(want[key]), (q, key)
        fr.assert_intervals(ax, fr.table_intervals(sd, "batch_size", q), all_drawn=True)
        assert fr.hlines(ax) == ([1.0] if q == "speedup" else [])
        assert [p.tolist() for p, _, _ in fr.scatter(ax)] == ([rings[q]] if rings[q] else [])
    # by hand: SGLang chain at B = 1: mean 27.25 over mean 18 tokens/s; accepted length 1 + 19 / 19 drafts
    chain = t[(t["config"] == "eagle3-k3") & (t["batch_size"] == 1)].iloc[0]
    assert chain["speedup"] == pytest.approx(27.25 / 18) and chain["accepted_length"] == pytest.approx(2.0)
    assert (chain["speedup_ci_low"] < chain["speedup"] < chain["speedup_ci_high"])
