"""The beyond-the-paper comparison shared by its table and its figure."""

from __future__ import annotations

import pandas as pd

from ._sim import series

#: (row key, label, how to get it); a getter returns a Series speedup by batch size or None
ROWS = (
    ("combine", "Oracle Combine (paper: n-gram drafting cost)"),
    ("combine_winner", "  drafting cost of the winning proposer"),
    ("combine_both", "  both proposers draft every step"),
    ("combine_equal", "  only requests whose two traces have equal length"),
    ("oracle_equal", "Best single oracle, same equal-length requests"),
    ("oracle_best", "Best single oracle (paper)"),
    ("adaptive", "Adaptive policy (online, past only)"),
    ("fixed_best", "Best fixed k, either proposer (paper)"),
    ("cont_combine", "Continuous batching: Oracle Combine"),
    ("pooled_combine", "  B copies, averaged the same way (total tokens / total time)"),
    ("cont_adaptive", "Continuous batching: adaptive policy"),
    ("cont_eagle3", "Continuous batching: EAGLE k=3"),
    ("cont_ngram3", "Continuous batching: n-gram k=3"),
)


def _s(df, ds, prop, pol, **modes):
    """speedup, ci_low, ci_high by batch size (None if not simulated)."""
    s = series(df, ds, prop, pol, **modes)
    return None if s.empty else s.set_index("batch_size").reindex(columns=["speedup", "ci_low", "ci_high"])


def _pooled(df, ds, prop, pol, **modes):
    """The paper's B copies of one request averaged as continuous batching is (total tokens over total time, column
    ``pooled_speedup``), by batch size; no interval (None where the summaries predate the column)."""
    s = series(df, ds, prop, pol, **modes)
    if s.empty or "pooled_speedup" not in s or s["pooled_speedup"].isna().all():
        return None
    return s.set_index("batch_size")[["pooled_speedup"]].rename(columns={"pooled_speedup": "speedup"}).assign(
        ci_low=float("nan"), ci_high=float("nan"))


def _max(*xs):
    """Per batch size the row (speedup and its interval) of the largest speedup."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    both = pd.concat(xs, keys=range(len(xs)), names=["_src", "batch_size"]).reset_index()
    best = both.sort_values(["batch_size", "speedup", "_src"], ascending=[True, False, True], kind="mergesort")
    return best.drop_duplicates("batch_size").set_index("batch_size")[["speedup", "ci_low", "ci_high"]]


def comparison(df: pd.DataFrame, datasets) -> pd.DataFrame:
    """Tidy rows: dataset, row, label, batch_size, speedup, ci_low, ci_high (the interval of the run the value comes
    from; none for continuous batching)."""
    out = []
    for ds in datasets:
        get = {
            "combine": _s(df, ds, "combined", "oracle"),
            "combine_winner": _s(df, ds, "combined", "oracle", combine_cost="winner"),
            "combine_both": _s(df, ds, "combined", "oracle", combine_cost="both"),
            "combine_equal": _s(df, ds, "combined", "oracle", pairing="equal-length"),
            "oracle_equal": _max(_s(df, ds, "ngram", "oracle", pairing="equal-length"),
                                 _s(df, ds, "eagle", "oracle", pairing="equal-length")),
            "oracle_best": _max(_s(df, ds, "ngram", "oracle"), _s(df, ds, "eagle", "oracle")),
            "adaptive": _s(df, ds, "combined", "adaptive"),
            "fixed_best": _max(*[_s(df, ds, p, f"fixed-{k}") for p in ("ngram", "eagle") for k in (1, 3, 5)]),
            "cont_combine": _s(df, ds, "combined", "oracle", batching="continuous"),
            "pooled_combine": _pooled(df, ds, "combined", "oracle"),
            "cont_adaptive": _s(df, ds, "combined", "adaptive", batching="continuous"),
            "cont_eagle3": _s(df, ds, "eagle", "fixed-3", batching="continuous"),
            "cont_ngram3": _s(df, ds, "ngram", "fixed-3", batching="continuous"),
        }
        eq = series(df, ds, "combined", "oracle", pairing="equal-length")
        n_equal = int(eq["requests"].iloc[0]) if len(eq) else None
        for key, label in ROWS:
            s = get[key]
            if s is None:
                continue
            if key == "combine_equal" and n_equal is not None:
                label = f"{label} ({n_equal} drawn)"
            for b, v in s.iterrows():
                out.append({"dataset": ds, "row": key, "label": label.strip(), "indent": label.startswith("  "),
                            "batch_size": int(b), "speedup": float(v["speedup"]), "ci_low": float(v["ci_low"]),
                            "ci_high": float(v["ci_high"])})
    return pd.DataFrame(out)
