"""Cost-model fit: recovery of known coefficients, identifiability errors, step shapes, CLI, real sweep."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from specrepro.engine.run.breakdown import step_table
from specrepro.engine.results.costfit import fit_cost_model, nnls_small
from specrepro.engine.run.profile import expected_steps, steps_from_timings
from specrepro.core.costmodel import load_cost_model
from specrepro.core.io import SpecReproError, write_parquet


def synthetic_timings(cost, noise=1e-3, seed=0) -> pd.DataFrame:
    """Target, drafter and n-gram rows from a cost model's own formulas, with relative noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for B in (1, 8, 16, 32, 64):
        for P in (128, 512, 1024):
            rows.append(("target", 0, B * P, 0.0))
            rows.append(("drafter", 0, P, 0.0))
            for j in range(1, 200, 7):
                kv = B * (P + j)
                rows += [("target", kv, B, 0.0), ("target", kv, B * 4, 0.0), ("drafter", kv, 4, 0.0),
                         ("ngram", kv, B * 4, 0.0)]
    t = pd.DataFrame(rows, columns=["role", "kv_tokens", "batched_tokens", "seconds"])
    target = cost.target(t["kv_tokens"], t["batched_tokens"])
    sec = np.where(t["role"] == "target", target,
                   np.where(t["role"] == "drafter", cost.eagle_draft(t["kv_tokens"], t["batched_tokens"]),
                            cost.ngram_draft(target)))
    t["seconds"] = sec * (1 + rng.normal(0.0, noise, len(t)))
    t["overhead_s"] = np.where(t["role"] == "target", cost.overhead * (1 + rng.normal(0.0, noise, len(t))), np.nan)
    return t


def test_fit_recovers_the_llama_h100_coefficients_within_one_percent():
    cost = load_cost_model("llama3.1-8b-h100")
    fit = fit_cost_model(synthetic_timings(cost))
    want = {"target.c_kv": cost.c_kv, "target.c_compute": cost.c_compute, "target.c_fixed": cost.c_fixed,
            "eagle.d_kv": cost.d_kv, "eagle.d_spec": cost.d_spec, "eagle.d_fixed": cost.d_fixed,
            "ngram.draft_fraction": cost.ngram_fraction, "overhead_per_step": cost.overhead}
    for key, value in want.items():
        assert fit.coefficients[key] == pytest.approx(value, rel=0.01), key
    assert fit.not_fitted == []
    assert fit.roles["target"].r2 > 0.999 and fit.roles["drafter"].r2 > 0.99


def test_one_distinct_kv_is_a_clear_error():
    t = pd.DataFrame({"role": "target", "kv_tokens": 512, "batched_tokens": [1, 2, 4, 8, 16],
                      "seconds": [1.0, 1.1, 1.2, 1.4, 1.8]})
    with pytest.raises(SpecReproError, match=r"kv_tokens is 512 in all 5 rows, so c_kv cannot be told apart"):
        fit_cost_model(t)
    t2 = t.assign(kv_tokens=[1, 2, 3, 4, 5], batched_tokens=[2, 4, 6, 8, 10])
    with pytest.raises(SpecReproError, match="collinear"):
        fit_cost_model(t2)
    with pytest.raises(SpecReproError, match="at least 4"):
        fit_cost_model(t.iloc[:3])


def test_fit_is_non_negative():
    X = np.column_stack([np.arange(10.0), np.arange(10.0) ** 2, np.ones(10)])
    y = X @ np.array([-1.0, 2.0, 3.0])
    beta = nnls_small(X, y)
    assert (beta >= 0).all() and beta[0] == 0.0


def test_untouched_coefficients_come_from_the_base_model():
    cost = load_cost_model("llama3.1-8b-h100")
    t = synthetic_timings(cost)
    fit = fit_cost_model(t[t["role"] == "target"].drop(columns="overhead_s"), base=cost)
    assert set(fit.not_fitted) == {"eagle.d_kv", "eagle.d_spec", "eagle.d_fixed", "ngram.draft_fraction",
                                   "overhead_per_step"}
    assert fit.coefficients["eagle.d_fixed"] == cost.d_fixed
    assert fit_cost_model(t[t["role"] == "target"]).coefficients["eagle.d_fixed"] == 0.0


def fake_steps(B, P, n_steps, k=None, forward=100e-6, draft=0.0, step=300e-6, shapes=None) -> pd.DataFrame:
    """Step records of a sweep run as the plugin writes them, with the shapes of the sweep's design."""
    recs = []
    for j in range(n_steps):
        if j == 0:
            n, ctx, pre = B * P, 0, B
        elif k is None:
            n, ctx, pre = B, B * (P + j - 1), 0
        else:
            n, ctx, pre = B * (k + 1), B * (P + (k + 1) * (j - 1)), 0
        if shapes:
            n, ctx = shapes.get(j, (n, ctx))
        recs.append({"step": j, "clock": "cpu", "step_s": step, "drafting_s": draft, "verification_s": forward + j * 1e-6,
                     "sampling_s": 0.0, "n_drafting": int(draft > 0), "n_verification": 1, "n_sampling": 1,
                     "num_reqs": B, "scheduled_tokens": n, "draft_tokens": 0 if k is None or j == 0 else B * k,
                     "context_tokens": ctx, "prefill_reqs": pre})
    return step_table(recs)


def test_step_shapes_without_sd():
    st = steps_from_timings(fake_steps(4, 32, 8), batch_size=4, prompt_len=32, max_tokens=8)
    assert st["role"].unique().tolist() == ["target"]
    assert st["batched_tokens"].tolist() == [128] + [4] * 7
    assert st["kv_tokens"].tolist() == [0] + [4 * (32 + j) for j in range(1, 8)]
    assert st["seconds"].iloc[2] == pytest.approx(102e-6)
    assert st["overhead_s"].iloc[0] == pytest.approx(200e-6)


def test_step_shapes_of_an_all_accepting_draft_model():
    n = expected_steps(16, "draft_model", 3)
    assert n == 5
    st = steps_from_timings(fake_steps(2, 10, n, k=3, draft=50e-6), batch_size=2, prompt_len=10, max_tokens=16, k=3,
                            method="draft_model", spec_metrics={"num_draft_tokens": 24, "num_accepted_tokens": 24})
    tgt, dr = st[st["role"] == "target"], st[st["role"] == "drafter"]
    assert tgt["batched_tokens"].tolist() == [20, 8, 8, 8, 8]
    assert tgt["kv_tokens"].tolist() == [0, 2 * 11, 2 * 15, 2 * 19, 2 * 23]
    assert dr["batched_tokens"].tolist() == [10, 4, 4, 4, 4] and dr["kv_tokens"].tolist() == tgt["kv_tokens"].tolist()
    assert tgt["overhead_s"].iloc[0] == pytest.approx(300e-6 - 100e-6 - 50e-6)


def test_unknown_shapes_raise():
    with pytest.raises(SpecReproError, match="7 engine steps recorded, expected 8"):
        steps_from_timings(fake_steps(1, 8, 7), batch_size=1, prompt_len=8, max_tokens=8)
    with pytest.raises(SpecReproError, match=r"step 3: measured 1 requests, 1 tokens scheduled, kv 99"):
        steps_from_timings(fake_steps(1, 8, 8, shapes={3: (1, 98)}), batch_size=1, prompt_len=8, max_tokens=8)
    with pytest.raises(SpecReproError, match="depend on what is accepted"):
        steps_from_timings(fake_steps(1, 8, 7), batch_size=1, prompt_len=8, max_tokens=8, k=3, method="ngram")
    with pytest.raises(SpecReproError, match="accepted 20 of 24"):
        steps_from_timings(fake_steps(2, 8, 5, k=3), batch_size=2, prompt_len=8, max_tokens=16, k=3,
                           method="draft_model", spec_metrics={"num_draft_tokens": 24, "num_accepted_tokens": 20})


def test_cli_writes_a_loadable_model_report_and_deterministic_plot(tmp_path):
    from specrepro.cli import main

    cost = load_cost_model("llama3.1-8b-h100")
    t = synthetic_timings(cost)
    write_parquet(tmp_path / "a.parquet", t.iloc[: len(t) // 2])
    write_parquet(tmp_path / "b.parquet", t.iloc[len(t) // 2:])
    args = ["fit-cost-model", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"), "-o", str(tmp_path / "m.yaml"),
            "--plot", str(tmp_path / "r.pdf"), "--report", str(tmp_path / "fit.json"), "--model", "x"]
    assert main(args) == 0
    fitted = load_cost_model(str(tmp_path / "m.yaml"))
    assert fitted.name == "m" and fitted.c_compute == pytest.approx(cost.c_compute, rel=0.01)
    rep = json.loads((tmp_path / "fit.json").read_text())
    assert rep["n_points"] == len(t) and rep["roles"]["target"]["r2"] > 0.999
    assert set(rep["roles"]) == {"target", "drafter", "ngram"}
    first = (tmp_path / "r.pdf").read_bytes()
    assert first.startswith(b"%PDF")
    assert main(args) == 0
    assert (tmp_path / "r.pdf").read_bytes() == first


def test_cli_user_error_exits_2(tmp_path, capsys):
    from specrepro.cli import main

    write_parquet(tmp_path / "s.parquet", pd.DataFrame({"role": "target", "kv_tokens": 5, "batched_tokens": [1, 2, 3, 4],
                                                        "seconds": [1.0, 2.0, 3.0, 4.0]}))
    assert main(["fit-cost-model", str(tmp_path / "s.parquet"), "-o", str(tmp_path / "m.yaml")]) == 2
    assert "fit-cost-model: error: role target: kv_tokens is 5" in capsys.readouterr().err
    assert not (tmp_path / "m.yaml").exists()
    assert main(["fit-cost-model", str(tmp_path / "missing.parquet"), "-o", str(tmp_path / "m.yaml")]) == 2


@pytest.mark.engine
def test_real_tiny_fit_from_a_profiled_vllm_sweep(tmp_path):
    from specrepro.core.io import read_parquet

    import _sd_engine as eng

    none = read_parquet(eng.scenario("none") / "steps.parquet")
    draft = read_parquet(eng.scenario("draft_model") / "steps.parquet")
    n_cfg = len(eng.SWEEP_B) * len(eng.SWEEP_P)
    assert len(none) == n_cfg * eng.SWEEP_MAX_TOKENS  # one target row per step, steps verified inside
    steps_sd = 1 + math.ceil((eng.SWEEP_MAX_TOKENS - 1) / (eng.K + 1))
    assert len(draft) == 2 * n_cfg * steps_sd
    fit = fit_cost_model(pd.concat([none, draft], ignore_index=True))
    print({r: (f.r2, f.n_points) for r, f in fit.roles.items()}, fit.coefficients)
    assert fit.roles["target"].n_points == n_cfg * (eng.SWEEP_MAX_TOKENS + steps_sd)
    assert fit.roles["drafter"].n_points == n_cfg * steps_sd
    assert all(math.isfinite(v) and v >= 0 for v in fit.coefficients.values())
    assert fit.coefficients["target.c_fixed"] > 0 and fit.coefficients["overhead_per_step"] > 0
    assert math.isfinite(fit.roles["target"].r2)
