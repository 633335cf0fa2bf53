"""Engine figures, tables and metrics on hand-made points with known numbers."""

from __future__ import annotations

import argparse
import math

import pandas as pd
import pytest

from specrepro import cli
from specrepro.engine.run.bench import POINT_COLUMNS
from specrepro.engine.results.metrics import engine_metrics, load_points, lossless_detail, speedup_points
from specrepro.engine.results.verbs import add_cli
from specrepro.figures import trace_context
from specrepro.figures.engine_speedup import footnote
from specrepro.core.io import SpecReproError, read_json, write_json, write_parquet

BASE_OUT = [1, 2, 3]


def point(exp, model, method, k, ds, r, b, tput, *, out=None, drafts=0, per_pos=(), status="ok", error=None,
          device="CPU: test"):
    """One point row: output tokens 30 x B, wall = tokens / throughput, counters from ``drafts``/``per_pos``."""
    cfg = "none" if method == "none" else f"{method}-k{k}"
    row = {c: None for c in POINT_COLUMNS}
    row.update(exp=exp, model=model, method=method, k=k, config=cfg, batching="replicate", dataset=ds,
               request_index=r, request_id=f"{ds}-{r}", batch_size=b, status=status, error=error, device=device)
    if status != "ok":
        return row
    tokens = 30 * b
    acc = sum(per_pos)
    row.update(
        wall_s=tokens / tput, prompt_tokens=5 * b, output_tokens=tokens, throughput=tput, num_drafts=drafts,
        num_draft_tokens=(k or 0) * drafts, num_accepted_tokens=acc, accepted_per_pos=list(per_pos),
        acceptance_length=1 + acc / drafts if drafts else None,
        acceptance_rate=acc / ((k or 0) * drafts) if drafts else None,
        acceptance_rate_per_pos=[x / drafts for x in per_pos] if drafts else [],
        finish_reason="length", distinct_outputs=1, output_token_ids=list(out or BASE_OUT), output_text="x",
    )
    return row


def tables() -> dict[str, pd.DataFrame]:
    """e1 (no thinking, dataset d1, B = 1, 4, two requests) and r1 (thinking, dataset d2, B = 1, 2)."""
    P = point
    rows = {
        "e1/none": [P("e1", "m1", "none", None, "d1", 0, 1, 10), P("e1", "m1", "none", None, "d1", 1, 1, 20),
                    P("e1", "m1", "none", None, "d1", 0, 4, 40), P("e1", "m1", "none", None, "d1", 1, 4, 60)],
        "e1/ngram-k3": [
            P("e1", "m1", "ngram", 3, "d1", 0, 1, 15, drafts=2, per_pos=(2, 1, 0)),
            P("e1", "m1", "ngram", 3, "d1", 1, 1, 30, drafts=2, per_pos=(2, 1, 0)),
            P("e1", "m1", "ngram", 3, "d1", 0, 4, 50, drafts=2, per_pos=(2, 1, 0)),
            P("e1", "m1", "ngram", 3, "d1", 1, 4, 50, drafts=2, per_pos=(2, 1, 0), out=[1, 2, 4]),
        ],
        "e1/eagle-k3": [
            P("e1", "m1", "eagle", 3, "d1", 0, 1, 30, drafts=4, per_pos=(3, 2, 1)),
            P("e1", "m1", "eagle", 3, "d1", 1, 1, 0, status="failed", error="RuntimeError: boom"),
            P("e1", "m1", "eagle", 3, "d1", 0, 4, 60, drafts=4, per_pos=(4, 2, 0)),
            P("e1", "m1", "eagle", 3, "d1", 1, 4, 90, drafts=4, per_pos=(3, 2, 1)),
        ],
        "r1/none": [P("r1", "m2", "none", None, "d2", 0, 1, 100), P("r1", "m2", "none", None, "d2", 0, 2, 180)],
        "r1/mtp-k3": [P("r1", "m2", "mtp", 3, "d2", 0, 1, 150, drafts=5, per_pos=(5, 4, 2)),
                      P("r1", "m2", "mtp", 3, "d2", 0, 2, 200, drafts=5, per_pos=(4, 3, 1))],
    }
    out = {}
    for key, rs in rows.items():
        df = pd.DataFrame(rs)
        df["k"] = df["k"].astype("Int64")
        out[key] = df
    return out


RUN_CONFIG = {
    "run": {"name": "t", "kind": "cpu"},
    "datasets": {"d1": {"label": "Data One"}, "d2": {"label": "Data Two"}},
    "models": {"m1": {"label": "Model One"}, "m2": {"label": "Model Two"}},
    "experiments": [
        {"name": "e1", "model": "m1", "datasets": ["d1"], "batch_sizes": [1, 4],
         "methods": [{"method": "none"}, {"method": "ngram", "k": [3]}, {"method": "eagle", "k": [3]}]},
        {"name": "r1", "model": "m2", "thinking": True, "datasets": ["d2"], "batch_sizes": [1, 2],
         "methods": [{"method": "none"}, {"method": "mtp", "k": [3]}]},
    ],
    "trace_sets": {},
}


@pytest.fixture
def engine_run(tmp_path):
    paths = []
    for key, df in tables().items():
        exp, cfg = key.split("/")
        p = tmp_path / "engine" / exp / "bench" / f"{cfg}.parquet"
        write_parquet(p, df)
        write_json(p.with_suffix(".json"), {"exp": exp, "config": cfg, "load_s": 12.5, "points": len(df),
                                            "failed": int((df["status"] != "ok").sum())})
        paths.append(str(p))
    write_json(tmp_path / "run_config.json", RUN_CONFIG)
    return tmp_path, paths


def _at(t, exp, cfg, b, col):
    r = t[(t["exp"] == exp) & (t["config"] == cfg) & (t["batch_size"] == b)]
    assert len(r) == 1
    return r[col].iloc[0]


def test_speedup_by_hand(engine_run):
    _, paths = engine_run
    t = speedup_points(load_points(paths))
    assert _at(t, "e1", "none", 1, "throughput") == pytest.approx(15)
    assert _at(t, "e1", "ngram-k3", 1, "speedup") == pytest.approx(22.5 / 15)
    assert _at(t, "e1", "ngram-k3", 4, "speedup") == pytest.approx(1.0)
    # the failed point is left out of the mean and counted
    assert _at(t, "e1", "eagle-k3", 1, "speedup") == pytest.approx(2.0)
    assert _at(t, "e1", "eagle-k3", 1, "failed") == 1 and _at(t, "e1", "eagle-k3", 1, "requests") == 1
    assert _at(t, "e1", "eagle-k3", 4, "speedup") == pytest.approx(1.5)
    assert _at(t, "r1", "mtp-k3", 2, "speedup") == pytest.approx(200 / 180)
    assert int(t["failed"].sum()) == 1 and int(t["points"].sum()) == 16


def test_all_failed_group_is_kept(engine_run):
    _, paths = engine_run
    pts = load_points(paths)
    pts.loc[(pts["config"] == "ngram-k3") & (pts["batch_size"] == 4), "status"] = "failed"
    t = speedup_points(pts)
    assert _at(t, "e1", "ngram-k3", 4, "failed") == 2
    assert math.isnan(_at(t, "e1", "ngram-k3", 4, "speedup"))


def test_lossless_counts(engine_run):
    _, paths = engine_run
    t = lossless_detail(load_points(paths)).set_index(["exp", "config"])
    ng, ea, no = t.loc[("e1", "ngram-k3")], t.loc[("e1", "eagle-k3")], t.loc[("e1", "none")]
    assert (ng["compared"], ng["identical"], ng["failed"]) == (4, 3, 0)
    assert (ea["compared"], ea["identical"], ea["failed"]) == (3, 3, 1)
    assert ea["first_error"] == "RuntimeError: boom"
    assert pd.isna(no["compared"]) and no["failed"] == 0
    assert ng["acceptance_length"] == pytest.approx(2.5) and ng["acceptance_rate"] == pytest.approx(0.5)
    assert ng["acceptance_rate_per_pos"] == "1.0000 0.5000 0.0000"
    # eagle: drafts 12, accepted per position 10, 6, 2
    assert ea["acceptance_rate_per_pos"] == "0.8333 0.5000 0.1667"
    assert ea["acceptance_rate"] == pytest.approx(18 / 36)


def test_metrics_keys_and_values(engine_run):
    _, paths = engine_run
    m = engine_metrics(load_points(paths), "cpu")
    assert m["engine.e1.d1.ngram-k3.speedup.b1"] == pytest.approx(1.5)
    assert m["engine.e1.d1.eagle-k3.speedup.b4"] == pytest.approx(1.5)
    assert m["engine.e1.d1.none.throughput.b4"] == pytest.approx(50)
    assert m["engine.e1.d1.eagle-k3.throughput.b1"] == pytest.approx(30)
    assert m["engine.e1.d1.eagle-k3.acceptance_length.b1"] == pytest.approx(2.5)
    assert m["engine.e1.d1.eagle-k3.speedup_drop_pct.b1_b4"] == pytest.approx(25.0)
    assert m["engine.e1.d1.ngram-k3.speedup_drop_pct.b1_b4"] == pytest.approx(100 / 3)
    assert m["engine.e1.d1.eagle-k3.acceptance_rate_pos1.b1"] == pytest.approx(0.75)
    assert m["engine.e1.d1.eagle-k3.acceptance_rate_pos1.b4"] == pytest.approx(7 / 8)
    assert m["engine.e1.d1.eagle-k3.acceptance_rate_pos3"] == pytest.approx(2 / 12)
    assert m["engine.r1.d2.mtp-k3.acceptance_rate_pos2.b1"] == pytest.approx(0.8)
    assert m["engine.e1.d1.ngram-k3.identical_fraction"] == pytest.approx(0.75)
    assert m["engine.points.failed"] == 1 and m["engine.points.ok"] == 15
    assert "engine.e1.d1.none.speedup.b1" not in m  # no SD's speedup is 1 by definition
    assert all(isinstance(v, (int, float)) and v == v for v in m.values())
    with pytest.raises(SpecReproError):
        engine_metrics(load_points(paths), "tpu")


def test_engine_metrics_verb(engine_run):
    tmp_path, paths = engine_run
    p = argparse.ArgumentParser()
    add_cli(p.add_subparsers(dest="verb"))
    outs = []
    for tag in ("a", "b"):
        a = p.parse_args(["engine-metrics", "--points", *paths, "--run-config", str(tmp_path / "run_config.json"),
                          "-o", str(tmp_path / f"{tag}.json"), "--speedup-csv", str(tmp_path / f"{tag}-s.csv"),
                          "--lossless-csv", str(tmp_path / f"{tag}-l.csv")])
        a.func(a)
        outs.append(tuple((tmp_path / f"{tag}{s}").read_bytes() for s in (".json", "-s.csv", "-l.csv")))
    assert outs[0] == outs[1]
    assert read_json(tmp_path / "a.json")["engine.e1.d1.ngram-k3.speedup.b1"] == pytest.approx(1.5)
    s = pd.read_csv(tmp_path / "a-s.csv")
    assert {"speedup", "failed", "points", "run_kind"} <= set(s.columns) and set(s["run_kind"]) == {"cpu"}
    with pytest.raises(SpecReproError):
        b = p.parse_args(["engine-metrics", "--points", str(tmp_path / "missing.parquet"), "--run-config",
                          str(tmp_path / "run_config.json"), "-o", str(tmp_path / "x.json")])
        b.func(b)


def test_cpu_metrics_never_decide_engine_claims(engine_run):
    from specrepro.analysis.claims import Claim, evaluate

    c = Claim(id="x", group="g", statement="s", value=1.5, unit="x", source="src", tolerance_abs=None,
              tolerance_rel=0.1, evidence="engine", measured_by="engine.e1.d1.ngram-k3.speedup.b1")
    m = {"engine.e1.d1.ngram-k3.speedup.b1": 1.5}
    assert evaluate([c], m, "cpu")["status"].iloc[0] == "not measured in this run"
    assert evaluate([c], m, "gpu")["status"].iloc[0] == "reproduced"


def test_engine_context():
    ctx = trace_context(RUN_CONFIG, "engine")
    assert ctx.subject_label == "engine runs (CPU, tiny models)" and ctx.run_kind == "cpu"
    assert ctx.datasets == ("d1", "d2") and ctx.dataset_label("d2") == "Data Two"
    assert list(ctx.proposers) == ["none", "ngram", "eagle", "eagle3", "draft_model", "mtp", "suffix"]
    assert ctx.proposer_label("eagle3") == "EAGLE-3" and ctx.proposer_label("none") == "no SD"
    assert [e["name"] for e in ctx.experiments] == ["e1", "r1"] and ctx.experiments[1]["thinking"]
    assert ctx.experiments[0]["model_label"] == "Model One"
    gpu = trace_context({**RUN_CONFIG, "run": {"kind": "gpu"}}, "engine")
    assert gpu.subject_label == "engine runs (GPU)"


def test_footnote_labels_cpu_runs(engine_run):
    _, paths = engine_run
    t = speedup_points(load_points(paths))
    assert "not evidence for the paper" in footnote(t, "cpu") and "1 of 16 measurements (one request at one batch size) failed" in footnote(t, "cpu")
    assert "not evidence" not in footnote(t, "gpu")


FIGURES = {
    "fig01_speedup": ("pdf", ["--csv"]),
    "fig03_reasoning": ("pdf", ["--csv"]),
    "tab_lossless": ("tex", ["--csv"]),
    "tab_runtime": ("tex", ["--csv"]),
}


def _build(tmp_path, paths, name, tag):
    ext, extra = FIGURES[name]
    out = tmp_path / "figures" / tag / f"{name}-engine.{ext}"
    csv = tmp_path / "figures" / tag / f"{name}-engine.csv"
    args = ["figure", name, "--run-config", str(tmp_path / "run_config.json"), "--subject", "engine",
            "--points", *paths, "-o", str(out), "--csv", str(csv)]
    if name == "tab_runtime":
        args += ["--meta", *[p.replace(".parquet", ".json") for p in paths]]
    assert cli.main(args) == 0
    return out.read_bytes(), csv.read_bytes()


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_builds_and_is_deterministic(engine_run, name):
    tmp_path, paths = engine_run
    a = _build(tmp_path, paths, name, "a")
    b = _build(tmp_path, paths, name, "b")
    assert a == b
    body = a[0]
    if FIGURES[name][0] == "pdf":
        assert body.startswith(b"%PDF") and b"/CreationDate" not in body and b"DejaVuSans" in body
    else:
        tex = body.decode()
        assert r"\toprule" in tex and r"\bottomrule" in tex


def test_lossless_tex_content(engine_run):
    tmp_path, paths = engine_run
    tex = _build(tmp_path, paths, "tab_lossless", "a")[0].decode()
    assert "n-gram (k=3) & 3/4 & 2.50 & 0.50 & 1.00 0.50 0.00 & 0/4 & --" in tex
    assert "EAGLE (k=3) & 3/3 &" in tex and "RuntimeError" in tex and "& 1/4 &" in tex


def test_runtime_table_values(engine_run):
    tmp_path, paths = engine_run
    tex, csv = _build(tmp_path, paths, "tab_runtime", "a")
    t = pd.read_csv(pd.io.common.BytesIO(csv))
    r = t[(t["exp"] == "e1") & (t["config"] == "none")].iloc[0]
    # wall = 30B / throughput: 30/10 + 30/20 + 120/40 + 120/60 = 9.5 s, plus 12.5 s load
    assert r["measured_s"] == pytest.approx(9.5) and r["load_s"] == pytest.approx(12.5)
    assert r["device_hours"] == pytest.approx(22.0 / 3600) and r["device_hours_unit"] == "CPU-hours"
    assert r["device"] == "CPU: test" and r["points"] == 4
    assert "CPU-hours" in tex.decode() and "GPU-hours" not in tex.decode()


def test_gpu_device_count():
    from specrepro.figures.engine_runtime import device_count

    assert device_count("4x NVIDIA H100 80GB HBM3", "gpu") == 4
    assert device_count("CPU: x", "cpu") == 1


def test_speedup_figure_needs_a_non_thinking_experiment(engine_run, tmp_path):
    _, paths = engine_run
    cfg = {**RUN_CONFIG, "experiments": [RUN_CONFIG["experiments"][1]]}
    write_json(tmp_path / "rc2.json", cfg)
    rc = cli.main(["figure", "fig01_speedup", "--run-config", str(tmp_path / "rc2.json"), "--subject", "engine",
                   "--points", *paths, "-o", str(tmp_path / "x.pdf"), "--csv", str(tmp_path / "x.csv")])
    assert rc == 2


def test_speedup_intervals_by_hand(engine_run):
    """Two requests: a paired resample is (0, 0), (1, 1) or a mix, so the speedup interval spans the two
    per-request ratios' pooled values exactly."""
    _, paths = engine_run
    t = speedup_points(load_points(paths))
    # ngram-k3 at B=4: throughputs 50, 50 against no SD's 40, 60: resampled ratios 50/40, 100/100, 50/60
    assert _at(t, "e1", "ngram-k3", 4, "speedup_ci_low") == pytest.approx(50 / 60)
    assert _at(t, "e1", "ngram-k3", 4, "speedup_ci_high") == pytest.approx(50 / 40)
    assert _at(t, "e1", "ngram-k3", 4, "speedup_n") == 2
    # no SD at B=1: throughputs 10 and 20
    assert (_at(t, "e1", "none", 1, "throughput_ci_low"), _at(t, "e1", "none", 1, "throughput_ci_high")) == (10, 20)
    # eagle-k3 at B=1: one request failed, so the sides differ and are resampled on their own; n = 1
    assert _at(t, "e1", "eagle-k3", 1, "speedup_n") == 1
    m = engine_metrics(load_points(paths), "cpu")
    key = "engine.e1.d1.ngram-k3.speedup.b4"
    assert (m[f"{key}.ci_low"], m[f"{key}.ci_high"], m[f"{key}.n"]) == pytest.approx((50 / 60, 50 / 40, 2))
    assert "engine.e1.d1.eagle-k3.speedup.b1.ci_low" not in m  # one request: the point decides
    drop = "engine.e1.d1.ngram-k3.speedup_drop_pct.b1_b4"
    assert m[f"{drop}.ci_low"] <= m[drop] <= m[f"{drop}.ci_high"]
