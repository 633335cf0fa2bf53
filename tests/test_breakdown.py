"""Fig. 4 time breakdown from the instrumentation plugin's step records: hand-made records, then real
vLLM runs checked against vLLM's own counters and profiler scopes."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specrepro.engine.run.breakdown import (
    BREAKDOWN_PHASES, STEP_TABLE_COLUMNS, phase_breakdown, step_problems, step_table,
)
from specrepro.core.io import SpecReproError


def _rec(step, step_s, draft=0.0, ver=0.0, samp=0.0, n=(None, 1, 1), **shape):
    nd, nv, ns = n
    return {"step": step, "clock": "cpu", "step_s": step_s, "drafting_s": draft, "verification_s": ver,
            "sampling_s": samp, "n_drafting": int(draft > 0) if nd is None else nd, "n_verification": nv,
            "n_sampling": ns, "num_reqs": shape.get("num_reqs", 1), "scheduled_tokens": shape.get("scheduled", 1),
            "draft_tokens": 0, "context_tokens": 0, "prefill_reqs": 0}


def test_hand_built_records_give_exact_shares():
    a = step_table([_rec(0, 1000e-6, 250e-6, 500e-6, 50e-6), _rec(1, 1000e-6, 150e-6, 300e-6, 50e-6)], run="a")
    b = step_table([_rec(0, 400e-6, 0.0, 300e-6, 20e-6)], run="b")
    assert list(a.columns) == ["run", *STEP_TABLE_COLUMNS]
    assert a["overhead_s"].tolist() == pytest.approx([200e-6, 500e-6], abs=1e-15)
    bd = phase_breakdown(pd.concat([a, b]), wall_s={"a": 2500e-6, "b": 400e-6}).set_index("run")
    ra, rb = bd.loc["a"], bd.loc["b"]
    assert ra["clock"] == "cpu" and ra["steps"] == 2
    assert ra["total_s"] == pytest.approx(2000e-6, abs=1e-15)
    assert ra["verification_share"] == pytest.approx(0.4, abs=1e-12)
    assert ra["drafting_share"] == pytest.approx(0.2, abs=1e-12)
    assert ra["sampling_share"] == pytest.approx(0.05, abs=1e-12)
    assert ra["overhead_share"] == pytest.approx(0.35, abs=1e-12)
    assert ra["engine_s"] == pytest.approx(500e-6, abs=1e-15) and rb["engine_s"] == pytest.approx(0.0, abs=1e-15)
    assert rb["drafting_s"] == 0.0 and rb["verification_share"] == pytest.approx(0.75, abs=1e-12)
    assert bd[[f"{p}_share" for p in BREAKDOWN_PHASES]].sum(axis=1).to_numpy() == pytest.approx([1.0, 1.0], abs=1e-12)


def test_step_problems_name_what_is_wrong():
    ok = step_table([_rec(0, 1.0, 0.2, 0.5, 0.1), _rec(1, 1.0, 0.2, 0.5, 0.1)])
    assert step_problems(ok, "draft_model") == []
    assert "drafting phase in a run without speculative decoding" in step_problems(ok, "none")[0]
    no_draft = step_table([_rec(0, 1.0, 0.0, 0.5), _rec(1, 1.0, 0.0, 0.5)])
    assert step_problems(no_draft, "ngram") == [] and step_problems(no_draft, "none") == []
    assert "no step ran the proposer" in step_problems(no_draft, "eagle")[0]
    two = step_table([_rec(0, 1.0, 0.0, 0.5, n=(0, 2, 1))])
    assert "[2] target forwards instead of 1" in step_problems(two, "none")[0]
    over = step_table([_rec(0, 1.0, 0.0, 1.5)])
    assert "exceed the step time" in step_problems(over, "none")[0]
    with pytest.raises(SpecReproError, match="exceed the step time"):
        phase_breakdown(over, by=())
    assert step_problems(step_table([]), "none") == ["no engine step recorded"]


# --- real vLLM (tests/_sd_engine.py: one profiled generate, plugin on, vLLM's profiler scopes on) --------

#: the plugin's phase against vLLM's own scope of the same code: the scope encloses the hooked call plus a
#: few statements (forward: the forward-context managers; draft: copying the drafts to the host), so per
#: step plugin <= scope, and in the median step the plugin holds at least this share of the scope time
#: (the rest: those statements; a preemption now and then on a shared 2-core machine lands in one step's scope)
SCOPE_SHARE = 0.8
#: per step, the torch profiler's own bookkeeping inside a record_function scope (tens of microseconds):
#: it dominates phases as short as sampling's ~50 us on a tiny model (CI saw 45 vs 60 us per step)
SCOPE_OVERHEAD_S = 25e-6
#: resolution of the seconds in the records (perf_counter differences as floats)
EPS = 1e-6


def _real(method):
    import _sd_engine as eng

    res = eng.result(method)
    assert all(s["installed"] and s["family"] == "vllm-0.32" for s in res["status"]), res["status"]
    return eng, res, step_table(res["records"])


def _scope_steps(scopes) -> pd.DataFrame:
    """vLLM's scopes per step: a step starts at each 'preprocess' scope."""
    df = pd.DataFrame(scopes, columns=["scope", "start", "dur"]).sort_values("start", kind="stable")
    df["step"] = (df["scope"] == "preprocess").cumsum() - 1
    return df.pivot_table(index="step", columns="scope", values="dur", aggfunc="sum").fillna(0.0) * 1e-6


@pytest.mark.engine
def test_draft_model_steps_match_what_the_engine_ran():
    eng, res, st = _real("draft_model")
    assert res["output_lengths"] == [eng.MAX_TOKENS_BREAKDOWN] * eng.B_BREAKDOWN
    n_steps = 1 + math.ceil((eng.MAX_TOKENS_BREAKDOWN - 1) / (eng.K + 1))  # prefill + all-accepted steps
    scopes = _scope_steps(res["scopes"])
    assert len(st) == n_steps == len(scopes) == sum(1 for s in res["scopes"] if s[0] == "forward")
    # vLLM counts one draft per request and decode step, k tokens each, all accepted (the draft is the target)
    c = res["counters"]
    assert c["num_drafts"] == eng.B_BREAKDOWN * (n_steps - 1) == int((st["draft_tokens"] > 0).sum() * eng.B_BREAKDOWN)
    assert c["num_draft_tokens"] == int(st["draft_tokens"].sum()) == c["num_accepted_tokens"]
    # the plugin's record-only acceptance counts reproduce vLLM's counters exactly (k-token run, nothing truncated)
    from specrepro.engine.run.traces import counters_from_records

    mine = counters_from_records(res["records"], eng.K)
    assert mine == {k: c[k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos")}
    assert st["num_reqs"].tolist() == [eng.B_BREAKDOWN] * n_steps
    assert st["scheduled_tokens"].tolist() == [eng.B_BREAKDOWN * eng.P_BREAKDOWN] + [eng.B_BREAKDOWN * (eng.K + 1)] * (n_steps - 1)
    # one target forward and one sampler call per step; the draft model proposes at every step (prefill too)
    assert (st["n_verification"] == 1).all() and (st["n_sampling"] == 1).all() and (st["n_drafting"] == 1).all()
    assert step_problems(st, "draft_model") == []


@pytest.mark.engine
@pytest.mark.parametrize("method", ["none", "draft_model"])
def test_phases_add_up_to_the_step_and_agree_with_vllm_scopes(method):
    """Per step: every timed phase lies inside its step and no two overlap (to the records' resolution),
    so drafting + verification + sampling + overhead = step time with overhead >= 0; the phases equal
    vLLM's own profiler scopes of the same code within :data:`SCOPE_SHARE`; the steps hold the
    ``generate`` call's time except the engine core's work between steps (scheduling, output processing)."""
    eng, res, st = _real(method)
    for rec in res["records"]:
        ivs = sorted(rec["intervals"], key=lambda iv: iv[1])
        assert ivs and all(0.0 <= a <= b <= rec["step_s"] + EPS for _, a, b in ivs), rec
        assert all(ivs[i][2] <= ivs[i + 1][1] + EPS for i in range(len(ivs) - 1)), ivs
        for p in ("drafting", "verification", "sampling"):
            assert rec[f"{p}_s"] == pytest.approx(sum(b - a for q, a, b in ivs if q == p), abs=EPS)
    assert (st["overhead_s"] >= -EPS).all()
    bd = phase_breakdown(st, by=(), wall_s={(): res["wall_s"]}).iloc[0]
    print(bd.to_string())
    assert sum(bd[f"{p}_share"] for p in BREAKDOWN_PHASES) == pytest.approx(1.0, abs=1e-12)
    # the engine core's work between steps (scheduling, output processing of 2 requests) is the smaller part
    assert 0.5 * res["wall_s"] <= bd["total_s"] <= res["wall_s"] and bd["engine_s"] >= 0.0
    # against vLLM's scopes (an independent clock: the torch profiler's)
    scopes = _scope_steps(res["scopes"])
    pairs = [("verification", "forward"), ("sampling", "sample")] + ([("drafting", "draft")] if method != "none" else [])
    for phase, scope in pairs:
        mine, theirs = st[f"{phase}_s"].to_numpy(), scopes[scope].to_numpy()
        assert (mine <= theirs + 1e-4).all(), (phase, mine, theirs)
        # in the median step (a sum over 5 steps failed once on one preemption: 3.5 ms of a 6.3-ms scope, while the
        # two xdist workers and another process shared the 2 cores; the other steps held 91-93 %)
        share = (mine + SCOPE_OVERHEAD_S) / theirs
        assert np.median(share) >= SCOPE_SHARE, (phase, mine, theirs)
    if method == "none":
        assert (st["n_drafting"] == 0).all() and bd["drafting_s"] == 0.0 and "draft" not in scopes
        assert len(st) == eng.MAX_TOKENS_BREAKDOWN
    else:
        assert bd["drafting_share"] > 0.0
