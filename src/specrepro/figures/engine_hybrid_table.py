"""Table: the hybrid proposer chosen online inside vLLM, measured and simulated, against each single method and
Oracle Combine (issue 23; :mod:`specrepro.analysis.drafted`).

Input: ``specrepro engine-drafted``'s hybrid table (per dataset, batch size and hybrid: measured speedup with its
95 % interval, the simulated one on the same requests with the engine's accounting, the best single method
measured, Oracle Combine measured and simulated, the share of the gap closed, the median share of steps n-gram's
draft was chosen), its per-request choice shares beside it (``choice_shares.csv``: how many requests each hybrid point
rests on, column ``requests`` of this table's CSV) and its summary (where the hybrid loses and why, in ms from the cost
model, and the hybrids' closed loop fed wrong acceptance). The section opens with :func:`finding`, one sentence from
this table's CSV; where it loses, and the falsification, follow the table. Under MIN_INTERVAL_REQUESTS requests per
point no interval is printed, and where it loses is read on the point values.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import FigureSpec, TraceContext
from ._enginesim import fmt
from ..core.io import read_json, write_csv, write_text
from ..core.latex import fit_width, tex_escape
from ..core.uncertainty import MIN_INTERVAL_REQUESTS, printable_interval, request_range, too_few_text
from . import style

SPEC = FigureSpec(
    name="tab_hybrid",
    kind="table",
    title="Choosing the proposer online inside vLLM: the hybrid, measured and simulated",
    paper_ref="Sec. 7 (beyond the paper)",
    caption=(
        "The plugin's hybrid proposer on {subject_label}: before the model drafter runs, a policy picks n-gram's "
        "draft or the drafter's per request and step: adaptive (the simulator's own online policy, the same function "
        "in engine and simulator) and n-gram first (vLLM PR #24344's rule). Per dataset and batch size: the better "
        "single method measured (fixed k), each hybrid's measured speedup over no SD (95 % paired bootstrap interval; "
        f"none over fewer than {MIN_INTERVAL_REQUESTS} requests, and the note below says so) "
        "with the simulator's prediction in parentheses (same requests, this run's cost model and traces, the model "
        "drafter charged as the engine runs it: its first pass every step, its whole draft where a request takes "
        "it), Oracle Combine measured (simulated), "
        "the share of the gap from the best single method to Oracle Combine the adaptive hybrid closes (measured / "
        "simulated) and the median share of its steps that verified n-gram's draft."
    ),
    paper_statement=(
        "The paper's way forward: n-gram wins at some positions and requests, EAGLE at others, and choosing the "
        "proposer online could approach Oracle Combine; no released engine does it."
    ),
    data="engine runs (vLLM plugin's draft hook) and this run's engine traces",
)

HYBRIDS = ("hybrid-adaptive", "hybrid-ngram-first")


def add_arguments(p) -> None:
    p.add_argument("--hybrid", required=True, help="results/simulator/engine-<exp>/hybrid.csv")
    p.add_argument("--summary", required=True, help="results/simulator/engine-<exp>/drafted.json")
    p.add_argument("--csv", required=True)


def _pct(v) -> str:
    return fmt(None if v is None else 100 * v, "{:.0f}")


def with_requests(t: pd.DataFrame, shares: pd.DataFrame | None) -> pd.DataFrame:
    """The hybrid table with ``requests``: how many requests each (dataset, configuration, B) rests on, from the
    per-request choice shares (``choice_shares.csv``, one row per request of a hybrid point); NaN without them."""
    t = t.drop(columns=["requests"], errors="ignore")
    if shares is None or shares.empty or not len(t):
        return t.assign(requests=pd.NA).astype({"requests": "Int64"})
    n = (shares.groupby(["dataset", "config", "batch_size"])["request_index"].nunique().rename("requests")
         .reset_index())
    return t.merge(n, on=["dataset", "config", "batch_size"], how="left").astype({"requests": "Int64"})


def _n(v):
    return None if v is None or pd.isna(v) else int(v)


def _few(t: pd.DataFrame) -> pd.Series:
    """Rows resting on fewer than MIN_INTERVAL_REQUESTS requests (unknown counts: not few)."""
    if "requests" not in t:
        return pd.Series(False, index=t.index)
    n = pd.to_numeric(t["requests"], errors="coerce")
    return n.notna() & (n < MIN_INTERVAL_REQUESTS)


def few_requests_sentence(t: pd.DataFrame) -> str:
    text = too_few_text(pd.to_numeric(t["requests"], errors="coerce"), rows="rows") if "requests" in t else ""
    return f"{text}, none shown." if text else ""


def as_printed(v: pd.Series) -> pd.Series:
    """Speedups at the two decimals the table prints them with: point values are compared as a reader sees them
    (1.15 against 1.15 is level, whichever way the third decimal goes)."""
    return pd.to_numeric(v, errors="coerce").map(lambda x: float(fmt(x)) if pd.notna(x) else x)


def _pct_signed(v: float) -> str:
    """A signed percentage in whole points, with one decimal under 1 % (a loss of 0.3 % is not "-0 %")."""
    return f"{100 * v:+.1f}" if abs(100 * v) < 0.95 else f"{100 * v:+.0f}"


def loses_on_points(t: pd.DataFrame, ctx: TraceContext) -> str:
    """Where each hybrid is below the better single method on the point values (no interval to go by)."""
    lose = t[as_printed(t["measured"]) < as_printed(t["best_single_measured"])]
    if lose.empty:
        return "On the point values no hybrid is below the better single method at any measured point."
    pts = "; ".join(f"{r.hybrid.removeprefix('hybrid-')} on {ctx.dataset_label(r.dataset)} at B = {int(r.batch_size)} "
                    f"({_pct_signed(r.vs_best_measured)} % against {style.METHOD_LABELS.get(r.best_single, r.best_single)})"
                    for r in lose.itertuples(index=False))
    return f"Where it loses on the point values (below the better single method): {pts}."


def _loses_text(t: pd.DataFrame, ctx: TraceContext, summary: dict) -> str:
    """The summary's sentences on where the hybrid loses and why; where points rest on too few requests for a 95 %
    interval, the where (which reads the interval) is :func:`loses_on_points` instead, before the summary's why."""
    if not len(t) or not _few(t).any():
        return summary.get("loses", "")
    why = summary.get("loses_why", "")
    return loses_on_points(t, ctx) + (f" {why}" if why else "")


def _gap_cell(measured, simulated) -> str:
    """``measured / simulated %`` of the gap closed; ``--`` for a side with no gap to close, one ``--`` for both."""
    m, sim = _pct(measured), _pct(simulated)  # fmt's "--" for a missing side
    return "--" if m == sim == "--" else f"{m} / {sim}\\,\\%"


def no_gap_sentence(t: pd.DataFrame) -> str:
    """Why the adaptive hybrid's gap-closed cells are empty where they are: Oracle Combine, as the engine pays for it,
    not above the better single method (measured or simulated), or measured above it without a 95 % interval that
    lies wholly above it (:func:`specrepro.analysis.drafted.hybrid_summary`); empty where every cell has a value."""
    if not len(t) or "hybrid" not in t:
        return ""
    ad = t[t["hybrid"] == "hybrid-adaptive"]
    parts = []
    m = ad[ad["gap_closed_measured"].isna()]
    if len(m):
        below = int((m["combine_measured"] <= m["best_single_measured"]).sum())
        if below:
            parts.append(f"Oracle Combine measured at or below the better single method at {below} of {len(ad)} points")
        if len(m) - below:
            parts.append(f"measured above it at {len(m) - below}, but without a 95 % interval wholly above it")
    n_sim = int(((ad["combine_simulated"] <= ad["best_single_simulated"]) & ad["gap_closed_simulated"].isna()).sum())
    if n_sim:
        parts.append(f"simulated at or below it at {n_sim}")
    if not parts:
        return ""
    return ("Gap closed --: no gap to close where " + "; ".join(parts) + " (inside vLLM it runs both drafters "
            "every step).")


def to_latex(t: pd.DataFrame, ctx: TraceContext, summary: dict) -> str:
    few = _few(t)
    ci = "" if len(t) and few.all() else r" [95\,\%]"
    lines = [r"\begin{tabular}{@{}lrllllrr@{}}", r"\toprule",
             f"dataset & $B$ & best single & adaptive{ci} (sim.) & n-gram first (sim.) & Oracle Combine (sim.) "
             r"& gap closed & n-gram share \\",
             r"\midrule"]

    def cell(r) -> str:
        if r is None:
            return "--"
        lo, hi = printable_interval(r.measured_ci_low, r.measured_ci_high, _n(getattr(r, "requests", None)))
        iv = "" if pd.isna(lo) or pd.isna(hi) else f" [{fmt(lo)}, {fmt(hi)}]"
        return f"{fmt(r.measured)}{iv} ({fmt(r.simulated)})"

    for (ds, b), g in t.groupby(["dataset", "batch_size"], sort=False):
        by = {r.hybrid: r for r in g.itertuples(index=False)}
        first = g.iloc[0]
        ad, nf = by.get("hybrid-adaptive"), by.get("hybrid-ngram-first")
        nf_cell = "--" if nf is None else f"{fmt(nf.measured)} ({fmt(nf.simulated)})"
        gap = "--" if ad is None else _gap_cell(ad.gap_closed_measured, ad.gap_closed_simulated)
        share = "--" if ad is None or "share_ngram" not in g or pd.isna(getattr(ad, "share_ngram", None)) else \
            f"{100 * ad.share_ngram:.0f}\\,\\%"
        best = f"{tex_escape(style.METHOD_LABELS.get(first.best_single, first.best_single))} {fmt(first.best_single_measured)}"
        lines.append(f"{tex_escape(ctx.dataset_label(ds))} & {int(b)} & {best} & {cell(ad)} & {nf_cell} & "
                     f"{fmt(first.combine_measured)} ({fmt(first.combine_simulated)}) & {gap} & {share} \\\\")
    if not len(t):
        lines.append(r"\multicolumn{8}{c}{no hybrid configuration both benchmarked and traced} \\")
    lines = fit_width(lines + [r"\bottomrule", r"\end{tabular}"])
    falsified = (summary.get("hybrid_falsification") or {}).get("sentence", "")
    note = " ".join(x for x in (few_requests_sentence(t), no_gap_sentence(t), _loses_text(t, ctx, summary), falsified)
                    if x)
    tail = ["", r"\smallskip", f"\\parbox{{\\textwidth}}{{\\footnotesize {tex_escape(note)}}}"]
    return "\n".join(lines + tail) + "\n"


def build(args, ctx: TraceContext) -> None:
    t = pd.read_csv(args.hybrid) if args.hybrid else pd.DataFrame()
    summary = read_json(args.summary)
    # the per-request choice shares, written beside hybrid.csv by the same job: how many requests each point rests on
    shares_path = Path(args.hybrid).with_name("choice_shares.csv") if args.hybrid else None
    shares = pd.read_csv(shares_path) if shares_path is not None and shares_path.exists() else None
    order = {d: i for i, d in enumerate(ctx.datasets)}
    if len(t):
        t = t.sort_values(["dataset", "batch_size", "hybrid"], key=lambda s: s.map(order) if s.name == "dataset" else s)
        t = with_requests(t, shares)
    labels = t["dataset"].map(ctx.dataset_label) if len(t) else []
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind, dataset_label=labels), float_format="%.6g")
    write_text(args.output, to_latex(t, ctx, summary))


def finding(csv) -> str:
    """The section's finding, one sentence from this table's CSV (``figures/tab_hybrid-<subject>.csv``: the hybrid
    table ``results/simulator/<subject>/hybrid.csv`` with each point's requests from ``choice_shares.csv``): the
    adaptive hybrid's measured speedups against the better single method's at the same points, at how many points it
    is below (or above) it, beyond the 95 % interval where the points rest on enough requests, else on the point
    values, saying so, and its largest loss."""
    csv = Path(csv)
    subject = csv.stem.split("-", 1)[1] if "-" in csv.stem else csv.stem
    src = (f"figures/{csv.name}, from results/simulator/{subject}/hybrid.csv and choice_shares.csv")
    t = pd.read_csv(csv)
    if t.empty or "hybrid" not in t:
        return f"No hybrid configuration was both benchmarked and traced on this run: nothing measured ({src})."
    name = "hybrid-adaptive" if (t["hybrid"] == "hybrid-adaptive").any() else str(t["hybrid"].iloc[0])
    g = t[t["hybrid"] == name]
    few = _few(g)
    ks = g["best_single_k"] if "best_single_k" in g else pd.Series([None] * len(g), index=g.index)
    best = ", ".join(style.METHOD_LABELS.get(m, m) + (f" at k = {int(k)}" if pd.notna(k) else "")
                     for m, k in dict.fromkeys(zip(g["best_single"], ks)))
    # the hybrid's model drafter and its k: a k the best single method does not use is part of the comparison
    first = g.iloc[0]
    drafter = f" ({style.METHOD_LABELS.get(first['drafter'], first['drafter'])} at k = {int(first['k'])})"
    if few.any():
        below = as_printed(g["measured"]) < as_printed(g["best_single_measured"])
        above = as_printed(g["measured"]) > as_printed(g["best_single_measured"])
        how = ""
        basis = (f"; these are point values, as {request_range(g.loc[few, 'requests'])} requests per point are too few for a "
                 "95 % interval")
    else:
        below = g["measured_ci_high"] < g["best_single_measured"]
        above = g["measured_ci_low"] > g["best_single_measured"]
        how = ", beyond its 95 % interval,"
        basis = ""
    by = ""  # how far below, said beside the count it belongs to
    if below.any():
        w = g[below].loc[g.loc[below, "vs_best_measured"].idxmin()]
        ds = w["dataset_label"] if "dataset_label" in w and pd.notna(w["dataset_label"]) else w["dataset"]
        by = f" (by up to {-100 * w['vs_best_measured']:.0f} %, on {ds} at B = {int(w['batch_size'])})"
    level = int((~below & ~above).sum()) if few.any() else 0
    text = (f"Chosen online inside vLLM, the {name.removeprefix('hybrid-')} hybrid of n-gram and the model drafter"
            f"{drafter} "
            f"reaches {g['measured'].min():.2f}-{g['measured'].max():.2f}x over no SD against "
            f"{g['best_single_measured'].min():.2f}-{g['best_single_measured'].max():.2f}x for the better single method "
            f"({best}) at the same {len(g)} (dataset, B) points, and is{how} below it at {int(below.sum())} of them{by}"
            + (f", level with it to the table's two decimals at {level}" if level else "")
            + f" and above it at {int(above.sum())}")
    return text + f"{basis} ({src})."
