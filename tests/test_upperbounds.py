"""Per-experiment cost models, the simulator on an experiment's own traces, and the closed loop against its
measured speedups: hand-made cases with known answers."""

from __future__ import annotations

import inspect

import json
import math

import numpy as np
import pandas as pd
import pytest

from conftest import ROUND_COST
from specrepro.core.costmodel import load_cost_model
from specrepro.analysis import closedloop
from specrepro.analysis import enginesim
from specrepro.engine.results import modelfit
from specrepro.core.io import SpecReproError
from specrepro.sim.simulator import SimSpec, Workload, baseline_latency, simulate, simulate_reference
from specrepro.core.traces import TraceRecord


# --- the closed loop's join ---------------------------------------------------------------------------


def _meas(rows):
    return pd.DataFrame([{"exp": "e", "dataset": d, "method": m, "k": k, "batch_size": b, "config": f"{m}-k{k}",
                          "requests": 2, "request_ids": ("a", "b"), "measured": v, "measured_ci_low": v - 0.05,
                          "measured_ci_high": v + 0.05} for d, m, k, b, v in rows])


def _sim(rows):
    return pd.DataFrame([{"exp": "e", "dataset": d, "method": m, "k": k, "batch_size": b, "request_ids": ("a", "b"),
                          "simulated": v, "simulated_ci_low": v, "simulated_ci_high": v} for d, m, k, b, v in rows])


def test_join_pairs_only_the_same_method_k_and_batch_size():
    # same experiment and dataset everywhere: only method, k and batch size tell the rows apart
    meas = _meas([("ds", "ngram", 3, 1, 1.20), ("ds", "ngram", 3, 4, 1.10), ("ds", "eagle", 3, 1, 1.50),
                  ("ds", "ngram", 5, 1, 1.30), ("ds2", "ngram", 3, 1, 0.90)])
    # simulated rows in another order, one key without a measurement (eagle, B = 4), one measurement without a
    # simulation (ds2)
    sim = _sim([("ds", "eagle", 3, 4, 2.40), ("ds", "ngram", 5, 1, 2.30), ("ds", "eagle", 3, 1, 2.50),
                ("ds", "ngram", 3, 4, 2.10), ("ds", "ngram", 3, 1, 2.20)])
    # the trap: a join on fewer keys pairs simulations with measurements of another method, k or batch size
    naive = meas.merge(sim, on=["exp", "dataset", "batch_size"])
    assert (naive["simulated"] - naive["measured"]).round(2).nunique() > 1
    out = closedloop.join(sim, meas)
    want = {("ngram", 3, 1): (1.20, 2.20), ("ngram", 3, 4): (1.10, 2.10), ("eagle", 3, 1): (1.50, 2.50),
            ("ngram", 5, 1): (1.30, 2.30)}
    got = {(r.method, r.k, r.batch_size): (r.measured, r.simulated) for r in out.itertuples()}
    assert got == want
    assert set(out["dataset"]) == {"ds"}
    assert out["error"].to_numpy() == pytest.approx([2.5 / 1.5 - 1, 2.2 / 1.2 - 1, 2.1 / 1.1 - 1, 2.3 / 1.3 - 1])


def test_the_error_splits_into_the_sd_job_and_the_no_sd_job():
    """A speedup divides two jobs' throughputs: with the cost model exact on the SD jobs and the no-SD job 15 % slower
    than it predicts (throughput 100 measured against 115 simulated), every SD point of that (dataset, B) comes out
    1 / 1.15 - 1 = -13 % (pessimistic) with sd_error 0 and baseline_error +15 %; the summary names that job."""
    meas = _meas([("ds", "ngram", 3, 1, 1.6), ("ds", "eagle", 3, 1, 0.8), ("ds2", "ngram", 3, 1, 1.5)])
    meas["measured_sd_throughput"] = [160.0, 80.0, 150.0]
    meas["measured_baseline_throughput"] = [100.0, 100.0, 100.0]
    sim = _sim([("ds", "ngram", 3, 1, 160 / 115), ("ds", "eagle", 3, 1, 80 / 115), ("ds2", "ngram", 3, 1, 153 / 105)])
    sim["simulated_sd_throughput"] = [160.0, 80.0, 153.0]
    sim["simulated_baseline_throughput"] = [115.0, 115.0, 105.0]
    out = closedloop.join(sim, meas).set_index(["dataset", "method"])
    assert out.loc[("ds", "ngram"), "error"] == pytest.approx(1 / 1.15 - 1)
    assert out.loc[("ds", "eagle"), "error"] == pytest.approx(1 / 1.15 - 1)
    assert out.loc[[("ds", "ngram"), ("ds", "eagle")], "sd_error"].to_numpy() == pytest.approx([0.0, 0.0])
    assert out.loc[[("ds", "ngram"), ("ds", "eagle")], "baseline_error"].to_numpy() == pytest.approx([0.15, 0.15])
    assert out.loc[("ds2", "ngram"), ["sd_error", "baseline_error"]].to_numpy() == pytest.approx([0.02, 0.05])
    split = (1 + out["sd_error"]) / (1 + out["baseline_error"])
    assert (1 + out["error"]).to_numpy() == pytest.approx(split.to_numpy())
    s = closedloop.summarise(out.reset_index())
    assert s["baseline_jobs"] == 2 and s["worst_baseline"] == {"dataset": "ds", "batch_size": 1,
                                                               "baseline_error": pytest.approx(0.15)}
    assert s["median_abs_sd_error"] == pytest.approx(0.0) and s["median_abs_baseline_error"] == pytest.approx(0.10)
    text = closedloop.explanation(s, {}, "cpu")
    assert "+15 % at ds, B = 1" in text and "0 % on the SD jobs and 10 % on the no-SD ones" in text
    # the report names the dataset by its label, as the table above the sentence does
    assert "+15 % at grade-school math (GSM8K-shaped), B = 1" in closedloop.explanation(
        s, {}, "cpu", {"ds": "grade-school math (GSM8K-shaped)"})
    # a prediction without throughputs (the falsification's no-traces one) leaves the split empty
    bare = closedloop.join(_sim([("ds", "ngram", 3, 1, 1.5)]), _meas([("ds", "ngram", 3, 1, 1.6)]))
    assert bare[["sd_error", "baseline_error"]].isna().all().all() and "baseline_jobs" not in closedloop.summarise(bare)


def test_join_refuses_ambiguous_or_different_requests():
    meas = _meas([("ds", "ngram", 3, 1, 1.2)])
    with pytest.raises(SpecReproError, match="twice"):
        closedloop.join(pd.concat([_sim([("ds", "ngram", 3, 1, 2.0)])] * 2), meas)
    with pytest.raises(SpecReproError, match="lack key column"):
        closedloop.join(_sim([("ds", "ngram", 3, 1, 2.0)]).drop(columns=["k"]), meas)
    other = _sim([("ds", "ngram", 3, 1, 2.0)]).assign(request_ids=[("a", "c")])
    with pytest.raises(SpecReproError, match="different requests"):
        closedloop.join(other, meas)


def _points(rows):
    cols = ["exp", "model", "method", "k", "config", "dataset", "request_index", "batch_size", "status", "throughput"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows]).assign(k=lambda d: d["k"].astype("Int64"))


def test_measured_speedup_uses_the_requests_both_ran_that_are_traced():
    pts = _points([
        ("e", "m", "none", None, "none", "ds", 0, 1, "ok", 10.0), ("e", "m", "none", None, "none", "ds", 1, 1, "ok", 20.0),
        ("e", "m", "none", None, "none", "ds", 2, 1, "ok", 40.0),
        ("e", "m", "ngram", 3, "ngram-k3", "ds", 0, 1, "ok", 15.0), ("e", "m", "ngram", 3, "ngram-k3", "ds", 1, 1, "ok", 30.0),
        ("e", "m", "ngram", 3, "ngram-k3", "ds", 2, 1, "failed", float("nan")),
        # k by batch size: no single k, never compared
        ("e", "m", "ngram", 3, "ngram-k3-bs", "ds", 0, 1, "ok", 99.0),
        # not traced
        ("e", "m", "mtp", 3, "mtp-k3", "ds", 0, 1, "ok", 99.0),
    ])
    ids = {"ds": {0: "r0", 1: "r1", 2: "r2"}}
    m = closedloop.measured_points(pts, ids, {"ds": {"r0", "r1", "r2"}}, ["ngram"])
    assert len(m) == 1 and m.iloc[0]["config"] == "ngram-k3" and m.iloc[0]["request_ids"] == ("r0", "r1")
    assert m.iloc[0]["measured"] == pytest.approx((15 + 30) / (10 + 20))
    # a request outside the trace set (its outputs differed between methods) is left out of both sides
    m2 = closedloop.measured_points(pts, ids, {"ds": {"r1"}}, ["ngram"])
    assert m2.iloc[0]["measured"] == pytest.approx(30 / 20) and m2.iloc[0]["request_ids"] == ("r1",)


def test_a_same_window_reference_is_the_speedups_baseline_and_its_drift_from_the_no_sd_job_is_stated():
    """SD points that carry the no-SD reference their job timed beside them divide by it, not by the no-SD job (here
    20 % faster than the references: a job that ran in a fast window); a configuration where one point lacks it
    falls back to the no-SD job for all of its points."""
    pts = _points([
        ("e", "m", "none", None, "none", "ds", 0, 1, "ok", 12.0), ("e", "m", "none", None, "none", "ds", 1, 1, "ok", 24.0),
        ("e", "m", "ngram", 3, "ngram-k3", "ds", 0, 1, "ok", 15.0), ("e", "m", "ngram", 3, "ngram-k3", "ds", 1, 1, "ok", 30.0),
        ("e", "m", "eagle", 3, "eagle-k3", "ds", 0, 1, "ok", 8.0), ("e", "m", "eagle", 3, "eagle-k3", "ds", 1, 1, "ok", 16.0),
    ])
    pts["reference_throughput"] = [None, None, 10.0, 20.0, 11.0, None]
    ids = {"ds": {0: "r0", 1: "r1"}}
    m = closedloop.measured_points(pts, ids, {"ds": {"r0", "r1"}}, ["ngram", "eagle"]).set_index("method")
    assert m.loc["ngram", "baseline"] == closedloop.SAME_WINDOW
    assert m.loc["ngram", "measured"] == pytest.approx((15 + 30) / (10 + 20))
    assert m.loc["ngram", "measured_baseline_throughput"] == pytest.approx(15.0)
    assert m.loc["ngram", "reference_vs_job"] == pytest.approx(30 / 36 - 1)
    assert m.loc["eagle", "baseline"] == closedloop.NO_SD_JOB and math.isnan(m.loc["eagle", "reference_vs_job"])
    assert m.loc["eagle", "measured"] == pytest.approx((8 + 16) / (12 + 24))
    sim = m.reset_index()[closedloop.KEY + ["request_ids"]].assign(
        simulated=[1.4, 0.7], simulated_ci_low=np.nan, simulated_ci_high=np.nan,
        simulated_sd_throughput=[21.0, 12.0], simulated_baseline_throughput=[15.0, 18.0])
    table = closedloop.join(sim, m.reset_index())
    s = closedloop.summarise(table)
    assert s["same_window_points"] == 1 and s["worst_reference_vs_job"] == pytest.approx(30 / 36 - 1)
    text = closedloop.explanation(s, {}, "cpu")
    assert "1 of the 2 speedups divide by a no-SD reference timed beside each point" in text
    assert "differ from the no-SD job's throughput by 17 % in the median, up to -17 %" in text


def test_the_job_that_ran_in_a_slow_window_is_named_and_the_check_given_without_it():
    """Run 8's case in small: one draft job's references lay 8-12 % below the no-SD job (median -10 %: beyond the 5 %
    the closed loop can resolve), the others' within 2 %; the error without that job's points is stated, in the
    summary, the closed loop's sentence and the falsification table's indented row."""
    from specrepro.figures import engine_falsification_table as ft

    t = pd.DataFrame({"config": ["a", "a", "b", "b", "slow", "slow"], "baseline": closedloop.SAME_WINDOW,
                      "reference_vs_job": [0.01, -0.02, 0.0, 0.02, -0.12, -0.08],
                      "abs_error": [0.02, 0.04, 0.01, 0.09, 0.15, 0.11]})
    d = closedloop.drifted_job(t)
    assert d == {"config": "slow", "points": 2, "median_reference_vs_job": pytest.approx(-0.10),
                 "min_reference_vs_job": pytest.approx(-0.12), "max_reference_vs_job": pytest.approx(-0.08),
                 "others_points": 4, "others_median_abs_error": pytest.approx(0.03),
                 "others_worst_abs_error": pytest.approx(0.09)}
    assert "(hybrid-adaptive: EAGLE (k=5): its references" in closedloop.drift_sentence({**d, "config": "hybrid-adaptive-eagle-k5"})
    assert closedloop.drift_sentence(d).endswith(
        "(slow: its references -12 to -8 % against the no-SD job's throughput), and the pairing cancels a slowdown "
        "only as far as it hits SD and no-SD steps alike; without its 2 points, median |error| 3 %, worst 9 % over "
        "the other 4")
    # within the closed loop's resolution, or one job alone: nothing to set apart
    assert closedloop.drifted_job(t.assign(reference_vs_job=t["reference_vs_job"] / 3)) == {}
    assert closedloop.drifted_job(t[t["config"] == "slow"]) == {}
    rows = ft.rows({"variants": {}}, {"oracle": {"points": 6, "median_abs_error": 0.065, "worst_abs_error": 0.15,
                                                 "mean_error": 0.02, "drifted_job": d}})
    assert list(rows["variant"]) == ["oracle", "oracle" + ft.WITHOUT_DRIFTED]
    assert (r"\quad without slow (4 points) & 3\,\% & 9\,\% & & \multicolumn{4}{l}{slow window: references -10\,\%} "
            r"\\" in ft.to_latex(rows))


def test_ranking_counts_discordant_pairs_within_a_dataset_and_batch_size():
    t = pd.DataFrame({"exp": "e", "dataset": ["a", "a", "a", "b", "b"], "batch_size": 1,
                      "measured": [1.0, 2.0, 3.0, 1.0, 2.0], "simulated": [1.5, 1.4, 3.0, 1.0, 2.0]})
    r = closedloop.ranking(t)
    assert r == {"groups": 2, "groups_agreeing": 1, "concordant_pairs": 3, "discordant_pairs": 1,
                 "ranking_agrees": False}


# --- the per-experiment cost model -------------------------------------------------------------------


def _step_table(cost, *, method, drafting=None, seed=0, k=3):
    rng = np.random.default_rng(seed)
    rows, step = [], 0
    for B in (1, 4):
        for P in (50, 120):
            rows.append(dict(step=step, num_reqs=B, scheduled_tokens=B * P, context_tokens=0, prefill_reqs=B,
                             n_drafting=int(method != "none"), draft_tokens=0))
            step += 1
            for j in range(1, 12):
                n = B * (k + 1 if method != "none" else 1)
                rows.append(dict(step=step, num_reqs=B, scheduled_tokens=n, context_tokens=B * (P + 4 * j) - B,
                                 prefill_reqs=0, n_drafting=int(method != "none"), draft_tokens=n - B))
                step += 1
    t = pd.DataFrame(rows)
    kv = t["context_tokens"] + t["num_reqs"] - t["prefill_reqs"]
    t["verification_s"] = cost.target(kv, t["scheduled_tokens"])
    inp = t["scheduled_tokens"] / t["num_reqs"]
    if drafting is not None and "batch_tokens" in inspect.signature(drafting).parameters:
        t["drafting_s"] = np.where(t["prefill_reqs"] > 0, 0.5, drafting(kv, inp, batch_tokens=t["scheduled_tokens"]))
    else:
        t["drafting_s"] = 0.0 if drafting is None else np.where(t["prefill_reqs"] > 0, 0.5, drafting(kv, inp))
    t["sampling_s"] = 1e-4
    t["step_s"] = t["verification_s"] + t["drafting_s"] + cost.overhead + rng.normal(0, 1e-9, len(t))
    t["method"] = method
    return t


def test_profile_fit_recovers_target_drafter_and_overhead(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(ROUND_COST.replace("d_fixed: 0.01", "d_fixed: 0.0"))
    cost = load_cost_model(str(path))
    rows = pd.concat([
        modelfit.profile_rows(_step_table(cost, method="none"), "none", "none"),
        modelfit.profile_rows(_step_table(cost, method="eagle", drafting=cost.eagle_draft), "eagle", "eagle-k3"),
        modelfit.profile_rows(_step_table(cost, method="ngram", drafting=lambda kv, n: 0.02 * cost.target(kv, n * 1)),
                              "ngram", "ngram-k3"),
    ], ignore_index=True)
    fit = modelfit.fit_profile(rows, ["none", "eagle-k3", "ngram-k3"])
    assert fit.target.coefficients == pytest.approx({"c_kv": 0.001, "c_compute": 0.01, "c_fixed": 0.1}, rel=1e-6)
    # one k: d_spec absorbs d_fixed (= 0 here), and the assumption is written down
    assert fit.drafters["eagle"].coefficients == pytest.approx({"d_kv": 1e-4, "d_spec": 1e-3, "d_fixed": 0.0,
                                                                "d_tok": 0.0}, rel=1e-6, abs=1e-12)
    assert "drafters.eagle.d_fixed" in fit.assumed and "one k" in fit.assumed["drafters.eagle.d_tok"]
    # prefill drafting (0.5 s) is not a drafter row: the simulator charges the prefill as T(0, B P) only
    assert (rows[rows["role"] == "drafter"]["seconds"] < 0.5).all()
    assert fit.overhead == pytest.approx(1.0, rel=1e-6)
    # n-gram: drafting is a share of the verification of the step (per request input 4 = B*4 / B, n = B*4)
    assert fit.ngram is not None and fit.ngram.n_points == 2 * 2 * 11


def test_profile_fit_over_k_and_batch_sizes_recovers_the_per_token_drafting(tmp_path):
    """Profiled passes at two k and two batch sizes tell the drafter's four terms apart: d_tok (its k passes each
    take every request's token) is recovered, is written to the file, and loads back."""
    path = tmp_path / "c.yaml"
    path.write_text(ROUND_COST.replace("d_fixed: 0.01", "d_fixed: 0.002, d_tok: 0.0005"))
    cost = load_cost_model(str(path))
    assert cost.d_tok == 0.0005
    assert cost.eagle_draft(100, 4, 16) == pytest.approx(1e-4 * 100 + 1e-3 * 4 + 0.002 + 0.0005 * 16)
    assert cost.eagle_draft(100, 4) == pytest.approx(1e-4 * 100 + 1e-3 * 4 + 0.002 + 0.0005 * 4)  # one request
    rows = pd.concat([modelfit.profile_rows(_step_table(cost, method="none"), "none", "none")] + [
        modelfit.profile_rows(_step_table(cost, method="eagle", drafting=cost.eagle_draft, k=k), "eagle", f"eagle-k{k}")
        for k in (3, 5)], ignore_index=True)
    assert set(rows[rows["role"] == "drafter"]["batch_tokens"] / rows[rows["role"] == "drafter"]["batched_tokens"]) == {1, 4}
    fit = modelfit.fit_profile(rows, ["none", "eagle-k3", "eagle-k5"])
    assert fit.drafters["eagle"].coefficients == pytest.approx(
        {"d_kv": 1e-4, "d_spec": 1e-3, "d_fixed": 0.002, "d_tok": 0.0005}, rel=1e-5, abs=1e-10)
    assert not any(k.startswith("drafters.eagle") for k in fit.assumed)
    out = tmp_path / "fit.yaml"
    out.write_text(modelfit.cost_model_text(modelfit.cost_model_doc(fit, name="x", model="m", hardware="cpu", images={},
                                                                    source="test")))
    assert load_cost_model(str(out), drafter="eagle").d_tok == pytest.approx(0.0005, rel=1e-5)
    # one batch size: d_tok cannot be told from d_spec, and stays 0 with the reason
    one_b = rows[(rows["batch_tokens"] == rows["batched_tokens"]) | (rows["role"] != "drafter")]
    fit1 = modelfit.fit_profile(one_b, ["none", "eagle-k3", "eagle-k5"])
    assert fit1.drafters["eagle"].coefficients["d_tok"] == 0.0
    assert "one batch size" in fit1.assumed["drafters.eagle.d_tok"]


def test_cost_model_file_loads_per_drafter(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(ROUND_COST)
    base = load_cost_model(str(path))
    rows = pd.concat([
        modelfit.profile_rows(_step_table(base, method="none"), "none", "none"),
        modelfit.profile_rows(_step_table(base, method="eagle", drafting=lambda kv, i: 2e-4 * kv + 3e-3 * i), "eagle", "e"),
        modelfit.profile_rows(_step_table(base, method="draft_model", drafting=lambda kv, i: 5e-4 * kv + 7e-3 * i),
                              "draft_model", "d"),
    ], ignore_index=True)
    fit = modelfit.fit_profile(rows, ["none", "e", "d"])
    doc = modelfit.cost_model_doc(fit, name="engine-x", model="m", hardware="cpu", images={}, source="test")
    out = tmp_path / "fit.yaml"
    out.write_text(modelfit.cost_model_text(doc))
    e, d = load_cost_model(str(out), drafter="eagle"), load_cost_model(str(out), drafter="draft_model")
    assert (e.d_kv, e.d_spec) == pytest.approx((2e-4, 3e-3)) and (d.d_kv, d.d_spec) == pytest.approx((5e-4, 7e-3))
    assert e.c_kv == d.c_kv == pytest.approx(0.001)
    with pytest.raises(SpecReproError, match="no drafter 'mtp'"):
        load_cost_model(str(out), drafter="mtp")


def test_bench_fit_recovers_the_baseline_from_wall_times(round_cost):
    rows = []
    for B in (1, 2, 4):
        for P, L in ((30, 40), (80, 25), (50, 60)):
            wall = float(baseline_latency(round_cost, B, np.array([P]), np.array([L]))[0])
            rows.append({"config": "none", "method": "none", "k": None, "batch_size": B, "wall_s": wall, "P": P,
                         "L": L, "steps": L, "sum_kv": B * ((L - 1) * P + L * (L - 1) / 2),
                         "sum_n": B * P + B * (L - 1), "drafted": 0.0})
    fit = modelfit.fit_bench(pd.DataFrame(rows))
    c = fit.target.coefficients
    # the per-step overhead is folded into the constant
    assert (c["c_kv"], c["c_compute"], c["c_fixed"]) == pytest.approx((0.001, 0.01, 0.1 + 1.0), rel=1e-6)
    assert fit.overhead == 0.0 and fit.source == "bench"


# --- the simulator on an experiment's traces ----------------------------------------------------------


def _records(n=5, L=30, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        acc = {m: rng.integers(1, 6, L).astype(np.int64) for m in ("ngram", "eagle", "draft_model")}
        for a in acc.values():
            a[0] = 1
        out.append(TraceRecord(f"r{i}", np.arange(20 + 7 * i, dtype=np.int64), np.arange(L, dtype=np.int64), acc, i + 1))
    return out


def test_combine_of_all_proposers_is_the_oracle_on_the_per_position_best(round_cost, tmp_path):
    recs = _records()
    w3 = enginesim.workload(recs, "ds", "ngram", "eagle", third=["draft_model"])
    spec = SimSpec("combined3", "oracle", num_requests=len(recs))
    got = simulate(w3, spec, [1, 4], round_cost).summary["speedup"].to_numpy()
    # the same thing by hand: the model slot holding max(EAGLE, draft), the paper's two-proposer combine
    best = [TraceRecord(r.id, r.prompt_token_ids, r.generated_token_ids,
                        {"ngram": r.acc_len["ngram"], "eagle": np.maximum(r.acc_len["eagle"], r.acc_len["draft_model"])},
                        r.line) for r in recs]
    w2 = enginesim.workload(best, "ds", "ngram", "eagle")
    ref = simulate_reference(w2, SimSpec("combined", "oracle", num_requests=len(recs)), [1, 4], round_cost)
    assert got == pytest.approx(ref.summary["speedup"].to_numpy(), rel=1e-12)


def test_experiment_rows_are_the_simulator_with_each_drafters_cost(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(ROUND_COST + "drafters:\n  eagle: {d_kv: 0.0001, d_spec: 0.001, d_fixed: 0.01}\n"
                    "  draft_model: {d_kv: 0.0005, d_spec: 0.02, d_fixed: 0.0}\n")
    recs = _records()
    summary, doc = enginesim.simulate_experiment("e", {"ds": recs, "ds2": _records(seed=2)}, ["ngram", "eagle", "draft_model"],
                                                 str(path), [1, 8], ngram_match=0.3, seed=7, k_candidates=[1, 2, 3])
    w = enginesim.workload(recs, "ds", "ngram", "draft_model")
    spec = SimSpec("eagle", "fixed-3", ngram_match_prob=0.3, num_requests=len(recs), seed=7)
    ref = simulate_reference(w, spec, [1, 8], load_cost_model(str(path), drafter="draft_model")).summary
    mine = summary[(summary["dataset"] == "ds") & (summary["proposer"] == "draft_model") & (summary["policy"] == "fixed-3")]
    assert mine["speedup"].to_numpy() == pytest.approx(ref["speedup"].to_numpy(), rel=1e-12)
    w_ng = enginesim.workload(recs, "ds", "ngram", "ngram")
    ref_ng = simulate_reference(w_ng, SimSpec("ngram", "fixed-3", ngram_match_prob=0.3, num_requests=len(recs), seed=7),
                                [1, 8], load_cost_model(str(path))).summary
    mine_ng = summary[(summary["dataset"] == "ds") & (summary["proposer"] == "ngram") & (summary["policy"] == "fixed-3")]
    assert mine_ng["speedup"].to_numpy() == pytest.approx(ref_ng["speedup"].to_numpy(), rel=1e-12)
    want = {"ngram", "eagle", "draft_model", "ngram+eagle", "ngram+draft_model", "combined"}
    assert set(summary["proposer"]) == want
    assert set(summary[summary["proposer"] == "ngram+eagle"]["policy"]) == {"oracle", "adaptive"}
    assert set(doc["proposers"]) == {"ngram", "eagle", "draft_model"}
    # each dataset's k-by-batch-size schedule is chosen on the other one
    assert set(doc["proposers"]["eagle"]["held_out"]) == {"ds", "ds2"}
    assert (summary["policy"] == "batch-schedule").sum() == 3 * 2 * 2
    m = enginesim.metrics("engine-e", summary)
    assert "sim.engine-e.ds.draft_model.fixed-3.b8" in m and "sim.engine-e.ds.combined.oracle.b1" in m
    bf = m["sim.engine-e.ds.eagle.best-fixed.b1"]
    fixed = summary[(summary["dataset"] == "ds") & (summary["proposer"] == "eagle") & (summary["batch_size"] == 1)
                    & summary["policy"].isin(["fixed-1", "fixed-3", "fixed-5"])]
    assert bf == pytest.approx(fixed["speedup"].max())


def test_ngram_match_probability_from_undrafted_positions(tmp_path):
    # the trace job's file holds every dataset: request ids repeat across them
    path = tmp_path / "ngram.jsonl"
    path.write_text("".join(json.dumps({"id": "0", "dataset": d, "acc_ngram": {"acc_len": a}}) + "\n"
                            for d, a in (("x", [1, 1, 3, 1, 1]), ("y", [1, 2, 1, 1]))))
    recs = enginesim.ngram_acc_lens(path)
    # positions >= 1 with acc 1: 3 in the first, 2 in the second -> 5; 2 of them verified no draft
    assert enginesim.ngram_match_from_trace(recs, 2) == pytest.approx(1 - 2 / 5)
    with pytest.raises(SpecReproError, match="not of this trace file"):
        enginesim.ngram_match_from_trace(recs, 6)
    assert math.isclose(enginesim.ngram_match_from_trace(recs, 0), 1.0)


def test_simulated_points_run_the_measured_requests_only(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(ROUND_COST + "drafters:\n  eagle: {d_kv: 0.0001, d_spec: 0.001, d_fixed: 0.01}\n")
    recs = _records()
    meas = _meas([("ds", "eagle", 3, 4, 1.5)]).assign(request_ids=[("r1", "r3")])
    sim = closedloop.simulated_points(meas, {"ds": recs}, ["ngram", "eagle"], str(path), ngram_match=1.0, seed=3)
    sub = [r for r in recs if r.id in ("r1", "r3")]
    w = Workload.from_records(sub, "ds")
    ref = simulate_reference(w, SimSpec("eagle", "fixed-3", num_requests=2, seed=3), [4],
                             load_cost_model(str(path), drafter="eagle")).summary
    assert sim.iloc[0]["simulated"] == pytest.approx(ref.iloc[0]["speedup"], rel=1e-12)
    out = closedloop.join(sim, meas)
    assert len(out) == 1 and out.iloc[0]["error"] == pytest.approx(ref.iloc[0]["speedup"] / 1.5 - 1)


def test_repeat_spread_compares_the_same_point_timed_twice():
    pts = pd.DataFrame({"config": ["none", "none", "ngram-k3"], "dataset": "d", "request_index": [0, 1, 0],
                        "batch_size": 1, "status": "ok", "wall_s": [1.1, 2.0, 5.0]})
    bd = pd.DataFrame({"config": ["none", "none"], "dataset": "d", "request_index": [0, 1], "batch_size": 1,
                       "wall_s": [1.0, 2.5]})
    r = closedloop.repeat_spread(pts, bd)
    assert r["repeat_points"] == 2
    assert r["repeat_median_abs"] == pytest.approx((0.1 + 0.2) / 2) and r["repeat_max_abs"] == pytest.approx(0.2)
    assert closedloop.repeat_spread(pts, pd.DataFrame()) == {}


def test_repeat_speedups_from_the_profiled_pass():
    pts = pd.DataFrame({"config": ["none", "ngram-k3", "none", "ngram-k3"], "dataset": "d", "request_index": [0, 0, 1, 1],
                        "batch_size": 1, "status": "ok", "output_tokens": [10, 10, 20, 20], "wall_s": 1.0})
    bd = pd.DataFrame({"config": ["none", "ngram-k3", "none", "ngram-k3"], "dataset": "d", "request_index": [0, 0, 1, 1],
                       "batch_size": 1, "wall_s": [1.0, 0.5, 2.0, 1.0]})
    table = pd.DataFrame({"config": ["ngram-k3"], "dataset": ["d"], "batch_size": [1], "measured": [1.6],
                          "simulated": [2.2]})
    r = closedloop.repeat_speedups(pts, bd, table)
    # profiled: throughputs 10/0.5 = 20 and 20/1 = 20 against 10 and 10: speedup 2.0
    assert r["profiled_points"] == 1 and r["profiled_vs_bench_median_abs"] == pytest.approx(2.0 / 1.6 - 1)
    assert r["simulated_vs_profiled_median_abs"] == pytest.approx(0.1)


def test_costfit_table_compares_the_released_model_with_the_papers_fit(tmp_path):
    from specrepro.figures.engine_costfit_table import coefficient_rows

    paper = load_cost_model("llama3.1-8b-h100")
    doc = {"model": "llama3.1-8b", "target": {"c_kv": 2 * paper.c_kv, "c_compute": paper.c_compute, "c_fixed": 0.0},
           "drafters": {"eagle3": {"d_kv": paper.d_kv, "d_spec": 0.5 * paper.d_spec, "d_fixed": 0.0}},
           "ngram": {"draft_fraction": 0.01}, "overhead_per_step": paper.overhead,
           "assumed": {"drafters.eagle3.d_fixed": "0: one k"}}
    rep = {"exp": "llama3.1-8b", "source": "profile", "target": {"r2": 0.99, "n_points": 100},
           "drafters": {"eagle3": {"r2": 0.9, "n_points": 50}}, "ngram": {"r2": 0.5, "n_points": 10},
           "overhead_points": 100}
    rows = {(r["role"], r["coefficient"]): r for r in coefficient_rows(doc, rep, paper)}
    assert rows[("target", "c_kv")]["ratio"] == pytest.approx(2.0)
    assert rows[("eagle3", "d_spec")]["ratio"] == pytest.approx(0.5) and rows[("eagle3", "d_fixed")]["assumed"]
    assert rows[("ngram", "draft_fraction")]["paper"] == paper.ngram_fraction
    assert rows[("overhead", "overhead_per_step")]["ratio"] == pytest.approx(1.0)
    # another model: no paper column
    assert all(math.isnan(r["paper"]) for r in coefficient_rows({**doc, "model": "qwen3-8b"}, rep, None))


def test_costfit_table_sets_one_tabular_per_experiment_so_the_report_breaks_it_between_pages():
    """Issue 22, section 3: one tabular of every experiment's coefficients was scaled to the page (5.6 pt); one
    tabular per experiment (several \\toprule) is set in the text's flow, unscaled (report.Item.flow)."""
    import pandas as pd

    from specrepro.figures.engine_costfit_table import coefficient_rows, to_latex

    paper = load_cost_model("llama3.1-8b-h100")
    doc = {"model": "m", "target": {"c_kv": 1e-6, "c_compute": 1e-3, "c_fixed": 0.0}, "overhead_per_step": 0.01}
    rows = [r for x in ("a", "b")
            for r in coefficient_rows(doc, {"exp": x, "source": "profile", "target": {"r2": 0.9, "n_points": 9}}, paper)]
    tex = to_latex(pd.DataFrame(rows), "note")
    assert tex.count(r"\begin{tabular}") == tex.count(r"\toprule") == 2
    assert tex.count(r"\texttt{a}") == tex.count(r"\texttt{b}") == 1 and "resizebox" not in tex


def test_profile_fit_gives_each_method_its_overhead_and_several_k_fit_the_drafters_constant(tmp_path):
    """Issue 22: the overhead per method (no SD's for the baseline's steps, each SD method's for its steps), and
    profiled passes at several k tell d_spec from d_fixed."""
    path = tmp_path / "c.yaml"
    path.write_text(ROUND_COST)
    cost = load_cost_model(str(path))
    eagle = lambda kv, i: 1e-4 * kv + 1e-3 * i + 0.05  # noqa: E731
    frames = [modelfit.profile_rows(_step_table(cost, method="none"), "none", "none")]
    methods = {"none": "none"}
    for k in (1, 3, 5, 8):
        t = _step_table(cost, method="eagle", drafting=eagle, seed=k)
        # k + 1 tokens verified per request; SD steps carry 0.5 s more overhead than the baseline's 1.0
        t["scheduled_tokens"] = np.where(t["prefill_reqs"] > 0, t["scheduled_tokens"], t["num_reqs"] * (k + 1))
        kv = t["context_tokens"] + t["num_reqs"] - t["prefill_reqs"]
        t["verification_s"] = cost.target(kv, t["scheduled_tokens"])
        t["drafting_s"] = np.where(t["prefill_reqs"] > 0, 0.5, eagle(kv, t["scheduled_tokens"] / t["num_reqs"]))
        t["step_s"] = t["verification_s"] + t["drafting_s"] + 1.5
        frames.append(modelfit.profile_rows(t, "eagle", f"eagle-k{k}"))
        methods[f"eagle-k{k}"] = "eagle"
    fit = modelfit.fit_profile(pd.concat(frames, ignore_index=True), list(methods), methods)
    # several k and batch sizes, no per-token drafting in the data: d_tok is fitted, and comes out 0
    assert fit.drafters["eagle"].coefficients == pytest.approx({"d_kv": 1e-4, "d_spec": 1e-3, "d_fixed": 0.05,
                                                                "d_tok": 0.0}, rel=1e-6, abs=1e-9)
    assert "drafters.eagle.d_fixed" not in fit.assumed and "drafters.eagle.d_tok" not in fit.assumed
    assert fit.overhead == pytest.approx(1.0, rel=1e-6) and fit.overhead_by_method == pytest.approx({"eagle": 1.5})
    assert fit.overhead_half_width_by_method["eagle"] < 1e-6
    doc = modelfit.cost_model_doc(fit, name="x", model="m", hardware="cpu", images={}, source="test")
    out = tmp_path / "fit.yaml"
    out.write_text(modelfit.cost_model_text(doc))
    e = load_cost_model(str(out), drafter="eagle")
    assert (e.overhead, e.step_overhead) == pytest.approx((1.0, 1.5))
    # n-gram has no entry: its SD steps keep the baseline's overhead
    assert load_cost_model(str(out), overhead_of="ngram").step_overhead == pytest.approx(1.0)


def test_sd_steps_take_the_methods_overhead_and_the_baseline_its_own(round_cost):
    """The simulator charges ``step_overhead`` on SD steps only: raising it by x adds x per SD step to every copy's
    latency, and the baseline's latency is unchanged (fast path and reference alike)."""
    import dataclasses

    recs = _records(n=3)
    w = Workload.from_records(recs, "ds")
    spec = SimSpec("eagle", "fixed-3", num_requests=3, seed=1)
    more = dataclasses.replace(round_cost, sd_overhead=round_cost.overhead + 0.25)
    for fn in (simulate, simulate_reference):
        a, b = fn(w, spec, [1, 4], round_cost).summary, fn(w, spec, [1, 4], more).summary
        assert (b["speedup"] < a["speedup"]).all()
    # by hand at B = 1: each request's SD latency grows by 0.25 per step (prefill included), its baseline not at all
    from specrepro.sim.simulator import baseline_latency
    P, L = np.array([recs[0].prompt_token_ids.size]), np.array([recs[0].output_len])
    assert baseline_latency(more, 1, P, L) == pytest.approx(baseline_latency(round_cost, 1, P, L))
    acc, gen, n_sd = recs[0].acc_len["eagle"], 1, 1  # the prefill, then a step per min(acc, k + 1) tokens
    while gen < recs[0].output_len:
        gen += min(int(acc[gen - 1]), 4)
        n_sd += 1
    one = Workload.from_records(recs[:1], "ds")
    s1 = SimSpec("eagle", "fixed-3", num_requests=1, seed=1)
    ra, rb = simulate_reference(one, s1, [1], round_cost).summary, simulate_reference(one, s1, [1], more).summary
    base = float(baseline_latency(round_cost, 1, P, L)[0])
    sd_a, sd_b = base / float(ra["speedup"].iloc[0]), base / float(rb["speedup"].iloc[0])
    assert sd_b - sd_a == pytest.approx(0.25 * n_sd, rel=1e-9)


def test_profile_fit_recovers_the_overhead_per_token(tmp_path):
    """A step's overhead that grows with its scheduled tokens (0.5 ms each, as SmolLM2's on CPU) on top of a constant
    per method is told apart: one slope, each method's constant net of it, written to the file and loaded back; the
    simulator's baseline then pays it on each request's token of every step."""
    path = tmp_path / "c.yaml"
    path.write_text(ROUND_COST)
    cost = load_cost_model(str(path))
    const = {"none": 0.008, "eagle": 0.009}
    tables = {"none": _step_table(cost, method="none"), "eagle-k3": _step_table(cost, method="eagle", k=3,
                                                                              drafting=cost.eagle_draft),
              "eagle-k5": _step_table(cost, method="eagle", k=5, drafting=cost.eagle_draft)}
    rows = []
    for cfg, t in tables.items():
        m = cfg.split("-")[0]
        t["step_s"] = t["verification_s"] + t["drafting_s"] + const[m] + 0.0005 * t["scheduled_tokens"]
        rows.append(modelfit.profile_rows(t, m, cfg))
    rows = pd.concat(rows, ignore_index=True)
    methods = {"none": "none", "eagle-k3": "eagle", "eagle-k5": "eagle"}
    fit = modelfit.fit_profile(rows, list(methods), methods)
    assert fit.overhead_per_token == pytest.approx(0.0005, rel=1e-6)
    assert fit.overhead == pytest.approx(0.008, rel=1e-6)
    assert fit.overhead_by_method == pytest.approx({"eagle": 0.009}, rel=1e-6)
    out = tmp_path / "fit.yaml"
    out.write_text(modelfit.cost_model_text(modelfit.cost_model_doc(fit, name="x", model="m", hardware="cpu", images={},
                                                                    source="test")))
    loaded = load_cost_model(str(out), drafter="eagle")
    assert loaded.overhead_per_token == pytest.approx(0.0005, rel=1e-6)
    assert loaded.step_overhead == pytest.approx(0.009, rel=1e-6)
    # B = 2 copies of a 10-token prompt, 3 tokens each: the prefill and 2 one-token steps, each sampling 2 tokens
    from specrepro.sim.simulator.batching import baseline_latency

    want = (loaded.target(0, 20) + 0.008 + 0.001) + sum(loaded.target(2 * 11 + 2 * j, 2) + 0.008 + 0.001 for j in (0, 1))
    assert baseline_latency(loaded, 2, np.array([10]), np.array([3]))[0] == pytest.approx(want, rel=1e-12)
    # every step of a method schedules one token count: the slope is not fitted, and the reason is written down
    flat = rows[~rows["config"].isin(["eagle-k3", "eagle-k5"]) | (rows["role"] != "target")]
    flat = flat[(flat["role"] != "target") | (flat["batched_tokens"] == 1) | (flat["phase"] != "decode")]
    fit0 = modelfit.fit_profile(flat, ["none"], {"none": "none"})
    assert fit0.overhead_per_token == 0.0 and "overhead_per_token" in fit0.assumed


def test_the_overhead_sentence_names_configurations_as_the_report_does():
    """The closed loop's 'What bounds it' listed job names (draft_model-k3 24.2 ms, none (cost-fit sweep) 12.0 ms)."""
    assert closedloop.config_text("draft_model-k3") == "draft model (k=3)"
    assert closedloop.config_text("eagle3-k10-bs") == "EAGLE-3 (k by batch size, up to 10)"
    assert closedloop.config_text("none (cost-fit sweep)") == "no SD (cost-fit sweep)"
    # draft jobs as the tables write them (the drift sentence and the falsification table read their names)
    assert closedloop.config_text("hybrid-adaptive-eagle-k5") == "hybrid-adaptive: EAGLE (k=5)"
    assert closedloop.config_text("hybrid-ngram-first-eagle-k5") == "hybrid-ngram-first: EAGLE (k=5)"
    assert closedloop.config_text("controlled-eagle-k8") == "controlled: EAGLE (k=8)"
    assert closedloop.config_text("oracle-ngram-k20") == "oracle-ngram: n-gram (k=20)"
    assert closedloop.config_text("oracle-combine-k20") == "oracle-combine (k=20)"  # its name has no engine method
    assert closedloop.config_text("slow") == "slow"  # another shape: kept
    s = {"points": 2, "median_abs_error": 0.05, "worst_abs_error": 0.1}
    diag = {"overhead_by_config_s": {"draft_model-k3": 0.0242, "none (cost-fit sweep)": 0.012},
            "overhead_per_step_s": 0.013, "overhead_by_method_s": {"draft_model": 0.02},
            "prefill_drafting_share_by_config": {"eagle-k5": 0.02}}
    text = closedloop.explanation(s, diag, "cpu")
    assert "by configuration draft model (k=3) 24.2 ms, no SD (cost-fit sweep) 12.0 ms against the model's (no SD " \
           "13.0 ms, draft model 20.0 ms;" in text
    assert "takes 2 % (EAGLE (k=5)) of the profiled step time" in text
    assert "draft_model" not in text and "eagle-k5" not in text
