"""The paper's question on today's engines, on the released traces: k by batch size, suffix decoding, oracles.

**How the k-by-batch-size schedule is chosen** (:func:`choose_schedule`). For one proposer, the simulator
(paper mode, the configured cost model, the released traces) gives the speedup of every fixed k in
``1..k_max`` at every simulated batch size. At each batch size the schedule takes the k with the highest
geometric mean of the speedup over the datasets (k = 0, no speculation, counts as speedup 1; ties go to
the smaller k), because vLLM's ``num_speculative_tokens_per_batch_size`` is one schedule per engine,
whatever the dataset. Batch sizes between two simulated ones take the k of the one below, as vLLM fills
them. The *held-out* schedule of a dataset is chosen the same way on the other datasets only; the
simulator evaluates each dataset with its held-out schedule, so a dataset never picks its own k. The
*pooled* schedule (all datasets) is the one an engine would be given.

The candidates (``simulator.today.k_candidates``) run to k = 20, the drafts the released traces record:
a choice equal to the largest candidate is *censored* (a larger k might be better) and the schedule
document lists it (``censored``); with 1..20 none is.

**The gap** (:func:`gap_table`). Per dataset and batch size: the best fixed k of the paper (n-gram or
EAGLE, k = 1, 3 or 5), the best fixed k over the same candidates the schedules choose from (n-gram or
EAGLE, every fixed k the summaries hold: ``best_fixed_wide``), the oracle (Oracle Combine over n-gram,
EAGLE and suffix: the per-position best of the three, verifying exactly what it accepts), and for each
method the share of the gap between a best fixed k and the oracle that it closes,
``(S - S_best_fixed) / (S_oracle - S_best_fixed)`` (``<key>_closed``; against the wide one
``<key>_closed_wide``; negative: slower than that fixed k). Against the paper's k = 1, 3, 5 a schedule
also gets credit for a larger k. At one batch size a schedule *is* one fixed k of the same candidates, so against
the best of them it closes at most 0 % there by construction: what choosing k by batch size gains shows only where
batch sizes mix (:func:`mixed_table`). ``honest_oracle``: Oracle Combine of n-gram and EAGLE charged both
drafters' cost at every step (the simulator's ``combine_cost: both``), where the summaries hold it.

**Mixed batch sizes** (:func:`mixed_table`). One run that spends the same no-SD time at each simulated batch size
of a dataset (the sweep's B = 1 .. 128): a method's speedup over that run is the harmonic mean of its per-batch-size
speedups (the time it takes is the no-SD time over its speedup at each B). A schedule (held out from the dataset)
takes its k per batch size; a fixed k keeps one k for the whole run, and the best single fixed k over the same
candidates is chosen on the dataset itself (in-sample, so the comparison favours the fixed k). The shares closed
are against the paper-accounting oracle and the honest-cost one. Harmonic means of separately drawn rows have no
interval here (their per-request values are not in the summaries). Every speedup carries the 95 % bootstrap interval over the drawn requests of the simulator row
it comes from (``<key>_ci_low``, ``<key>_ci_high``; :mod:`specrepro.core.uncertainty`, as the other simulator
tables); the shares closed have none (their three speedups' per-request values are not in the summaries).
"""

from __future__ import annotations

import json
import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.errors import SpecReproError
from ..core.latex import whole
from ..jobspec.schedule import schedules_for  # noqa: F401 - re-exported
from ..core.io import write_json

#: the paper's fixed-k configurations: the baseline the gap is measured from
PAPER_FIXED = tuple((p, f"fixed-{k}") for p in ("ngram", "eagle") for k in (1, 3, 5))

#: (key, proposer, policy, label) of every method of the comparison, in display order
METHODS = (
    ("best_fixed", None, None, "best fixed k (paper)"),
    ("eagle_k3", "eagle", "fixed-3", "EAGLE, k = 3 (the paper's engine runs)"),
    ("ngram_schedule", "ngram", "batch-schedule", "n-gram, k by batch size"),
    ("eagle_schedule", "eagle", "batch-schedule", "EAGLE, k by batch size"),
    ("suffix_k3", "suffix", "fixed-3", "suffix, k = 3"),
    ("suffix_schedule", "suffix", "batch-schedule", "suffix, k by batch size"),
    ("adaptive", "combined", "adaptive", "online adaptive (n-gram/EAGLE)"),
    ("eagle_oracle", "eagle", "oracle", "EAGLE oracle"),
    ("suffix_oracle", "suffix", "oracle", "suffix oracle"),
    ("combined_oracle", "combined", "oracle", "Oracle Combine (n-gram, EAGLE)"),
    ("combined3_oracle", "combined3", "oracle", "Oracle Combine (n-gram, EAGLE, suffix)"),
)
ORACLE = "combined3_oracle"


# --- choosing the schedule ---------------------------------------------------------------


def k_table(grid: pd.DataFrame, proposer: str, datasets: Sequence[str]) -> pd.DataFrame:
    """Geometric-mean speedup over ``datasets`` of every fixed k (and k = 0) of ``proposer``, by batch size.

    Rows: batch size; columns: k. ``grid`` holds paper-mode simulator summaries with fixed-k policies.
    """
    g = grid[(grid["proposer"] == proposer) & grid["policy"].str.startswith("fixed-")
             & (grid["batching"] == "replicate") & (grid["pairing"] == "index")]
    g = g[g["dataset"].isin(list(datasets))].assign(k=lambda d: d["policy"].str.split("-").str[1].astype(int))
    if g.empty:
        raise SpecReproError(f"no fixed-k simulations of proposer {proposer!r} on {', '.join(datasets)}")
    missing = set(datasets) - set(g["dataset"])
    if missing:
        raise SpecReproError(f"no fixed-k simulations of proposer {proposer!r} on {', '.join(sorted(missing))}")
    logs = g.assign(log=np.log(g["speedup"])).pivot_table(index="batch_size", columns="k", values="log", aggfunc="mean")
    counts = g.pivot_table(index="batch_size", columns="k", values="speedup", aggfunc="count")
    if (counts != len(datasets)).any().any():
        raise SpecReproError(f"fixed-k simulations of proposer {proposer!r} do not cover every dataset x batch size x k")
    out = np.exp(logs)
    out.insert(0, 0, 1.0)  # k = 0: no speculation
    return out.sort_index(axis=1)


def to_ranges(choice: Mapping[int, int]) -> list[list[int]]:
    """``{batch size: k}`` -> vLLM's ``[[start, end, k], ...]``: each k holds up to the next batch size, the
    first range starts at 1, the last ends at the largest batch size (vLLM carries it beyond); equal
    neighbours merge."""
    bs = sorted(choice)
    ranges: list[list[int]] = []
    for i, b in enumerate(bs):
        start = 1 if i == 0 else b
        end = bs[i + 1] - 1 if i + 1 < len(bs) else b
        k = int(choice[b])
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, k])
    return ranges


def choose_schedule(grid: pd.DataFrame, proposer: str, datasets: Sequence[str]) -> tuple[list[list[int]], pd.DataFrame]:
    """(schedule, the geometric-mean table it was read from); see the module docstring."""
    table = k_table(grid, proposer, datasets)
    choice = {}
    for b, row in table.iterrows():
        best = row.max()
        choice[int(b)] = int(min(k for k, v in row.items() if v >= best - 1e-12))
    return to_ranges(choice), table


def schedule_doc(grid: pd.DataFrame, proposers: Sequence[str], datasets: Sequence[str], cost_model: str) -> dict:
    """The schedules of every proposer (pooled and held out per dataset) with the tables they come from."""
    out = {
        "rule": ("per batch size, the k in 0..k_max with the highest geometric-mean simulated speedup over the "
                 "datasets (paper mode, released traces); held_out[d]: chosen without dataset d; censored: "
                 "choices at the largest candidate"),
        "cost_model": cost_model, "datasets": list(datasets), "proposers": {},
    }
    for p in proposers:
        sched, table = choose_schedule(grid, p, datasets)
        held = {}
        for d in datasets:
            others = [x for x in datasets if x != d]
            held[d] = choose_schedule(grid, p, others)[0] if others else sched
        top = int(max(table.columns))
        out["proposers"][p] = {
            "schedule": sched,
            "num_speculative_tokens": max(1, max(k for _, _, k in sched)),
            "held_out": held,
            "candidates": [int(k) for k in table.columns if k > 0],
            # choices at the largest candidate: a larger k might have been better (widen the candidates)
            "censored": sorted({f"{name}: B {a}-{b}" for name, s in [("pooled", sched), *held.items()]
                                for a, b, k in s if k == top}),
            "geomean_speedup": {str(int(b)): {str(int(k)): float(v) for k, v in row.items()}
                                for b, row in table.iterrows()},
        }
    return out


# --- the gap each method closes ---------------------------------------------------------------


def _pick(df: pd.DataFrame, proposer: str, policy: str, column: str = "speedup") -> pd.Series:
    """``column`` (speedup, ci_low, ci_high) of one proposer x policy in paper mode, by (dataset, batch size)."""
    sel = df[(df["proposer"] == proposer) & (df["policy"] == policy) & (df["batching"] == "replicate")
             & (df["pairing"] == "index") & (df["combine_cost"] == "ngram")]
    sel = sel.reindex(columns=list(sel.columns) + [c for c in ("ci_low", "ci_high") if c not in sel.columns])
    # the k grid repeats the paper's fixed k (the same simulation): one row each
    return sel.drop_duplicates(["dataset", "batch_size"]).set_index(["dataset", "batch_size"])[column]


def _pick_honest(df: pd.DataFrame) -> pd.Series:
    """Oracle Combine (n-gram, EAGLE) charged both drafters (``combine_cost: both``) by (dataset, batch size)."""
    if "combine_cost" not in df:
        return pd.Series(dtype=float)
    sel = df[(df["proposer"] == "combined") & (df["policy"] == "oracle") & (df["batching"] == "replicate")
             & (df["pairing"] == "index") & (df["combine_cost"] == "both")]
    return sel.drop_duplicates(["dataset", "batch_size"]).set_index(["dataset", "batch_size"])["speedup"]


def gap_table(summaries: pd.DataFrame, datasets: Sequence[str]) -> pd.DataFrame:
    """One row per dataset x batch size: every method's speedup with its interval, and the share of the gap it
    closes."""
    rows = []
    series = {key: _pick(summaries, p, pol) for key, p, pol, _ in METHODS if p}
    ci = {(key, end): _pick(summaries, p, pol, f"ci_{end}") for key, p, pol, _ in METHODS if p
          for end in ("low", "high")}
    fixed = {pp: _pick(summaries, *pp) for pp in PAPER_FIXED}
    wide = _fixed_k_rows(summaries)
    honest = _pick_honest(summaries)
    for ds in datasets:
        bss = sorted({b for (d, b) in series[ORACLE].index if d == ds})
        if not bss:
            raise SpecReproError(f"no Oracle Combine (n-gram, EAGLE, suffix) simulation of dataset {ds!r}")
        for b in bss:
            row = {"dataset": ds, "batch_size": int(b)}
            cands = {pp: s.get((ds, b)) for pp, s in fixed.items() if (ds, b) in s.index}
            if not cands:
                raise SpecReproError(f"{ds}, B = {b}: no paper-mode fixed-k simulation (n-gram or EAGLE, k = 1, 3, 5)")
            (bp, bpol), best = max(cands.items(), key=lambda kv: kv[1])
            row.update(best_fixed=best, best_fixed_proposer=bp, best_fixed_k=int(bpol.split("-")[1]),
                       best_fixed_ci_low=float(_pick(summaries, bp, bpol, "ci_low").get((ds, b), math.nan)),
                       best_fixed_ci_high=float(_pick(summaries, bp, bpol, "ci_high").get((ds, b), math.nan)))
            w = wide[(wide["dataset"] == ds) & (wide["batch_size"] == b)]
            wb = w.loc[w["speedup"].idxmax()]
            row.update(best_fixed_wide=float(wb["speedup"]), best_fixed_wide_proposer=wb["proposer"],
                       best_fixed_wide_k=int(wb["k"]), best_fixed_wide_ci_low=float(wb.get("ci_low", math.nan)),
                       best_fixed_wide_ci_high=float(wb.get("ci_high", math.nan)),
                       wide_candidates=_k_range(sorted(set(w["k"]))))
            for key, p, pol, _ in METHODS:
                if p:
                    row[key] = float(series[key].get((ds, b), math.nan))
                    for end in ("low", "high"):
                        row[f"{key}_ci_{end}"] = float(ci[(key, end)].get((ds, b), math.nan))
            row["honest_oracle"] = float(honest.get((ds, b), math.nan))
            for suffix, base in (("closed", best), ("closed_wide", row["best_fixed_wide"])):
                gap = row[ORACLE] - base
                for key, p, _, _ in METHODS:
                    if p and key != ORACLE:
                        row[f"{key}_{suffix}"] = (row[key] - base) / gap if gap > 0 else math.nan
            rows.append(row)
    return pd.DataFrame(rows)


#: the schedules of the mixed-batch-size comparison: key of gap_table -> label
MIXED = (("ngram_schedule", "n-gram k(B)"), ("eagle_schedule", "EAGLE k(B)"), ("suffix_schedule", "suffix k(B)"))


def _hmean(values) -> float:
    v = np.asarray(list(values), dtype=float)
    return float(len(v) / np.sum(1.0 / v)) if len(v) and np.all(v > 0) else math.nan


def mixed_table(summaries: pd.DataFrame, gap: pd.DataFrame) -> pd.DataFrame:
    """One row per dataset: the speedups over a run that spends the same no-SD time at each of its simulated batch
    sizes (module docstring, "Mixed batch sizes"): the best single fixed k of n-gram or EAGLE over the schedules'
    candidates, each schedule, the oracle (paper accounting) and the honest-cost Oracle Combine, and the share of
    the gap from that fixed k to each oracle that each schedule closes."""
    wide = _fixed_k_rows(summaries)
    rows = []
    for ds, g in gap.groupby("dataset", sort=False):
        bss = sorted(int(b) for b in g["batch_size"])
        w = wide[wide["dataset"] == ds]
        fixed = {}
        for (p, k), f in w.groupby(["proposer", "k"]):
            s = f.set_index("batch_size")["speedup"]
            if all(b in s.index for b in bss):
                fixed[(p, int(k))] = _hmean(s[b] for b in bss)
        if not fixed:
            continue
        (fp, fk), fbest = max(fixed.items(), key=lambda kv: kv[1])
        row = {"dataset": ds, "batch_sizes": ", ".join(map(str, bss)), "best_fixed": fbest, "best_fixed_proposer": fp,
               "best_fixed_k": fk, ORACLE: _hmean(g[ORACLE]), "honest_oracle": _hmean(g["honest_oracle"])
               if "honest_oracle" in g else math.nan}
        for key, _ in MIXED:
            row[key] = _hmean(g[key])
            for o, name in ((ORACLE, "closed"), ("honest_oracle", "closed_honest")):
                gap_o = row[o] - fbest
                row[f"{key}_{name}"] = (row[key] - fbest) / gap_o if gap_o > 0 else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def mixed_statements(m: pd.DataFrame, label=lambda d: d) -> list[str]:
    """One sentence per dataset of :func:`mixed_table`."""
    out = []
    for r in m.to_dict("records"):
        best = max((k for k, _ in MIXED[:2]), key=lambda k: -math.inf if math.isnan(r[k]) else r[k])
        who = "EAGLE" if best == "eagle_schedule" else "n-gram"
        honest = ("" if pd.isna(r["honest_oracle"]) else
                  f"; against Oracle Combine charged both drafters ({r['honest_oracle']:.2f}x) it "
                  + _closes(r[f'{best}_closed_honest'], 'that fixed k', of=""))
        out.append(f"{label(r['dataset'])}, batch sizes {r['batch_sizes']} mixed: one fixed k at best "
                   f"{r['best_fixed']:.2f}x ({_who(r['best_fixed_proposer'])}, k = {r['best_fixed_k']}), k by batch "
                   f"size ({who}) {r[best]:.2f}x, the oracle {r[ORACLE]:.2f}x: k by batch size "
                   f"{_closes(r[f'{best}_closed'], 'that fixed k')}{honest}.")
    return out


def _fixed_k_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Every paper-mode fixed-k row of n-gram and EAGLE (one per proposer x k x dataset x batch size; the
    k grid and the paper's summaries hold the same simulation of k = 1, 3, 5 once each)."""
    sel = df[df["proposer"].isin(["ngram", "eagle"]) & df["policy"].str.match(r"^fixed-\d+$")
             & (df["batching"] == "replicate") & (df["pairing"] == "index") & (df["combine_cost"] == "ngram")]
    sel = sel.assign(k=sel["policy"].str.split("-").str[1].astype(int))
    return sel.drop_duplicates(["proposer", "k", "dataset", "batch_size"])


def _k_range(ks: Sequence[int]) -> str:
    """``1-20`` for a run of consecutive k, else ``1, 3, 5``."""
    ks = [int(k) for k in ks]
    if len(ks) > 2 and ks == list(range(ks[0], ks[-1] + 1)):
        return f"{ks[0]}-{ks[-1]}"
    return ", ".join(map(str, ks))


def statements(t: pd.DataFrame, batch_sizes: Sequence[int] = (1, 64), label=lambda d: d) -> list[str]:
    """One sentence per dataset: at each of ``batch_sizes`` the paper's best fixed k and the oracle (speedups with
    their 95 % intervals in brackets, where the table has them) and the share of that gap suffix decoding (k by batch
    size) closes. Not k by batch size of n-gram or EAGLE: at one batch size it is one fixed k of the same proposers,
    so whatever it gains there is a larger k (the ``best_fixed_wide`` column), never the choice by batch size; that
    shows only where batch sizes mix (:func:`mixed_table`, :func:`one_batch_size_statement`)."""
    out = []
    for ds, sub in t.groupby("dataset", sort=False):
        parts = []
        for b in batch_sizes:
            r = sub[sub["batch_size"] == b]
            if r.empty:
                continue
            r = r.iloc[0]
            parts.append(
                f"at B = {b} the paper's best fixed k gives {_x(r, 'best_fixed')} and the oracle {_x(r, ORACLE)}; "
                f"suffix decoding (k by batch size) {_closes(r['suffix_schedule_closed'], 'that fixed k')}")
        if parts:
            out.append(f"{label(ds)}: " + "; ".join(parts) + ".")
    return out


#: where :func:`mixed_table` is written (the workflow's path, per trace set)
MIXED_CSV = "results/simulator/<trace set>/today/mixed.csv"


def one_batch_size_statement(m: pd.DataFrame | None = None, trace_set: str = "<trace set>") -> str:
    """One sentence on what n-gram's or EAGLE's k by batch size can show: at one batch size it is a fixed k of the same
    candidates (nothing to show, by construction; suffix decoding is another proposer), so its gain is the mixed-batch-size result of :func:`mixed_table` (the range over datasets of the
    better of n-gram's and EAGLE's share closed, where ``m`` has rows) in :data:`MIXED_CSV`."""
    # suffix decoding is a proposer of its own, not one of the n-gram / EAGLE candidates: it can beat "same k"
    text = ("At one batch size the n-gram or EAGLE k by batch size is one fixed k, so it closes nothing there beyond "
            "the best fixed k of the same candidates, by construction (suffix decoding is not among them); what "
            "choosing k by batch size gains shows where batch sizes mix")
    if m is not None and len(m):
        best = m[["ngram_schedule_closed", "eagle_schedule_closed"]].max(axis=1)
        if best.notna().any():
            lo, hi = best.min(), best.max()
            text += (f", where it closes {_pct(lo)}" + ("" if _pct(lo) == _pct(hi) else f" to {_pct(hi)}")
                     + f" of the gap from the best single fixed k to the oracle over {len(m)} dataset"
                     + ("s" if len(m) > 1 else ""))
    return text + f" ({MIXED_CSV.replace('<trace set>', trace_set)})."


def _who(proposer: str) -> str:
    return {"eagle": "EAGLE", "ngram": "n-gram"}.get(proposer, proposer)


def _x(r: Mapping, key: str) -> str:
    """``2.10x [2.05, 2.15]`` (the speedup and its interval), or ``2.10x`` without one."""
    lo, hi = r.get(f"{key}_ci_low", math.nan), r.get(f"{key}_ci_high", math.nan)
    ci = "" if pd.isna(lo) or pd.isna(hi) else f" [{lo:.2f}, {hi:.2f}]"
    return f"{r[key]:.2f}x{ci}"


def _pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else whole(100 * x) + "%"


def _closes(x: float, baseline: str, of: str = " of that gap") -> str:
    """``closes 23% of that gap``; a negative share, which is a speedup below ``baseline``, said as such."""
    if x is None or (isinstance(x, float) and math.isnan(x)) or x >= 0:
        return f"closes {_pct(x)}{of}"
    return f"falls below {baseline} by {_pct(-x)}{of}"


# --- CLI -----------------------------------------------------------------------------------------


def run_k_schedule(a) -> None:
    """The body of ``specrepro k-schedule``."""
    grid = pd.concat([pd.read_csv(f) for f in a.grids], ignore_index=True)
    datasets = list(dict.fromkeys(grid["dataset"]))
    write_json(a.output, schedule_doc(grid, a.proposers, datasets, a.cost_model))


def schedule_json(schedule: Sequence[Sequence[int]]) -> str:
    """A schedule as one JSON line (what vLLM's speculative_config takes)."""
    return json.dumps([list(map(int, e)) for e in schedule])
