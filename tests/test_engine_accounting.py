"""The simulator's engine accounting (issues 22/23): the oracle as vLLM runs it (``engine_k``) and the
n-gram-first hybrid (vLLM PR #24344's rule), on hand-walked traces."""

from __future__ import annotations

import numpy as np
import pytest

from specrepro.core.costmodel import CostModel
from specrepro.core.errors import SpecReproError
from specrepro.core.policy import AdaptiveParams
from specrepro.sim.simulator import SimSpec, Workload, simulate
from specrepro.sim.simulator.steps import decode_steps

#: T = n + 10, drafter = 2 * input + 1, lookup = 0.1 T, no overhead, no cache term: sums done by hand below
COST = CostModel(name="hand", c_kv=0.0, c_compute=1.0, c_fixed=10.0, d_kv=0.0, d_spec=2.0, d_fixed=1.0, ngram_fraction=0.1,
                 overhead=0.0)


def one(ng, ea, P=4):
    ng, ea = np.array(ng), np.array(ea)
    return Workload(dataset="t", ids=("r",), prompt_len=np.array([P]), output_len=np.array([max(ng.size, ea.size)]),
                    ngram=(ng,), eagle=(ea,), suffix=None)


def test_engine_oracle_caps_at_k_and_charges_the_whole_draft_every_step():
    ea = [5, 1, 2, 1, 1]
    spec = SimSpec("eagle", "oracle", num_requests=1, engine_k=2)
    s = decode_steps(spec, [np.array(ea)], [np.array(ea)], [np.array(ea)], np.array([4]), 1, COST)
    # pos 0: accepts 5, capped at k + 1 = 3 -> pos 3: accepts 1 -> pos 4 = L - 1: done
    assert s.input_len.tolist() == [3, 1] and s.produced.tolist() == [3, 1]
    assert s.eagle_in.tolist() == [3, 3] and s.eagle_w.tolist() == [1, 1] and s.ngram_w.tolist() == [0, 0]
    w = one(ea, ea)
    got = simulate(w, spec, [1], COST).batches["sd_latency"].iloc[0]
    # prefill 4 + 10; step 1: T = 3 + 10, draft 2 * 3 + 1; step 2: T = 1 + 10, draft 7
    assert got == pytest.approx(14 + (13 + 7) + (11 + 7))
    paper = simulate(w, SimSpec("eagle", "oracle", num_requests=1), [1], COST).batches["sd_latency"].iloc[0]
    assert paper == pytest.approx(14 + (15 + 11))  # one step verifying all 5 at the paper's accounting


def test_engine_oracle_combine_charges_both_drafters():
    ng, ea = [1, 4, 1, 1], [2, 1, 1, 1]
    with pytest.raises(SpecReproError):
        SimSpec("combined", "oracle", engine_k=3)  # the engine pays both: only combine_cost 'both'
    spec = SimSpec("combined", "oracle", combine_cost="both", num_requests=1, engine_k=3)
    got = simulate(one(ng, ea), spec, [1], COST).batches["sd_latency"].iloc[0]
    # pos 0: max(1, 2) = 2 -> pos 2: 1 -> pos 3 = L - 1; each step T + 0.1 T + drafter(4 inputs) = 9
    assert got == pytest.approx(14 + 1.1 * 12 + 9 + 1.1 * 11 + 9)


@pytest.mark.parametrize("charge,eagle_in", [("full", [3, 3, 3]), ("chosen", [3, 0, 3])])
def test_ngram_first_walk(charge, eagle_in):
    ng, ea = [1, 3, 1, 1, 1, 1, 1], [1, 2, 2, 1, 3, 1, 1]
    spec = SimSpec("combined", "ngram-first", ngram_match_prob=0.0, num_requests=1,
                   adaptive=AdaptiveParams(eagle_k_max=2, ngram_k_max=2, drafter_charge=charge))
    s = decode_steps(spec, None, [np.array(ng)], [np.array(ea)], np.array([4]), 1, COST)
    # pos 0: no match -> drafter, accepts 1 -> pos 1: n-gram matched (acc 3), 3 -> pos 4: drafter, min(3, 3)
    assert s.gen.tolist() == [1, 2, 5] and s.produced.tolist() == [1, 3, 3] and s.input_len.tolist() == [3, 3, 3]
    assert s.eagle_in.tolist() == eagle_in and s.ngram_w.tolist() == [1, 1, 1]
    got = simulate(one(ng, ea), spec, [1], COST).batches["sd_latency"].iloc[0]
    draft = [2 * e + 1 if e else 0 for e in eagle_in]
    assert got == pytest.approx(14 + sum(1.1 * 13 + d for d in draft))


def test_ngram_first_match_probability_one_always_uses_ngram():
    ng, ea = [1, 1, 1, 1], [4, 4, 4, 4]
    spec = SimSpec("combined", "ngram-first", ngram_match_prob=1.0, num_requests=1,
                   adaptive=AdaptiveParams(eagle_k_max=3, ngram_k_max=3, drafter_charge="full"))
    s = decode_steps(spec, None, [np.array(ng)], [np.array(ea)], np.array([4]), 1, COST)
    assert s.produced.tolist() == [1, 1, 1]  # n-gram matched everywhere but accepts nothing; EAGLE never chosen
    with pytest.raises(SpecReproError):
        SimSpec("eagle", "ngram-first")
