"""The draft-substitution modes (specrepro.jobspec.drafts) and the policy the simulator and the engine share
(specrepro.core.policy): hand-computed drafts, the same choices from the same accepted-count history, refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specrepro.core.costmodel import load_cost_model
from specrepro.core.errors import SpecReproError
from specrepro.core.policy import AdaptiveParams, adaptive_choice, ngram_first, observe
from specrepro.jobspec.drafts import DraftPlanner, make_plan, prompt_key, refusal
from specrepro.jobspec.hooks import DRAFT_HOOKS, draft_table_for
from specrepro.sim.simulator import _adaptive_steps
from specrepro.sim.simulator.steps import ngram_matched

REF = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]
PROMPT = [1, 2, 3]
KEY = prompt_key(PROMPT)
ACC_NG = [1, 3, 1, 1, 5, 2, 1, 1, 1, 1, 1, 1]
ACC_EA = [1, 2, 2, 4, 1, 3, 2, 2, 1, 2, 1, 1]


def _plan(mode, k=20, **kw):
    return make_plan(mode, k, requests=[{"prompt_token_ids": PROMPT, "output_token_ids": REF,
                                         "acc": {"ngram": ACC_NG, "eagle": ACC_EA}}], **kw)


def test_oracle_proposes_the_reference_as_far_as_the_trace_accepted():
    p = DraftPlanner(_plan("oracle", of="ngram"))
    assert p.propose("r", KEY, REF[:1], own=[99] * 20).draft == REF[1:3]      # acc_ngram[1] = 3: two tokens
    assert p.propose("r", KEY, REF[:4], own=[99] * 20).draft == REF[4:8]      # acc_ngram[4] = 5
    assert p.propose("r", KEY, REF[:6], own=[99] * 20).draft == []           # acc 1: nothing to propose
    e = DraftPlanner(_plan("oracle", k=2, of="eagle"))
    assert e.propose("r", KEY, REF[:3], own=[7, 7]).draft == REF[3:5]        # acc_eagle[3] = 4, capped at k = 2
    c = DraftPlanner(_plan("oracle", of="combine", drafter="eagle"))
    # per position the better of the two traces: max(3, 2) at 1, max(1, 4) at 3
    assert c.propose("r", KEY, REF[:1], own=[]).draft == REF[1:3]
    assert c.propose("r", KEY, REF[:3], own=[]).draft == REF[3:6]


def test_a_departed_request_gets_the_drafters_own_draft_and_is_counted():
    p = DraftPlanner(_plan("oracle", of="ngram"))
    p.propose("r", KEY, REF[:1], own=[])
    prop = p.propose("r", KEY, REF[:2] + [55], own=[5, 6])   # the output left the reference at position 2
    assert prop.departed and prop.draft == [5, 6] and prop.source == "drafter"
    assert p.state["r"].departed == 2 and p.departed == {"r"}
    # tokens past the reference's end (the engine overshoots max_tokens inside a step) are no departure
    q = DraftPlanner(_plan("oracle", of="ngram"))
    assert not q.propose("s", KEY, REF + [1, 2], own=[]).departed and not q.departed


def test_controlled_profiles_propose_exactly_j_correct_tokens():
    none = DraftPlanner(_plan("controlled", k=3, profile="none")).propose("r", KEY, REF[:2], own=[])
    assert none.draft == [0, 0, 0]                                       # k wrong tokens (REF[2] = 12 != 0)
    assert DraftPlanner(_plan("controlled", k=3, profile="all")).propose("r", KEY, REF[:2], own=[]).draft == REF[2:5]
    cyc = DraftPlanner(_plan("controlled", k=4, profile={"name": "c", "j": [1, 3]}))
    assert cyc.propose("r", KEY, REF[:2], own=[]).draft == [12, 0, 0, 0]
    assert cyc.propose("r", KEY, REF[:4], own=[]).draft == [14, 15, 16, 0]
    assert cyc.propose("r", KEY, REF[:6], own=[]).draft == [16, 0, 0, 0]  # cycles per step
    tr = DraftPlanner(_plan("controlled", k=5, profile={"trace": "eagle"}))
    assert tr.propose("r", KEY, REF[:3], own=[]).draft == [13, 14, 15, 0, 0]  # acc_eagle[3] - 1 = 3 correct
    with pytest.raises(SpecReproError, match="unknown controlled profile"):
        _plan("controlled", k=3, profile="most")


def test_ngram_first_is_pr_24344s_rule():
    use, k = ngram_first([0, 2, 9], 5)
    assert use.tolist() == [False, True, True] and k.tolist() == [5, 2, 5]
    p = DraftPlanner(make_plan("hybrid", 5, policy="ngram-first"))
    assert p.propose("r", "-", [1, 2], own=[7] * 5, ngram=[3, 4]).draft == [3, 4]
    assert p.propose("r", "-", [1, 2, 3], own=[7] * 5, ngram=[]).draft == [7] * 5


def _engine_choices(params, cost, ng, ea, P, B, matched, decide_first=False):
    """Drive the engine's planner over acceptance traces as the engine would: at ``gen`` tokens the n-gram
    proposal (empty where ``matched`` is false) and the drafter's draft are correct for ``acc[gen - 1] - 1``
    tokens (the simulator's index), the step produces ``min(acc of the chosen, k + 1)``; returns (request, gen,
    input_len, used drafter) rows.
    ``decide_first``: as the hybrid does in the engine, decide before the drafter runs, then take the draft."""
    rows = []
    for r, (a_ng, a_ea) in enumerate(zip(ng, ea)):
        L = a_ng.size
        ref = list(range(1000, 1000 + L + 40))
        plan = make_plan("hybrid", params.eagle_k_max, policy="adaptive", cost_model=cost, adaptive=params)
        planner = DraftPlanner(plan)
        gen = 1
        while gen < L:
            i = gen - 1
            prop_ng = ref[gen:gen + a_ng[i] - 1] + [0] * params.ngram_k_max if matched[r][i] else []
            own = ref[gen:gen + a_ea[i] - 1] + [0] * params.eagle_k_max
            if decide_first:
                use_ng, kk = planner.decide("r", ref[:gen], prop_ng[:params.ngram_k_max], batch_size=B,
                                            context=int(P[r]) + gen)
                own = own[:DraftPlanner.drafter_k([(use_ng, kk)])]  # the drafter drafts only what the choice needs
            p = planner.propose("r", "-", ref[:gen], own=own[:params.eagle_k_max], ngram=prop_ng[:params.ngram_k_max],
                                batch_size=B, context=int(P[r]) + gen)
            k = len(p.draft)
            produced = min(int(a_ng[i] if p.source == "ngram" else a_ea[i]), k + 1)
            rows.append((r, gen, k + 1, p.source != "ngram"))
            gen += produced
    return rows


@pytest.mark.parametrize("charge", ["chosen", "full", "first-pass"])
def test_the_engine_and_the_simulator_make_the_same_choices(charge):
    """One policy function: the simulator's adaptive steps and the engine's planner, fed the same accepted
    counts, choose the same proposer and k at every step."""
    rng = np.random.default_rng(3)
    ng = [rng.choice([1, 1, 1, 2, 6, 9], size=n) for n in (60, 45, 80)]
    ea = [rng.choice([1, 2, 3, 4], size=n) for n in (60, 45, 80)]
    P = np.array([30, 200, 90])
    h100 = load_cost_model("llama3.1-8b-h100")
    # a dear drafter (each drafted token 30 % of a target step's fixed cost): there, where the lookup found
    # nothing, the policy charged only for the drafter it uses verifies no draft at some steps
    dear = dataclasses.replace(h100, d_spec=0.3 * h100.c_fixed)
    params = AdaptiveParams(eagle_k_max=5, ngram_k_max=5, drafter_charge=charge)
    # the lookup proposes where its trace accepted a token, and at about a third of the other positions
    matched = ngram_matched(ng, 0.35, 7)
    no_draft = 0
    for cost, B in [(h100, 1), (h100, 32), (dear, 1), (dear, 8)]:
        st = _adaptive_steps(params, ng, ea, P, B, cost, matched)
        eng = _engine_choices(params, cost, ng, ea, P, B, matched, decide_first=charge == "first-pass")
        # the history moves the choice: both proposers are chosen
        assert len({e[3] for e in eng}) == 2 or (cost is dear and charge == "chosen")
        no_draft += sum(e[2] == 1 and not e[3] for e in eng)
        sim = list(zip(st.request.tolist(), st.gen.tolist(), st.input_len.tolist(), (st.eagle_w > 0).tolist()))
        if charge != "chosen":  # every step charges the drafter: the path (gen, k) shows the choices
            sim, eng = [s[:3] for s in sim], [e[:3] for e in eng]
        assert eng == sim
    if charge == "chosen":  # n-gram steps that verified no draft (the lookup found nothing) were among them
        assert no_draft > 0


def test_the_ngram_option_is_what_the_lookup_proposes():
    """n-gram's k is at most its proposal's length, 0 (no draft verified) where it found nothing; a step where it
    found nothing leaves its counts as they were (its acceptance is learnt given a match)."""
    cost = load_cost_model("llama3.1-8b-h100")
    p = AdaptiveParams(eagle_k_max=5, ngram_k_max=5)
    z = np.zeros(3)
    # n-gram long accepted, the drafter long rejected: n-gram whatever it proposes, as far as it proposes
    use, k = adaptive_choice(p, cost, 1, np.full(3, 500.0), np.full(3, 40.0), z, z, np.full(3, 40.0),
                             np.array([5, 2, 0]))
    assert use.tolist() == [True, True, True] and k.tolist() == [5, 2, 0]
    # no proposal and a drafter that is accepted: the drafter
    use, k = adaptive_choice(p, cost, 1, np.array([500.0]), np.array([40.0]), np.zeros(1), np.array([40.0]),
                             np.zeros(1), np.array([0]))
    assert not use[0] and k[0] >= 1
    counts = (3.0, 1.0, 2.0, 2.0)
    s_ng, f_ng, s_ea, f_ea = observe(p, False, 3, 2, 1, *counts, ng_proposed=False)
    assert (float(s_ng), float(f_ng)) == (3.0, 1.0)  # untouched: no proposal, nothing seen, no ageing
    assert (float(s_ea), float(f_ea)) == pytest.approx((2.0 * p.decay + 1, 2.0 * p.decay + 1))
    s_ng, f_ng, _, _ = observe(p, False, 3, 2, 1, *counts, ng_proposed=True)
    assert (float(s_ng), float(f_ng)) == pytest.approx((3.0 * p.decay, 1.0 * p.decay + 1))  # proposed, 0 right


def test_a_choice_made_before_the_drafter_ran_is_the_one_taken():
    """The hybrid decides before the model drafter runs (the engine limits the drafter to that choice) and takes
    that choice at the same output length, observing the last step once; at another length it decides afresh."""
    cost = load_cost_model("llama3.1-8b-h100")
    plan = make_plan("hybrid", 5, policy="adaptive", cost_model=cost)
    assert plan["adaptive"]["drafter_charge"] == "first-pass" and DraftPlanner(plan).drafter_follows_choice
    a, b = DraftPlanner(plan), DraftPlanner(plan)
    out = [5, 6, 7]
    a.propose("r", "-", out[:1], own=[6, 7, 8, 9, 9], ngram=[6, 7, 1])
    b.propose("r", "-", out[:1], own=[6, 7, 8, 9, 9], ngram=[6, 7, 1])
    choice = a.decide("r", out, ngram=[1, 2], batch_size=1, context=10)
    pa = a.propose("r", "-", out, own=[8] * 5, ngram=[9, 9, 9], batch_size=1, context=10)
    pb = b.propose("r", "-", out, own=[8] * 5, ngram=[1, 2], batch_size=1, context=10)
    assert (pa.source == "ngram", len(pa.draft)) == (choice[0], min(choice[1], len(pa.draft)))
    assert a.state["r"].counts == b.state["r"].counts  # observed once, as without the early decision
    assert pa.ngram_len == 2  # the proposal the choice was made with, not the later one
    # a decision at another length (the step produced other tokens than the tensor said) is dropped
    a.decide("r", out + [8, 9], ngram=[], batch_size=1, context=12)
    pc = a.propose("r", "-", out + [8], own=[8] * 5, ngram=[4], batch_size=1, context=11)
    assert pc.ngram_len == 1 and a.state["r"].pending is None
    assert DraftPlanner.drafter_k([(True, 3), (True, 5)]) == 1  # all n-gram: the first pass alone
    assert DraftPlanner.drafter_k([(True, 3), (False, 2), (False, 4)]) == 4
    assert not DraftPlanner(make_plan("controlled", 3, profile="none")).drafter_follows_choice


def test_drafter_charge_full_charges_the_drafters_whole_draft_every_step():
    p = AdaptiveParams(eagle_k_max=5, drafter_charge="full")
    assert p.drafter_input(np.array([True, False]), np.array([2, 4])).tolist() == [6, 6]
    f = AdaptiveParams(drafter_charge="first-pass")
    assert f.drafter_input(np.array([True, False]), np.array([2, 4])).tolist() == [3, 1]
    with pytest.raises(SpecReproError, match="drafter charge"):
        AdaptiveParams(drafter_charge="some")


def test_jobs_that_cannot_substitute_drafts_are_refused_with_one_line():
    sync = {"async_scheduling": False}
    assert refusal("hybrid", sync, "0.32.0") is None and refusal("hybrid", sync, "0.10.1.1") is None
    assert refusal("hybrid", sync, None) is None
    assert "synchronous scheduling" in refusal("hybrid", {"async_scheduling": True}, "0.32.0")
    assert "synchronous scheduling" in refusal("oracle-ngram", {}, "0.34.0")  # 0.34 schedules async by default
    msg = refusal("hybrid", sync, "0.34.0")
    assert "no draft-substitution hook" in msg and "\n" not in msg
    assert "no draft-substitution hook" in refusal("controlled", sync, "0.9.2")
    assert DRAFT_HOOKS == ("0.10.", "0.11.", "0.32.")
    assert draft_table_for("0.34.0") is not None and not draft_table_for("0.34.0").runtime


def test_plans_are_checked():
    with pytest.raises(SpecReproError, match="oracle of"):
        make_plan("oracle", 20, of="suffix")
    with pytest.raises(SpecReproError, match="cost model"):
        make_plan("hybrid", 5, policy="adaptive")
    # a prompt the plan has no reference for (the engine's warm-up) keeps the drafter's own draft
    assert DraftPlanner(_plan("oracle", of="ngram")).propose("r", "other", [1], own=[4, 5]).source == "unplanned"


def test_cpu_config_plans_the_draft_jobs_with_their_engines_and_traces():
    import yaml

    from specrepro.config import config_problems
    from specrepro.jobspec.drafts import draft_bench_spec, draft_jobs
    from conftest import REPO

    cfg = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    assert config_problems(cfg) == []
    exp = next(e for e in cfg["experiments"] if e["name"] == "smollm2")
    jobs = draft_jobs(exp)
    assert sorted(jobs) == sorted(
        ["oracle-ngram-k20", "oracle-eagle-k20", "oracle-combine-k20", "hybrid-adaptive-eagle-k5",
         "hybrid-ngram-first-eagle-k5"] + [f"controlled-eagle-k{k}" for k in (1, 3, 8)])
    assert jobs["oracle-ngram-k20"]["method"] == "ngram" and jobs["oracle-ngram-k20"]["traces"] == ["ngram"]
    assert jobs["oracle-combine-k20"]["method"] == "eagle" and jobs["oracle-combine-k20"]["traces"] == ["ngram", "eagle"]
    assert jobs["hybrid-adaptive-eagle-k5"]["traces"] == []
    assert jobs["controlled-eagle-k3"]["datasets"] == ["smol_news"] == jobs["oracle-eagle-k20"]["datasets"]
    spec = draft_bench_spec(cfg, "smollm2", "controlled-eagle-k3")
    assert spec["method"] == "eagle" and spec["k"] == 3 and spec["engine"]["async_scheduling"] is False
    assert spec["draft"]["profiles"] == ["none", "all", {"trace": "eagle"}]
    # the calibration spans k (issue 22: >= 3 values, every-draft-accepted rows at each)
    assert all(jobs[f"controlled-eagle-k{k}"]["profiles"] == ["none", "all"] for k in (1, 8))
    # a draft job whose traces the experiment does not record, or on an engine without the hook, is a config error
    bad = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    sm = next(e for e in bad["experiments"] if e["name"] == "smollm2")
    sm["drafts"] = [{"mode": "oracle", "of": "eagle3", "k": 20}, {"mode": "hybrid", "drafter": "eagle", "k": 5}]
    problems = config_problems(bad)
    assert any("has no eagle3 drafter" in p for p in problems)
    assert any("needs the eagle3 keep-one traces" in p for p in problems)
    assert any("mode hybrid needs policy" in p for p in problems)


def test_draft_records_join_the_step_that_verified_them():
    """engine.run.draftrecords by hand: a draft made at output position g is verified by the step with
    c + n - d - P = g; counters agree when the verified drafts and accepted tokens add up to vLLM's."""
    from specrepro.engine.run.draftrecords import draft_steps, draft_summary

    drafts = [{"req": "0-a", "g": 1, "n": 3, "source": "ngram", "ngram_len": 3},
              {"req": "0-a", "g": 3, "n": 2, "source": "drafter"},
              {"req": "0-a", "g": 5, "n": 0, "source": "ngram"}]          # empty draft: verifies nothing
    steps = [{"req": {"id": ["0-a"], "computed": [0], "scheduled": [10], "drafts": [0], "valid": [1], "prompt_len": [10]}},
             {"req": {"id": ["0-a"], "computed": [10], "scheduled": [4], "drafts": [3], "valid": [3], "prompt_len": [10]}},
             {"req": {"id": ["0-a"], "computed": [12], "scheduled": [3], "drafts": [2], "valid": [1], "prompt_len": [10]}}]
    t = draft_steps(drafts, steps)
    assert t["accepted"].tolist()[:2] == [2, 0] and t["scheduled_drafts"].tolist() == [3, 2, 0]
    s = draft_summary(t, {"num_drafts": 2, "num_draft_tokens": 5, "num_accepted_tokens": 2})
    assert s["counters_agree"] and s["share_ngram"] == 0.5 and s["share_drafter"] == 0.5
    assert not draft_summary(t, {"num_drafts": 2, "num_draft_tokens": 5, "num_accepted_tokens": 3})["counters_agree"]
    from specrepro.engine.run.draftrecords import trace_mismatches

    # an oracle at g = 1 expects min(acc[1] - 1, 3) = 2 accepted, at g = 3 min(acc[3] - 1, 2)
    assert trace_mismatches(t, {"ngram": [1, 3, 1, 1, 1, 1]}) == (2, 0)
    assert trace_mismatches(t, {"ngram": [1, 3, 1, 2, 1, 1]}) == (2, 1)          # the trace says 1 at g = 3
    assert trace_mismatches(t, {"ngram": [1, 2, 1, 1], "eagle": [1, 3, 1, 1]}) == (2, 0)  # combine: the better


def test_draft_bench_refuses_async_scheduling_before_the_engine_starts(tmp_path, capsys):
    """A draft job with async scheduling on stops with one line before vLLM is built (exit 2)."""
    import json

    import pandas as pd
    import yaml

    from conftest import REPO
    from specrepro.cli import main
    from specrepro.jobspec.drafts import draft_bench_spec

    cfg = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    spec = draft_bench_spec(cfg, "smollm2", "hybrid-ngram-first-eagle-k5")
    spec["engine"]["async_scheduling"] = True
    prompts = []
    for d in spec["datasets"]:
        p = tmp_path / f"{d}.parquet"
        pd.DataFrame({"dataset": [d], "request_index": [0], "request_id": ["r0"], "prompt_token_ids": [[1, 2, 3]]}
                     ).to_parquet(p)
        prompts.append(str(p))
    (tmp_path / "t.json").write_text(json.dumps({"name": "m", "path": str(tmp_path)}))
    rc = main(["draft-bench", "--spec", json.dumps(spec), "--prompts", *prompts, "--target-manifest",
               str(tmp_path / "t.json"), "-o", str(tmp_path / "out.parquet")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "refused" in err[-1] and "synchronous scheduling" in err[-1]
    assert not (tmp_path / "out.parquet").exists()
