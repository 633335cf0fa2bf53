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
