"""The simulator's figures and tables on a small trace set: they build, are deterministic, say what they show."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specrepro.cli import main
from specrepro.core.io import write_json

from conftest import small_record, write_jsonl

DATASETS = ("cnn", "gsm8k")
BS = ["1", "4"]


def run(*args):
    assert main([str(a) for a in args]) == 0


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """Paper mode, every variant, per-request runs and recomputed n-gram traces for two tiny datasets."""
    tmp = tmp_path_factory.mktemp("sim")
    rng = np.random.default_rng(0)
    out = {"paper": [], "variants": [], "batches": [], "bleu": [], "stats": [], "recomputed": []}
    for ds in DATASETS:
        recs = []
        for i in range(12):
            prompt = rng.integers(0, 6, 20).tolist()
            output = (prompt[:8] if i % 2 else rng.integers(0, 6, 12).tolist()) + rng.integers(0, 6, 6).tolist()
            n = len(output)
            recs.append(small_record(f"{ds}{i}", output, [1 + int(v) for v in rng.integers(0, 4, n)],
                                     [1 + int(v) for v in rng.integers(0, 3, n - (i % 3 == 0))], prompt))
        trace = write_jsonl(tmp / f"{ds}.jsonl", recs)
        bleu = tmp / f"{ds}.bleu.csv"
        run("prompt-bleu", trace, "--dataset", ds, "-o", bleu)
        out["bleu"].append(bleu)
        common = ["--trace", trace, "--dataset", ds, "--batch-sizes", *BS, "--num-requests", "10"]
        paper = tmp / f"paper-{ds}.csv"
        run("simulate", *common, "--proposer", "ngram", "eagle", "combined", "--policy", "fixed-1", "fixed-3",
            "fixed-5", "oracle", "-o", paper)
        out["paper"].append(paper)
        for name, extra in {
            "winner": ["--proposer", "combined", "--policy", "oracle", "--combine-cost", "winner"],
            "both": ["--proposer", "combined", "--policy", "oracle", "--combine-cost", "both"],
            "equal": ["--proposer", "ngram", "eagle", "combined", "--policy", "oracle", "--pairing", "equal-length"],
            "adaptive": ["--proposer", "combined", "--policy", "adaptive"],
            "continuous": ["--proposer", "ngram", "eagle", "combined", "--policy", "fixed-3", "oracle", "adaptive",
                           "--batching", "continuous"],
        }.items():
            p = tmp / f"{name}-{ds}.csv"
            run("simulate", *common, *extra, "-o", p)
            out["variants"].append(p)
        batches = tmp / f"fig9-{ds}.batches.csv"
        run("simulate", *common[:-2], "--num-requests", "100", "--proposer", "ngram", "eagle", "--policy", "fixed-3",
            "fixed-5", "--per-batch", batches, "-o", tmp / f"fig9-{ds}.csv")
        out["batches"].append(batches)
        stats, ngram = tmp / f"{ds}.stats.json", tmp / f"{ds}.ngram.jsonl"
        run("ngram-trace", trace, "--dataset", ds, "--stats", stats, "-o", ngram)
        out["stats"].append(stats)
        rec = tmp / f"recomputed-{ds}.csv"
        run("simulate", "--trace", ngram, *common[2:], "--proposer", "ngram", "--policy", "oracle", "fixed-3", "-o", rec)
        out["recomputed"].append(rec)
    cfg = {
        "run": {"name": "t", "kind": "cpu"},
        "datasets": {"cnn": {"label": "CNN/DM"}, "gsm8k": {"label": "GSM8K"}},
        "figures": {},
        "trace_sets": {"toy": {"label": "Toy", "datasets": list(DATASETS),
                               "proposers": [["ngram", "n-gram"], ["eagle", "EAGLE"]]}},
    }
    write_json(tmp / "run_config.json", cfg)
    return tmp, out


def build(tmp, name, output, *args):
    run("figure", name, "--run-config", tmp / "run_config.json", "--subject", "toy", "-o", output, *args)
    return output.read_bytes()


def figure_args(out, name, tag, tmp):
    if name in ("fig10_sim_speedup", "fig12_oracle_combine"):
        return ["--summaries", *out["paper"]]
    if name == "fig_sim_beyond":
        return ["--summaries", *out["paper"], *out["variants"]]
    if name == "fig09_bleu_ngram":
        return ["--batches", *out["batches"], "--bleu", *out["bleu"], "--csv", tmp / f"{tag}.csv"]
    if name == "tab_oracle_gap":
        return ["--summaries", *out["paper"], "--csv", tmp / f"{tag}.csv"]
    if name == "tab_sim_beyond":
        return ["--summaries", *out["paper"], *out["variants"], "--csv", tmp / f"{tag}.csv"]
    return ["--stats", *out["stats"], "--released", *out["paper"], "--recomputed", *out["recomputed"],
            "--csv", tmp / f"{tag}.csv"]


@pytest.mark.parametrize("name", ["fig10_sim_speedup", "fig12_oracle_combine", "fig09_bleu_ngram", "fig_sim_beyond",
                                  "tab_oracle_gap", "tab_sim_beyond", "tab_ngram_agreement"])
def test_builds_deterministically(simulated, name):
    tmp, out = simulated
    ext = "tex" if name.startswith("tab_") else "pdf"
    a = build(tmp, name, tmp / f"{name}-a.{ext}", *figure_args(out, name, f"{name}-a", tmp))
    b = build(tmp, name, tmp / f"{name}-b.{ext}", *figure_args(out, name, f"{name}-b", tmp))
    assert a == b
    if ext == "pdf":
        assert a.startswith(b"%PDF") and b"/CreationDate" not in a
    else:
        assert a.decode().startswith(r"\begin{tabular}") and "CNN/DM" in a.decode()


def test_oracle_gap_table_values(simulated):
    tmp, out = simulated
    build(tmp, "tab_oracle_gap", tmp / "gap.tex", *figure_args(out, "tab_oracle_gap", "gap", tmp))
    gap = pd.read_csv(tmp / "gap.csv")
    paper = pd.concat([pd.read_csv(p) for p in out["paper"]])
    row = gap[(gap.dataset == "cnn") & (gap.batch_size == 4)].iloc[0]
    at = paper[(paper.dataset == "cnn") & (paper.batch_size == 4)].set_index(["proposer", "policy"])["speedup"]
    best = max(at[("eagle", f"fixed-{k}")] for k in (1, 3, 5))
    assert row.eagle_best_fixed == pytest.approx(best)
    assert row.eagle_gap == pytest.approx(at[("eagle", "oracle")] / best - 1)
    assert row.combined_gain == pytest.approx(at[("combined", "oracle")] / max(at[("ngram", "oracle")], at[("eagle", "oracle")]) - 1)


def test_beyond_table_has_every_variant(simulated):
    tmp, out = simulated
    build(tmp, "tab_sim_beyond", tmp / "beyond.tex", *figure_args(out, "tab_sim_beyond", "beyond", tmp))
    t = pd.read_csv(tmp / "beyond.csv")
    assert {"combine", "combine_winner", "combine_both", "combine_equal", "oracle_equal", "adaptive", "cont_combine",
            "cont_adaptive", "cont_eagle3", "fixed_best"} <= set(t["row"])
    by = t.set_index(["dataset", "row", "batch_size"])["speedup"]
    # charging drafting honestly can only cost time
    assert by[("cnn", "combine_both", 1)] <= by[("cnn", "combine_winner", 1)] <= by[("cnn", "combine", 1)] + 1e-12


def test_fig9_cells_count_requests(simulated):
    tmp, out = simulated
    build(tmp, "fig09_bleu_ngram", tmp / "f9.pdf", *figure_args(out, "fig09_bleu_ngram", "f9", tmp))
    cells = pd.read_csv(tmp / "f9.csv")
    per = cells[(cells.ngram_policy == "fixed-3") & (cells.batch_size == 1)].groupby("dataset")["requests"].sum()
    assert per.to_dict() == {"cnn": 12, "gsm8k": 12}


def test_sim_metrics_keys(simulated, tmp_path):
    tmp, out = simulated
    target = tmp_path / "m.json"
    run("sim-metrics", "--traceset", "toy", "--inputs", *out["paper"], *out["variants"], "--recomputed",
        *out["recomputed"], "--ngram-stats", *out["stats"], "--bleu", *out["bleu"], "-o", target)
    import json

    m = json.loads(target.read_text())
    assert "sim.toy.cnn.combined.oracle.b4" in m and "sim.toy.cnn.combined.oracle-cost-winner.b4" in m
    assert "sim.toy.gsm8k.combined.adaptive-continuous.b1" in m
    assert "sim.toy.cnn.ngram.oracle-recomputed-trace.b1" in m
    assert m["traces.toy.cnn.ngram.recomputed_agreement_fitting"] <= 1.0
    assert sum(v for k, v in m.items() if k.startswith("traces.toy.cnn.prompt.bleu4_requests_")) == 12
