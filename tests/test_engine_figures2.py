"""Fig. 4 breakdown, memory table and cost-fit figure on hand-made inputs with known numbers."""

from __future__ import annotations

import io
import math

import pandas as pd
import pytest

from specrepro import cli
from specrepro.engine.run.profile import STEP_COLUMNS
from specrepro.core.io import read_json, write_json, write_parquet

RUN_CONFIG = {
    "run": {"name": "t", "kind": "cpu"},
    "engine": {"dtype": "float32"},
    "datasets": {"cnn": {"label": "CNN/DM"}},
    "models": {"m1": {"label": "Model One", "drafters": {"eagle": {}, "draft_model": {}}},
               "qwen3-8b": {"label": "Qwen3-8B", "drafters": {"draft_model": {}}}},
    "experiments": [
        {"name": "e1", "model": "m1", "datasets": ["cnn"], "batch_sizes": [1, 4],
         "methods": [{"method": "none"}, {"method": "ngram", "k": [3]}, {"method": "eagle", "k": [3]},
                     {"method": "draft_model", "k": [3]}]},
        {"name": "e2", "model": "m1", "datasets": ["cnn"], "batch_sizes": [1],
         "methods": [{"method": "none"}, {"method": "draft_model", "k": [3]}]},
    ],
    "trace_sets": {},
}


def _rc(tmp_path, cfg=None):
    p = tmp_path / "run_config.json"
    write_json(p, cfg or RUN_CONFIG)
    return str(p)


# --- Fig. 4 breakdown ---------------------------------------------------------------------------

BD_COLS = ["exp", "model", "method", "k", "config", "dataset", "request_index", "batch_size", "clock", "steps",
           "total_s", "drafting_s", "verification_s", "sampling_s", "overhead_s"]


def bd_row(exp, method, k, r, b, total, draft, ver, samp):
    cfg = "none" if method == "none" else f"{method}-k{k}"
    ovh = total - draft - ver - samp
    row = dict(zip(BD_COLS, [exp, "m1", method, k, cfg, "cnn", r, b, "cpu", 10, total, draft, ver, samp, ovh]))
    row.update({f"{p}_share": row[f"{p}_s"] / total for p in ("drafting", "verification", "sampling", "overhead")})
    return row


@pytest.fixture
def breakdown_run(tmp_path):
    tables = {
        "e1/none": [bd_row("e1", "none", None, 0, 1, 10, 0, 8, 0.1), bd_row("e1", "none", None, 1, 1, 30, 0, 27, 0.3),
                    bd_row("e1", "none", None, 0, 4, 20, 0, 19, 0.2)],
        "e1/draft_model-k3": [bd_row("e1", "draft_model", 3, 0, 1, 10, 4.5, 5, 0.1),
                              bd_row("e1", "draft_model", 3, 0, 4, 20, 2, 17, 0.4)],
    }
    paths = []
    for key, rows in tables.items():
        exp, cfg = key.split("/")
        p = tmp_path / "engine" / exp / "profile" / f"{cfg}.breakdown.csv"
        p.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(p, index=False)
        paths.append(str(p))
    header_only = tmp_path / "engine" / "e1" / "profile" / "ngram-k3.breakdown.csv"
    header_only.write_text(",".join(BD_COLS) + "\n")
    zero = tmp_path / "engine" / "e1" / "profile" / "eagle-k3.breakdown.csv"
    zero.write_text("")
    return tmp_path, paths + [str(header_only), str(zero)]


def _breakdown(tmp_path, paths, tag):
    d = tmp_path / "figures" / tag
    out, csv, met = d / "fig04_breakdown-engine.pdf", d / "fig04_breakdown-engine.csv", d / "engine-breakdown.json"
    rc = cli.main(["figure", "fig04_breakdown", "--run-config", _rc(tmp_path), "--subject", "engine",
                   "--breakdown", *paths, "--csv", str(csv), "--metrics", str(met), "-o", str(out)])
    assert rc == 0
    return out.read_bytes(), csv.read_bytes(), met.read_bytes()


def test_breakdown_shares_and_metrics_by_hand(breakdown_run):
    tmp_path, paths = breakdown_run
    a = _breakdown(tmp_path, paths, "a")
    assert a == _breakdown(tmp_path, paths, "b")
    assert a[0].startswith(b"%PDF") and b"/CreationDate" not in a[0]
    t = pd.read_csv(io.BytesIO(a[1]))
    # no SD, B=1: time-weighted over two requests: (8 + 27) / (10 + 30)
    r = t[(t["config"] == "none") & (t["batch_size"] == 1)].iloc[0]
    assert r["verification_pct"] == pytest.approx(87.5) and r["sampling_pct"] == pytest.approx(1.0)
    assert r["overhead_pct"] == pytest.approx(11.5) and r["points"] == 2 and r["clock"] == "cpu"
    assert list(t["config"]) == ["none", "none", "draft_model-k3", "draft_model-k3"]
    assert set(t["run_kind"]) == {"cpu"}
    m = read_json(tmp_path / "figures" / "a" / "engine-breakdown.json")
    assert m["engine.e1.cnn.none.breakdown.verification_pct.b1"] == pytest.approx(87.5)
    assert m["engine.e1.cnn.none.breakdown.verification_pct.b4"] == pytest.approx(95.0)
    assert m["engine.e1.cnn.none.breakdown.drafting_pct.b1"] == pytest.approx(0.0)
    assert m["engine.e1.cnn.draft_model-k3.breakdown.drafting_pct.b1"] == pytest.approx(45.0)
    assert m["engine.e1.cnn.draft_model-k3.breakdown.verification_pct.b4"] == pytest.approx(85.0)
    # one draft forward against one target forward: drafting / (k * verification)
    assert m["engine.e1.cnn.draft_model-k3.draft_to_target_forward_pct.b1"] == pytest.approx(30.0)
    assert m["engine.e1.cnn.draft_model-k3.draft_to_target_forward_pct.b4"] == pytest.approx(100 * 2 / 51)
    assert "engine.e1.cnn.none.draft_to_target_forward_pct.b1" not in m
    assert m["engine.breakdown.verification_pct.min"] == pytest.approx(50.0)
    assert m["engine.breakdown.verification_pct.max"] == pytest.approx(95.0)
    assert m["engine.breakdown.sampling_pct.max"] == pytest.approx(2.0)
    assert m["engine.breakdown.drafting_pct.max"] == pytest.approx(45.0)


def test_breakdown_reproduces_the_papers_draft_forward_ratio():
    from specrepro.figures.engine_breakdown import shares

    df = pd.DataFrame([bd_row("qwen3-8b", "draft_model", 3, 0, 1, 100, 47.1, 41.9, 1.0)])
    df["k"] = df["k"].astype("Int64")
    assert shares(df)["draft_to_target_forward_pct"].iloc[0] == pytest.approx(37.47, abs=0.01)


def test_breakdown_all_empty_is_an_error(breakdown_run):
    tmp_path, paths = breakdown_run
    rc = cli.main(["figure", "fig04_breakdown", "--run-config", _rc(tmp_path), "--subject", "engine",
                   "--breakdown", *paths[2:], "--csv", str(tmp_path / "x.csv"), "--metrics", str(tmp_path / "x.json"),
                   "-o", str(tmp_path / "x.pdf")])
    assert rc == 2 and not (tmp_path / "x.pdf").exists()


def test_breakdown_footnote_names_the_clock():
    from specrepro.figures.engine_breakdown import footnote

    t = pd.DataFrame({"clock": ["cpu", "cuda-sync"], "points": [2, 1], "steps": [20, 10]})
    assert "cpu = wall time inside the model runner" in footnote(t, "cpu") and "not evidence" in footnote(t, "cpu")
    assert "cuda-sync = wall time with the device synchronised" in footnote(t, "gpu")
    assert "not evidence" not in footnote(t, "gpu")


# --- memory table ---------------------------------------------------------------------------------


def llama_cfg(layers, **kw):
    c = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": layers, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 100,
         "tie_word_embeddings": False, "torch_dtype": "float32"}
    c.update(kw)
    return c


def _manifest(tmp_path, name, cfg):
    d = tmp_path / "models" / name.replace("/", "_")
    d.mkdir(parents=True, exist_ok=True)
    write_json(d / "config.json", cfg)
    m = tmp_path / "manifests" / name / "manifest.json"
    write_json(m, {"name": name, "path": str(d)})
    return str(m)


@pytest.fixture
def memory_run(tmp_path):
    manifests = [_manifest(tmp_path, "m1", llama_cfg(4)), _manifest(tmp_path, "m1/drafters/eagle", llama_cfg(1)),
                 _manifest(tmp_path, "m1/drafters/draft_model", llama_cfg(2))]
    metas = []
    for exp, cfg, method, rep in [
        ("e1", "none", "none", {"kv_bytes_per_token": 1024, "kv_layers": 4, "params": 160832}),
        ("e1", "draft_model-k3", "draft_model", {"kv_bytes_per_token": 1536, "kv_layers": 6, "params": 247680,
                                                 "target_params": 160832, "drafter_params": 86848}),
        ("e1", "eagle-k3", "eagle", None),
        ("e1", "ngram-k3", "ngram", "missing"),
    ]:
        p = tmp_path / "engine" / exp / "bench" / f"{cfg}.json"
        meta = {"exp": exp, "config": cfg, "method": method}
        if rep != "missing":
            meta["vllm_memory"] = rep
        write_json(p, meta)
        metas.append(str(p))
    return tmp_path, manifests, metas


def _memory(tmp_path, manifests, metas, tag):
    d = tmp_path / "figures" / tag
    out, csv, met = d / "tab_memory-engine.tex", d / "tab_memory-engine.csv", d / "engine-memory.json"
    rc = cli.main(["figure", "tab_memory", "--run-config", _rc(tmp_path), "--subject", "engine",
                   "--manifests", *manifests, "--meta", *metas, "--csv", str(csv), "--metrics", str(met),
                   "-o", str(out)])
    assert rc == 0
    return out.read_bytes(), csv.read_bytes(), met.read_bytes()


# hand counts of llama_cfg: embeddings 100*64; a layer 3*4096 (q, k+v, o) + 3*64*128 (MLP) + 2*64 (norms)
LAYER = 12288 + 24576 + 128
TARGET = 6400 + 4 * LAYER + 64 + 6400  # 160832
DRAFT = 6400 + 2 * LAYER + 64 + 6400  # 86848
EAGLE = LAYER - 64 + 2 * 64 * 64  # no input_layernorm, fc 2H -> H, embeddings and LM head shared


def test_memory_table_by_hand(memory_run):
    tmp_path, manifests, metas = memory_run
    a = _memory(tmp_path, manifests, metas, "a")
    assert a == _memory(tmp_path, manifests, metas, "b")
    t = pd.read_csv(io.BytesIO(a[1]))
    assert list(zip(t["exp"], t["method"])) == [("e1", "ngram"), ("e1", "eagle"), ("e1", "draft_model"),
                                                 ("e2", "draft_model")]
    r = t.set_index(["exp", "method"])
    assert TARGET == 160832 and r.loc[("e1", "draft_model"), "target_params"] == TARGET
    assert r.loc[("e1", "draft_model"), "drafter_params"] == DRAFT
    assert r.loc[("e1", "eagle"), "drafter_params"] == EAGLE
    assert r.loc[("e1", "ngram"), "drafter_params"] == 0 and r.loc[("e1", "ngram"), "kv_ratio_per_token"] == 1.0
    # fp32 KV per token: 2 x layers x 2 heads x 16 x 4 bytes
    assert r.loc[("e1", "draft_model"), "target_kv_bytes_per_token"] == 1024
    assert r.loc[("e1", "draft_model"), "drafter_kv_bytes_per_token"] == 512
    assert r.loc[("e1", "draft_model"), "kv_ratio_per_token"] == pytest.approx(1.5)
    assert r.loc[("e1", "eagle"), "kv_ratio_per_token"] == pytest.approx(1.25)
    assert r.loc[("e1", "draft_model"), "drafter_weight_bytes"] == 4 * DRAFT
    # vLLM's report: same KV per token as the architecture, 1.5x the no-SD engine's
    assert r.loc[("e1", "draft_model"), "vllm_kv_check"] == pytest.approx(1.0)
    assert r.loc[("e1", "draft_model"), "vllm_params_check"] == pytest.approx(1.0)
    assert r.loc[("e1", "draft_model"), "vllm_kv_per_token_ratio"] == pytest.approx(1.5)
    assert math.isnan(r.loc[("e1", "eagle"), "vllm_kv_bytes_per_token"])
    assert math.isnan(r.loc[("e2", "draft_model"), "vllm_kv_per_token_ratio"])
    m = read_json(tmp_path / "figures" / "a" / "engine-memory.json")
    assert m["engine.memory.m1.draft_model.kv_per_token_ratio"] == pytest.approx(1.5)
    assert m["engine.memory.m1.draft_model.weight_ratio"] == pytest.approx((TARGET + DRAFT) / TARGET)
    assert m["engine.memory.m1.eagle.drafter_params"] == EAGLE
    assert m["engine.memory.m1.draft_model.vllm_kv_per_token_ratio"] == pytest.approx(1.5)
    assert "engine.memory.m1.eagle.vllm_kv_per_token_ratio" not in m
    tex = a[0].decode()
    assert r"\toprule" in tex and "draft model & " in tex and "1.500x" in tex and "1536 (1.00)" in tex


def test_memory_paper_qwen3_ratio(tmp_path):
    q8 = {"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
          "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
          "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    q06 = {**q8, "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16, "intermediate_size": 3072,
           "tie_word_embeddings": True}
    cfg = {**RUN_CONFIG, "engine": {"dtype": "bfloat16"},
           "experiments": [{"name": "qwen3-8b", "model": "qwen3-8b", "datasets": ["cnn"], "batch_sizes": [1],
                            "methods": [{"method": "none"}, {"method": "draft_model", "k": [3]}]}]}
    manifests = [_manifest(tmp_path, "qwen3-8b", q8), _manifest(tmp_path, "qwen3-8b/drafters/draft_model", q06)]
    rc = cli.main(["figure", "tab_memory", "--run-config", _rc(tmp_path, cfg), "--subject", "engine",
                   "--manifests", *manifests, "--csv", str(tmp_path / "m.csv"), "--metrics", str(tmp_path / "m.json"),
                   "-o", str(tmp_path / "m.tex")])
    assert rc == 0
    m = read_json(tmp_path / "m.json")
    assert m["engine.memory.qwen3-8b.draft_model.kv_per_token_ratio"] == pytest.approx(64 / 36)
    t = pd.read_csv(tmp_path / "m.csv")
    assert t["target_kv_bytes_per_token"].iloc[0] == 147456 and t["drafter_kv_bytes_per_token"].iloc[0] == 114688


def test_memory_missing_drafter_manifest_is_an_error(memory_run):
    tmp_path, manifests, metas = memory_run
    rc = cli.main(["figure", "tab_memory", "--run-config", _rc(tmp_path), "--subject", "engine",
                   "--manifests", *manifests[:2], "--csv", str(tmp_path / "x.csv"), "--metrics",
                   str(tmp_path / "x.json"), "-o", str(tmp_path / "x.tex")])
    assert rc == 2


# --- cost fit (one cost model per experiment: specrepro.engine.results.modelfit) ------------------------------

C_KV, C_COMPUTE, C_FIXED, OVERHEAD = 1e-6, 2e-5, 1e-3, 5e-4
D_KV, D_SPEC = 3e-7, 4e-4


def steps_table(exp="e2"):
    """A cost-fit sweep (no SD) whose target times follow the coefficients above exactly."""
    rows = []
    for B in (1, 2, 4):
        for P in (16, 48):
            for j in range(4):
                n, kv = (B * P, 0) if j == 0 else (B, B * (P + j))
                rows.append({"step": j, "phase": "prefill" if j == 0 else "decode", "role": "target",
                             "method": "none", "batch_size": B, "prompt_len": P, "k": 0, "kv_tokens": kv,
                             "batched_tokens": n, "seconds": C_KV * kv + C_COMPUTE * n + C_FIXED,
                             "overhead_s": OVERHEAD + (1e-4 if j % 2 else -1e-4), "clock": "cpu"})
    t = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    t.insert(0, "exp", exp)
    return t


def timings_table(method, exp="e1"):
    """A profiled pass's step table (breakdown.step_table columns) of known target and drafter times."""
    rows = []
    for B in (1, 4):
        for P in (20, 60):
            rows.append(dict(step=len(rows), num_reqs=B, scheduled_tokens=B * P, context_tokens=0, prefill_reqs=B))
            for j in range(1, 6):
                n = B * (4 if method != "none" else 1)
                rows.append(dict(step=len(rows), num_reqs=B, scheduled_tokens=n, context_tokens=B * (P + 4 * j) - B,
                                 prefill_reqs=0))
    t = pd.DataFrame(rows)
    kv = t["context_tokens"] + t["num_reqs"] - t["prefill_reqs"]
    t["verification_s"] = C_KV * kv + C_COMPUTE * t["scheduled_tokens"] + C_FIXED
    decode = t["prefill_reqs"] == 0
    t["drafting_s"] = ((D_KV * kv + D_SPEC * t["scheduled_tokens"] / t["num_reqs"]) * decode) if method != "none" else 0.0
    t["n_drafting"] = int(method != "none")
    t["sampling_s"] = 1e-5
    t["step_s"] = t["verification_s"] + t["drafting_s"] + OVERHEAD
    t["method"], t["exp"], t["config"] = method, exp, "none" if method == "none" else f"{method}-k3"
    return t


@pytest.fixture
def costfit_run(tmp_path):
    """Experiment e1 profiled (no SD and EAGLE), its cost model fitted by the CLI; e2 profiled without SD only."""
    out = {}
    for exp, methods in (("e1", ("none", "eagle")), ("e2", ("none",))):
        d = tmp_path / "engine" / exp / "profile"
        timings, sweeps = [], []
        for m in methods:
            cfg = "none" if m == "none" else f"{m}-k3"
            write_parquet(d / f"{cfg}.timings.parquet", timings_table(m, exp))
            write_parquet(d / f"{cfg}.steps.parquet", steps_table(exp) if m == "none" else pd.DataFrame())
            timings.append(str(d / f"{cfg}.timings.parquet"))
            sweeps.append(str(d / f"{cfg}.steps.parquet"))
        fit = tmp_path / "engine" / exp
        rc = cli.main(["fit-engine-cost-model", "--exp", exp, "--model", "m1", "--hardware", "cpu", "--timings", *timings,
                       "--sweeps", *sweeps, "-o", str(fit / "cost_model.yaml"), "--report", str(fit / "cost_model.json"),
                       "--residuals", str(fit / "cost_model.residuals.csv")])
        assert rc == 0
        out[exp] = fit
    return tmp_path, out


def _costfit(tmp_path, fits, tag):
    d = tmp_path / "figures" / tag
    outs = [d / "fig_costfit-engine.pdf", d / "fig_costfit-engine.csv"]
    rc = cli.main(["figure", "fig_costfit", "--run-config", _rc(tmp_path), "--subject", "engine",
                   "--reports", *[str(f / "cost_model.json") for f in fits.values()],
                   "--residuals", *[str(f / "cost_model.residuals.csv") for f in fits.values()],
                   "--csv", str(outs[1]), "-o", str(outs[0])])
    assert rc == 0
    return tuple(p.read_bytes() for p in outs)


def test_costfit_recovers_known_coefficients_per_experiment(costfit_run):
    from specrepro.core.costmodel import load_cost_model

    tmp_path, fits = costfit_run
    a = _costfit(tmp_path, fits, "a")
    assert a == _costfit(tmp_path, fits, "b")
    assert a[0].startswith(b"%PDF") and b"/CreationDate" not in a[0]
    cm = load_cost_model(str(fits["e1"] / "cost_model.yaml"), drafter="eagle")
    assert cm.name == "engine-e1/eagle"
    assert (cm.c_kv, cm.c_compute, cm.c_fixed) == pytest.approx((C_KV, C_COMPUTE, C_FIXED), rel=1e-6)
    assert cm.overhead == pytest.approx(OVERHEAD, rel=0.05)
    # one k profiled: d_fixed cannot be told apart from d_spec * (k + 1); it is 0 and listed as assumed
    assert (cm.d_kv, cm.d_spec, cm.d_fixed) == pytest.approx((D_KV, D_SPEC, 0.0), rel=1e-6, abs=1e-12)
    rep = read_json(fits["e1"] / "cost_model.json")
    # target: 2 configurations x 24 profiled steps + the no-SD sweep's 24
    assert rep["target"]["r2"] == pytest.approx(1.0) and rep["target"]["n_points"] == 2 * 24 + 24
    assert rep["drafters"]["eagle"]["n_points"] == 20 and "drafters.eagle.d_fixed" in rep["assumed"]
    assert rep["source"] == "profile" and rep["shortest_step_s"] > 0
    t = pd.read_csv(io.BytesIO(a[1]))
    assert list(t["exp"]) == ["e1", "e1", "e2"] and list(t["role"]) == ["target", "drafter", "target"]
    # e2's own model: its own steps only (no drafter: the eagle section is zeros)
    e2 = load_cost_model(str(fits["e2"] / "cost_model.yaml"))
    assert (e2.d_kv, e2.d_spec, e2.d_fixed) == (0.0, 0.0, 0.0)


def test_costfit_without_steps_or_points_is_an_error(tmp_path):
    empty = tmp_path / "none.timings.parquet"
    write_parquet(empty, pd.DataFrame())
    rc = cli.main(["fit-engine-cost-model", "--exp", "x", "--timings", str(empty), "-o", str(tmp_path / "x.yaml"),
                   "--report", str(tmp_path / "x.json"), "--residuals", str(tmp_path / "x.csv")])
    assert rc == 2 and not (tmp_path / "x.yaml").exists()


def test_breakdown_share_intervals(breakdown_run):
    tmp_path, paths = breakdown_run
    _, csv, _ = _breakdown(tmp_path, paths, "ci")
    t = pd.read_csv(io.BytesIO(csv))
    r = t[(t["config"] == "none") & (t["batch_size"] == 1)].iloc[0]
    assert (r["verification_pct_ci_low"], r["verification_pct_ci_high"]) == pytest.approx((80, 90))
    m = read_json(tmp_path / "figures" / "ci" / "engine-breakdown.json")
    key = "engine.e1.cnn.none.breakdown.verification_pct.b1"
    # two requests: 8/10 and 27/30, pooled 35/40; resamples give 80 %, 87.5 % or 90 %
    assert (m[f"{key}.ci_low"], m[key], m[f"{key}.ci_high"], m[f"{key}.n"]) == pytest.approx((80, 87.5, 90, 2))
    assert f"engine.e1.cnn.none.breakdown.verification_pct.b4.ci_low" not in m  # one request
    # the max over configurations carries the envelope of their intervals
    mx = "engine.breakdown.verification_pct.max"
    assert m[mx] == pytest.approx(95.0) and m[f"{mx}.ci_high"] >= m[mx]
