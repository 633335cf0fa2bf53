"""Statements the report makes about its numbers say what the numbers are (issue 24, items 5 and 6)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from specrepro.figures.engine_sim_table import bounds_table

REPO = Path(__file__).resolve().parents[1]


def _r(ds, p, pol, b, s):
    return {"dataset": ds, "proposer": p, "policy": pol, "batch_size": b, "speedup": s, "ci_low": s, "ci_high": s,
            "requests": 8}


def test_a_schedule_that_chose_k0_is_no_sd_not_its_proposer():
    """Table 11 printed "open chat 1.00 (EAGLE)" where EAGLE's schedule chose k = 0: that 1.00 is no speculation."""
    rows = []
    for b, (e_sched, n_sched) in ((1, (1.4, 1.2)), (64, (1.0, 0.95))):
        rows += [_r("chat", "eagle", f"fixed-{k}", b, 1.1) for k in (1, 3, 5)]
        rows += [_r("chat", "ngram", f"fixed-{k}", b, 0.9) for k in (1, 3, 5)]
        rows += [_r("chat", "eagle", "oracle", b, 1.8), _r("chat", "ngram", "oracle", b, 1.3),
                 _r("chat", "eagle", "batch-schedule", b, e_sched), _r("chat", "ngram", "batch-schedule", b, n_sched),
                 _r("chat", "combined", "oracle", b, 2.0)]
    t = bounds_table(pd.DataFrame(rows)).set_index("batch_size")
    assert t.loc[1, "k_by_batch_size_by"] == "EAGLE" and t.loc[1, "k_by_batch_size"] == 1.4
    assert t.loc[64, "k_by_batch_size_by"] == "k = 0, no SD" and t.loc[64, "k_by_batch_size"] == 1.0


def test_digitiser_names_a_reading_that_disagrees_with_another_figures_claim():
    """Fig. 12(c) read 1.187 where Fig. 10's claim of the same quantity is 1.18 +- 0.005: the table said "no judged
    reading disagrees" (its own figure's claims), leaving the other figure's disagreement unsaid."""
    from specrepro.figures import digitiser_table as D

    cols = ["figure", "panel", "series", "x", "quantity", "key", "read", "readable", "why", "claim_id", "paper_value",
            "tolerance", "difference", "agrees", "other_figure_claim", "other_figure_value", "other_agrees"]
    agree = pd.DataFrame([
        ["Fig. 12", "c", "k=3_Eagle", "128", "speedup", "k1", 1.18714, True, "", "", float("nan"), float("nan"),
         float("nan"), None, "F10-gsm8k-eagle-fixed-3-b128", 1.18, False],
        ["Fig. 12", "c", "Oracle", "1", "speedup", "k2", 2.801, True, "", "F12-x", 2.8, 0.005, 0.001, True, "", float("nan"),
         None]], columns=cols)
    summary = pd.DataFrame(columns=["figure", "claims", "readings", "readable", "judged", "agree", "rate",
                                    "median_abs_difference", "max_abs_difference", "tolerance_min", "tolerance_max",
                                    "max_share_of_tolerance", "claims_unread", "other_agree", "other_judged"])
    tex = D.to_latex(summary, agree)
    assert "No judged reading disagrees with the registry's claim of its own figure;" in tex
    assert ("1 reading disagrees with another figure's claim of the same quantity: Fig. 12(c) k=3\\_Eagle at 128 reads "
            "1.187 against \\texttt{F10-gsm8k-eagle-fixed-3-b128}, 1.18") in tex
    assert "No judged reading disagrees with the registry." not in tex


def test_continuous_batching_is_shown_next_to_b_copies_averaged_the_same_way():
    """Continuous batching's speedup is total tokens over total time; the paper's B copies average per-request
    throughputs (5.17 vs 4.89 at B = 1 came from that alone): the beyond table puts the B copies averaged the same way
    (the simulator's ``pooled_speedup``) under the continuous row."""
    from specrepro.figures._beyond import comparison

    base = {"dataset": "d", "proposer": "combined", "policy": "oracle", "batch_size": 1, "pairing": "index",
            "combine_cost": "ngram", "ci_low": 4.7, "ci_high": 5.0, "requests": 300}
    df = pd.DataFrame([{**base, "batching": "replicate", "speedup": 4.89, "pooled_speedup": 5.15},
                       {**base, "batching": "continuous", "speedup": 5.17, "pooled_speedup": 5.17}])
    t = comparison(df, ["d"]).set_index("row")
    assert t.loc["combine", "speedup"] == 4.89 and t.loc["cont_combine", "speedup"] == 5.17
    assert t.loc["pooled_combine", "speedup"] == 5.15 and t.loc["pooled_combine", "label"].startswith("B copies, averaged")
    assert pd.isna(t.loc["pooled_combine", "ci_low"])


def test_simulator_pooled_speedup_is_total_tokens_over_total_time():
    """Hand check of the column on two requests of the fast simulator: tokens B*L_i, times from the per-batch rows."""
    import numpy as np

    from specrepro.core.costmodel import load_cost_model
    from specrepro.core.traces import TraceRecord
    from specrepro.sim.simulator import SimSpec, Workload, simulate

    recs = [TraceRecord(f"r{i}", np.arange(20 + i), np.arange(n),
                        {"ngram": np.array([1 + (j % 3) for j in range(n)]), "eagle": np.full(n, 2)})
            for i, n in enumerate((30, 90))]
    w = Workload.from_records(recs, "d")
    res = simulate(w, SimSpec("eagle", "fixed-3", num_requests=2), [1, 4], load_cost_model("llama3.1-8b-h100"))
    for b, row in res.summary.set_index("batch_size").iterrows():
        bt = res.batches[res.batches["batch_size"] == b]
        tokens = b * bt["output_len"].to_numpy(dtype=float)
        pooled = (tokens.sum() / bt["sd_latency"].sum()) / (tokens.sum() / bt["baseline_latency"].sum())
        assert row["pooled_speedup"] == np.float64(pooled)
        assert row["speedup"] == (bt["sd_throughput"].mean() / bt["baseline_throughput"].mean())


def test_outputs_at_the_generation_cap_are_counted_and_left_out_of_a_second_mean():
    """Issue 24, item 6: on the released traces 9 outputs stop at 8,192 tokens and hold 31 % / 15 % of InstructCoder /
    ShareGPT positions (n-gram mean 9.65 -> 7.78 without them). Hand case: two requests of 4 and 2 positions, cap 4."""
    from specrepro.analysis.acceptance import capped_outputs

    pos = pd.DataFrame({"dataset": "d", "proposer": "ngram", "request_id": ["a"] * 4 + ["b"] * 2,
                        "acc_len": [10, 10, 10, 10, 1, 3]})
    (r,) = capped_outputs(pos, ["ngram"], cap=4).to_dict("records")
    assert r["capped_requests"] == 1 and r["capped_share"] == 4 / 6 and r["mean_uncapped"] == 2.0


def test_findings_are_one_sentence_from_their_csv(tmp_path):
    """Issue 24, item 7: a beyond-the-paper section opens with its finding; hand-made CSVs give the sentences."""
    from specrepro.figures import engine_trends, sim_beyond_table

    rows = []
    for ds, (c, both, win, best) in {"ic": (4.9, 3.8, 4.3, 2.7), "sg": (3.1, 2.4, 2.7, 2.1)}.items():
        for row, v in (("combine", c), ("combine_both", both), ("combine_winner", win), ("oracle_best", best)):
            rows.append({"dataset": ds, "row": row, "batch_size": 1, "speedup": v})
    pd.DataFrame(rows).to_csv(tmp_path / "b.csv", index=False)
    assert sim_beyond_table.finding(tmp_path / "b.csv") == (
        "Charged both drafters at every step, Oracle Combine on ic at B = 1 falls from 4.90x to 3.80x, so 50 % of its "
        "margin over the best single-method oracle (2.70x) survives honest drafting cost (30 % on the other dataset), "
        "73 % charged the winning proposer's cost (60 % on the other dataset).")
    pd.DataFrame([{"exp": "m", "check": "a", "shown": "True"}, {"exp": "m", "check": "b", "shown": "False"},
                  {"exp": "m", "check": "c", "shown": "not resolved"}, {"exp": "m", "check": "d", "shown": ""}]
                 ).to_csv(tmp_path / "t.csv", index=False)
    assert engine_trends.finding(tmp_path / "t.csv") == (
        "m shows 1 of the 3 paper trends checked here (a); not shown: b; not resolved: c.")
    # with the experiment's label (the trend table's CSV carries it), the sentence names the model as the report does
    pd.read_csv(tmp_path / "t.csv").assign(exp_label="SmolLM2-135M on CPU (the real model)").to_csv(tmp_path / "t.csv")
    assert engine_trends.finding(tmp_path / "t.csv").startswith(
        "SmolLM2-135M on CPU (the real model) shows 1 of the 3 paper trends checked here")


def test_a_caption_names_the_papers_figure_once():
    """Issue 24, item 7a: the template opens a caption with "The paper's Fig. N." (its ``paper_ref``); a caption that
    opened with it again printed "The paper's Fig. 10. The paper's Fig. 10 for ..." (Figs. R12, R13)."""
    import re

    from specrepro import figures as figreg
    from specrepro.report import Item, _Keep, render
    from test_report import TEMPLATES, minimal

    specs = figreg.all_specs()
    for s in specs:
        if s.paper_ref.startswith("Fig"):
            assert not s.caption.startswith("The paper's"), f"{s.name}: the template already names {s.paper_ref}"
    run_config, prov, claims = minimal("cpu")
    items = [Item(s, "toy", "Toy", f"../figures/{s.name}-toy.{'pdf' if s.kind == 'figure' else 'tex'}",
                  s.caption.format_map(_Keep(subject_label="Toy"))) for s in specs]
    tex = render(TEMPLATES, run_config, prov, claims, items, [])
    for name in ("fig10_sim_engine", "fig12_sim_engine"):
        spec = figreg.spec(name)
        cap = spec.caption.format_map(_Keep(subject_label="Toy"))
        # the caption is rendered, once, after the template's one prefix
        assert f"\\emph{{The paper's {spec.paper_ref}.}} Redrawn for Toy" in tex and cap.startswith("Redrawn for Toy")
    assert not re.findall(r"\\emph\{The paper's [^}]*\}\s*The paper's", tex)


# --- the report's sentences read against this run's data (audit of the 2026-12-07 CPU report) ---------------------


def test_a_sign_that_rounds_away_is_no_sign():
    """Table R10 printed "+0 %" for an error of -0.07 % beside "17 of 28 simulated above measured" (18 plus signs);
    Table R5 "(+0%)" for a schedule 0.5 % slower; Fig. R3 "-0" cells and a "-5...-0" interval."""
    from specrepro.core.latex import whole
    from specrepro.figures._enginesim import tex_pct

    assert [whole(v, sign=True) for v in (-0.3, 0.3, -0.6, 0.6, 12.4)] == ["0", "0", "-1", "+1", "+12"]
    assert [whole(v) for v in (-0.19, -5.2, 7.5)] == ["0", "-5", "8"]
    assert tex_pct(-0.0007, sign=True) == "0\\,\\%" and tex_pct(-0.012, sign=True) == "-1\\,\\%"
    assert tex_pct(float("nan")) == "--"


def test_a_claim_no_run_decides_says_why_and_a_cell_keeps_one_precision():
    """Appendix B showed the paper's self-contradiction ("about 2.2x", Figs. 10/12: 2.73x) as a bare "not measured";
    and "2.6 [2.4, 2.79]" mixed decimals in one cell."""
    from specrepro.report import claim_cells

    base = {"kind": "value", "paper_value": 2.2, "unit": "x", "this_run": float("nan"), "n": float("nan")}
    none = claim_cells({**base, "evidence": "none", "note": "Its own Figs. 10 and 12 give 2.73x."})
    assert none["why_undecided"] == "Its own Figs. 10 and 12 give 2.73x." and none["run"] == "--"
    assert claim_cells({**base, "evidence": "simulator", "note": "read by eye"})["why_undecided"] == ""
    row = {"kind": "value", "paper_value": 2.64, "unit": "tokens", "this_run": 2.6, "ci_low": 2.4, "ci_high": 2.79,
           "n": 300, "evidence": "trace"}
    assert claim_cells(row)["run"] == "2.60 [2.40, 2.79]"
    assert claim_cells({**row, "this_run": 84.0, "ci_low": 80.0, "ci_high": 90.0})["run"] == "84 [80, 90]"
    assert claim_cells({**row, "n": 2})["run"] == "2.6"  # under 8 requests no interval, and no padding


def test_the_closed_loop_error_is_stated_beside_the_noise_floor(tmp_path):
    """"median |error| 4 %" was offered as how far to trust the simulator, while two jobs of one configuration were
    12 % apart in the same run (Table R11's noise floor)."""
    import json

    from specrepro.figures._enginesim import error_statement, noise_floor_text

    (tmp_path / "c.json").write_text(json.dumps({"points": 28, "median_abs_error": 0.044, "worst_abs_error": 0.37,
                                                 "mean_error": 0.03, "optimistic_points": 17}))
    (tmp_path / "d.json").write_text(json.dumps({"repeat": {"pairs": 2, "median_abs": 0.1227, "max_abs": 0.129},
                                                 "oracle": {"points": 10, "median_abs_error": 0.080,
                                                            "worst_abs_error": 0.208, "mean_error": 0.072}}))
    (tmp_path / "none.json").write_text(json.dumps({"repeat": {"pairs": 0}}))
    text = error_statement(tmp_path / "c.json", drafted=tmp_path / "d.json")
    assert text.startswith("Checked against this run's measurements (closed loop): median |error| 4 %")
    # the fixed-k points say 'neither way'; the bound itself, measured inside vLLM, says the simulator is optimistic
    assert text.endswith("; the upper bound measured inside vLLM (10 points): median |error| 8 %, worst 21 %, mean "
                         "+7 % (the simulated bound optimistic); one configuration timed in two jobs (a draft job "
                         "replaying its trace, and the benchmark): 12 % apart (median of 2 pairs), the noise floor an "
                         "error below which is not resolved here.")
    assert noise_floor_text(json.loads((tmp_path / "none.json").read_text())) == "" and noise_floor_text({}) == ""
    assert "noise floor" not in error_statement(tmp_path / "c.json")


def test_verification_dominates_names_the_point_where_it_does_not():
    """Table R8 said "no" beside verification shares of 46-90 %, all inside the paper's 42-95 %: the rule (the
    largest phase at every point) failed at one point, drafting 46.1 % against verification 45.8 %, unsaid."""
    from specrepro.figures.engine_trends import verification_check

    bd = pd.DataFrame([
        {"config": "eagle-k3", "batch_size": 1, "drafting_share": 0.2, "verification_share": 0.7,
         "sampling_share": 0.02, "overhead_share": 0.08},
        {"config": "draft_model-k5", "batch_size": 1, "drafting_share": 0.461, "verification_share": 0.458,
         "sampling_share": 0.03, "overhead_share": 0.051}])
    r = verification_check(bd)
    assert r["shown"] is False
    assert r["measured"] == ("verification the largest phase: EAGLE (k=3) B=1 70 %; draft model (k=5) B=1 46 % -- not the "
                             "largest at draft model (k=5) B=1: drafting 46.1 % > verification 45.8 %")
    assert verification_check(bd.iloc[:1])["shown"] is True


def test_verification_dominates_excuses_what_the_papers_own_data_show():
    """Table R8 said "no" where the only point with drafting ahead was a draft model at B = 1, though the paper's own
    Fig. 4 has the same exception (Qwen3-8B with Qwen3-0.6B at B = 1: drafting 47.1 %, verification 41.9 %): the
    registry's shares give the exception; the same point at a larger batch size, or EAGLE's, is still "no"."""
    from specrepro.analysis.claims import load_claims
    from specrepro.figures.engine_trends import paper_phase_exceptions, verification_check

    exc = paper_phase_exceptions(load_claims(REPO / "paper" / "claims.yaml"))
    assert [(d["model"], d["method"], d["batch_size"], d["drafting"], d["verification"]) for d in exc] == [
        ("Qwen3-8B", "draft_model", 1, 47.1, 41.9)]

    def bd(cfg, b2):
        return pd.DataFrame([
            {"config": cfg, "method": cfg.split("-k")[0], "batch_size": 1, "drafting_share": 0.509,
             "verification_share": 0.409, "sampling_share": 0.01, "overhead_share": 0.072},
            {"config": cfg, "method": cfg.split("-k")[0], "batch_size": 4, "drafting_share": b2[0],
             "verification_share": b2[1], "sampling_share": 0.01, "overhead_share": 1 - 0.01 - sum(b2)}])

    r = verification_check(bd("draft_model-k5", (0.35, 0.52)), exc)
    assert r["shown"] is True
    assert r["measured"].endswith("not the largest at draft model (k=5) B=1: drafting 50.9 % > verification 40.9 %, "
                                  "where the paper's data make the same exception (its smallest batch size, B=1)")
    assert "Qwen3-8B draft model B=1: drafting 47.1 % > verification 41.9 %" in r["paper"]
    assert verification_check(bd("draft_model-k5", (0.52, 0.35)), exc)["shown"] is False
    assert verification_check(bd("eagle-k5", (0.35, 0.52)), exc)["shown"] is False
    assert verification_check(bd("draft_model-k5", (0.35, 0.52)))["shown"] is False


def test_the_speedup_note_counts_measurements_and_plotted_points_apart():
    """Fig. R10's note read "0 of 72 points failed ... 28 points rest on fewer than 8 requests (2-2)": 72 counted
    one request at one batch size, 28 the plotted points (all of them)."""
    from specrepro.figures.engine_speedup import footnote

    t = pd.DataFrame({"method": ["none", "ngram", "eagle"], "points": [4, 4, 4], "failed": [0, 1, 0],
                      "requests": [2, 2, 2]})
    note = footnote(t, "gpu")
    assert note == ("1 of 12 measurements (one request at one batch size) failed and are excluded. 2 of 2 plotted "
                    "points rest on fewer than 8 requests (2 each) and show no interval.")


def test_the_falsification_table_says_how_this_run_timed_its_jobs():
    """Table R11's caption named config/cpu-closedloop.yaml's exclusive timing; the run it sat in had it off."""
    from specrepro.figures.engine_falsification_table import timing_note

    cfg = {"run": {"kind": "cpu"}, "experiments": [{"name": "smollm2", "exclusive_timing": False},
                                                   {"name": "x", "exclusive_timing": True}]}
    assert timing_note(cfg, "smollm2") == ("This run: exclusive_timing off for smollm2, each timed job shared the "
                                           "cores with up to one other job.")
    assert timing_note(cfg, "x").startswith("This run: exclusive_timing on for x")
    assert timing_note({**cfg, "run": {"kind": "gpu"}}, "smollm2") == "" and timing_note(cfg, "absent") == ""


def test_the_hybrid_is_not_said_to_lose_at_least_its_first_pass():
    """"...it is slower by at least the first pass" where the adaptive hybrid was 4 % below n-gram and the first
    pass 8-12 % of a step: the drafter's accepted drafts win part of it back."""
    from specrepro.analysis.drafted import hybrid_finding

    hyb = pd.DataFrame([{"hybrid": "hybrid-adaptive", "dataset": "news", "batch_size": 1, "measured": 1.2,
                         "measured_ci_low": 1.18, "measured_ci_high": 1.22, "best_single": "ngram",
                         "best_single_measured": 1.25, "vs_best_measured": -0.04, "gap_closed_measured": -0.1,
                         "gap_closed_simulated": -0.1}])
    costs = {"news@1": {"first_pass_ms": 2.4, "full_draft_ms": 9.0, "target_step_ms": 20.0}}
    why = hybrid_finding(hyb, costs, {})["loses_why"]
    assert "at least the first pass" not in why and "which only the steps where the drafter's draft is accepted " \
        "further than n-gram's can win back" in why
    assert why.endswith("no hybrid is further below the better single method than the first pass's largest share "
                        "of a target step (12.0 %).")


def test_the_hybrid_finding_names_both_sides_k(tmp_path):
    """Sec. 20 compared the hybrid (EAGLE at k = 5) with n-gram at k = 3 and never said so; on this CPU EAGLE at
    k = 5 was itself slower than at k = 3, so part of the loss is k, not the choice."""
    from specrepro.figures.engine_hybrid_table import finding

    row = {"exp": "e", "dataset": "code", "dataset_label": "code", "hybrid": "hybrid-adaptive",
           "config": "hybrid-adaptive-eagle-k5", "drafter": "eagle", "k": 5, "best_single": "ngram", "best_single_k": 3,
           "requests": 2,
           "measured_ci_low": float("nan"), "measured_ci_high": float("nan")}
    t = pd.DataFrame([{**row, "batch_size": 1, "measured": 1.2, "best_single_measured": 1.4, "vs_best_measured": -1 / 7},
                      {**row, "batch_size": 4, "measured": 0.9, "best_single_measured": 1.2, "vs_best_measured": -0.25}])
    t.to_csv(tmp_path / "tab_hybrid-engine-e.csv", index=False)
    text = finding(tmp_path / "tab_hybrid-engine-e.csv")
    assert text.startswith("Chosen online inside vLLM, the adaptive hybrid of n-gram and the model drafter (EAGLE at "
                           "k = 5) reaches 0.90-1.20x over no SD against 1.20-1.40x for the better single method "
                           "(n-gram at k = 3) at the same 2 (dataset, B) points")
