"""Fig. 4 time breakdown from vLLM's profiler scopes: hand-built tables, then one real vLLM run."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from specrepro.engine.breakdown import (
    BREAKDOWN_PHASES, EVENT_COLUMNS, PHASES_WITH_LOGITS, assign_steps, events_from_profiler, phase_breakdown,
    step_table,
)
from specrepro.io import SpecReproError


def _events(rows):
    """rows: (run, step, scope, dur_us[, device_us]) -> an events table."""
    out = []
    for r in rows:
        run, step, scope, dur = r[:4]
        out.append({"run": run, "step": step, "scope": scope, "source": "x", "name": scope, "start_us": 0.0,
                    "dur_us": float(dur), "device_us": float(r[4]) if len(r) > 4 else 0.0})
    return pd.DataFrame(out)


def test_hand_built_table_gives_exact_shares():
    ev = _events([
        ("a", 0, "step", 1000), ("a", 0, "forward", 500), ("a", 0, "sample", 50), ("a", 0, "draft", 250),
        ("a", 0, "preprocess", 100), ("a", 0, "postprocess", 20),
        ("a", 1, "step", 1000), ("a", 1, "forward", 300), ("a", 1, "sample", 50), ("a", 1, "draft", 150),
        ("b", 0, "step", 400), ("b", 0, "forward", 300), ("b", 0, "sample", 20),
    ])
    bd = phase_breakdown(ev).set_index("run")
    a, b = bd.loc["a"], bd.loc["b"]
    assert a["clock"] == "cpu" and a["steps"] == 2
    assert a["total_s"] == pytest.approx(2000e-6, abs=1e-15)
    assert a["verification_share"] == pytest.approx(0.4, abs=1e-12)
    assert a["drafting_share"] == pytest.approx(0.2, abs=1e-12)
    assert a["sampling_share"] == pytest.approx(0.05, abs=1e-12)
    assert a["overhead_share"] == pytest.approx(0.35, abs=1e-12)
    assert b["drafting_s"] == 0.0 and b["verification_share"] == pytest.approx(0.75, abs=1e-12)
    assert b["overhead_share"] == pytest.approx(0.2, abs=1e-12)
    shares = bd[[f"{p}_share" for p in BREAKDOWN_PHASES]].sum(axis=1)
    assert shares.to_numpy() == pytest.approx([1.0, 1.0], abs=1e-12)
    # the LM head (postprocess) counted as verification on request
    a2 = phase_breakdown(ev, phases=PHASES_WITH_LOGITS).set_index("run").loc["a"]
    assert a2["verification_share"] == pytest.approx(0.41, abs=1e-12)


def test_device_clock_used_when_every_phase_has_cuda_time():
    ev = _events([("g", 0, "step", 1000), ("g", 0, "forward", 100, 600), ("g", 0, "sample", 10, 40),
                  ("g", 0, "draft", 50, 200)])
    bd = phase_breakdown(ev).iloc[0]
    assert bd["clock"] == "device"
    assert bd["verification_share"] == pytest.approx(0.6) and bd["overhead_share"] == pytest.approx(0.16)
    assert phase_breakdown(ev, clock="cpu").iloc[0]["verification_share"] == pytest.approx(0.1)
    # no CUDA time -> CPU fallback
    assert phase_breakdown(_events([("c", 0, "step", 10), ("c", 0, "forward", 5)])).iloc[0]["clock"] == "cpu"


def test_phases_longer_than_the_step_are_an_error():
    with pytest.raises(SpecReproError, match="exceed the step time"):
        phase_breakdown(_events([("a", 0, "step", 10), ("a", 0, "forward", 20)]))


def _scope(name, start, dur, dev=0.0):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=start + dur),
                           device_type="DeviceType.CPU", device_time_total=dev)


def test_steps_follow_engine_get_output_and_skip_idle_polls():
    evs = []
    t = 0.0
    for i in range(3):
        evs.append(_scope("llm_engine step: get_output", t, 90))
        if i != 1:  # the second poll scheduled nothing
            evs += [_scope("schedule: allocate_slots", t + 1, 2), _scope("gpu_model_runner: preprocess", t + 5, 10),
                    _scope("gpu_model_runner: forward", t + 20, 30), _scope("gpu_model_runner: sample", t + 55, 5),
                    _scope("gpu_model_runner: draft", t + 62, 20)]
        evs += [_scope("llm_engine step: process_outputs", t + 91, 4), _scope("llm_engine step: record_stats", t + 96, 2)]
        evs.append(_scope("aten::mm", t + 21, 3))  # not a vLLM scope
        t += 100
    ev = events_from_profiler(evs)
    assert list(ev.columns) == list(EVENT_COLUMNS)
    steps = ev[ev["scope"] == "step"]
    assert steps["step"].tolist() == [0, 1]
    assert steps["start_us"].tolist() == [0.0, 200.0]
    assert steps["dur_us"].tolist() == [98.0, 98.0]
    assert set(ev["scope"]) >= {"forward", "sample", "draft", "preprocess", "engine_get_output", "scheduler_allocate_slots"}
    st = step_table(ev)
    assert st["forward_s"].tolist() == pytest.approx([30e-6, 30e-6])


def test_without_engine_scopes_each_preprocess_opens_a_step():
    evs = []
    for i in range(3):
        evs += [_scope("gpu_model_runner: preprocess", 100 * i, 10), _scope("gpu_model_runner: forward", 100 * i + 10, 50)]
    ev = events_from_profiler(evs)
    assert ev.loc[ev["scope"] == "step", "dur_us"].tolist() == [100.0, 100.0, 60.0]


def test_no_scopes_is_a_clear_error():
    with pytest.raises(SpecReproError, match="VLLM_CUSTOM_SCOPES_FOR_PROFILING=1"):
        events_from_profiler([_scope("aten::mm", 0, 1)])
    with pytest.raises(SpecReproError, match="no 'step' rows"):
        phase_breakdown(_events([("a", 0, "forward", 1)]))


@pytest.mark.engine
def test_real_draft_model_run_has_every_phase_and_shares_sum_to_one():
    import math

    from specrepro.io import read_parquet

    import _sd_engine as eng

    out = eng.scenario("draft_model")
    res = eng.result("draft_model")
    assert res["output_lengths"] == [eng.MAX_TOKENS_BREAKDOWN] * eng.B_BREAKDOWN
    ev = read_parquet(out / "events.parquet")
    n_steps = 1 + math.ceil((eng.MAX_TOKENS_BREAKDOWN - 1) / (eng.K + 1))  # prefill + all-accepted steps
    per_step = ev.pivot_table(index="step", columns="scope", values="dur_us", aggfunc="count")
    assert len(per_step) == n_steps
    for scope in ("step", "preprocess", "forward", "postprocess", "sample", "draft", "bookkeep"):
        assert (per_step[scope] == 1).all(), scope
    bd = phase_breakdown(ev).iloc[0]
    print(bd.to_string())
    assert bd["clock"] == "cpu" and bd["steps"] == n_steps
    assert sum(bd[f"{p}_share"] for p in BREAKDOWN_PHASES) == pytest.approx(1.0, abs=1e-12)
    for p in BREAKDOWN_PHASES:
        assert 0.0 < bd[f"{p}_share"] < 1.0, p
