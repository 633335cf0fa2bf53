"""Statements the report makes about its numbers say what the numbers are (issue 24, items 5 and 6)."""

from __future__ import annotations

import pandas as pd

from specrepro.figures.engine_sim_table import bounds_table


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
