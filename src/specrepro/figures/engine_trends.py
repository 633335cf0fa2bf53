"""Table: which of the paper's qualitative findings the real CPU model shows, each with its measured numbers.

For every experiment with ``trend_checks: true`` (the CPU run's real model, SmolLM2-135M):

1. *n-gram's acceptance ranks the workloads as the paper's does*: n-gram's acceptance length per
   workload from vLLM's counters (all batch sizes pooled), ranked, against the ranking of the
   paper's own data (the released Llama-3.1-8B traces' mean n-gram acceptance length, from this
   run's acceptance metrics), workloads matched by their prompt template (instructcoder, cnn,
   sharegpt, gsm8k). Shown when the orders are equal.
2. *Verification dominates the step*: the verification share of the profiled step per
   configuration and batch size (vLLM's phase annotations); shown when it is the largest phase
   everywhere but where the paper's own Fig. 4 data make the same exception (paper/claims.yaml: Qwen3-8B's
   draft model at B = 1, drafting 47.1 % against verification 41.9 %), at this run's smallest batch size.
3. *Speedup falls with batch size*: each SD configuration's speedup over no SD at the smallest and the
   largest batch size (mean SD throughput over mean no-SD throughput of the same requests, all workloads
   pooled), each with its 95 % bootstrap interval over requests, and the ratio of the two with its paired
   interval (:mod:`specrepro.core.uncertainty`, the four mean throughputs resampled together): shown when that
   ratio's interval lies below 1 for every configuration, not shown when one lies above 1, "by <configurations>;
   not resolved: <the others>" when some lie below 1 and the others hold 1, not resolved otherwise; each
   configuration's own verdict ends its numbers. Under MIN_INTERVAL_REQUESTS requests no interval is printed and
   nothing is resolved.

4. *The oracle's margin over a fixed k widens with the batch size* (Figs. 10, 12, on the experiment's own traces and
   cost model, :mod:`specrepro.analysis.enginesim`): oracle / best of k = 1, 3, 5 larger at the largest batch size
   than at the smallest, per method and dataset. With it, not a paper finding, the simulator's error against the
   measured speedups (closed loop).

Not checked, because the simulator makes them true whatever the traces say: "a fixed k falls short of the oracle"
(the oracle takes at every position the best of every k, fixed k included) and "Oracle Combine beats every
single-method oracle" (it takes at every position the better of the single oracles at the winner's cost). The
margins themselves are in the row of item 4 and in the experiment's Figs. 10 and 12.

"Acceptance falls with draft position" is not checked: with chain verification position j + 1 is accepted
only if position j is, so the per-position rates vLLM counts cannot rise, whatever the drafter.

Plus, not a paper finding, the trained drafters: held-out acceptance at k = 3 of the untrained drafter, its
least-squares start and the trained drafter (training records), and the same drafter's tokens per step on the
held-out prompts beside the benchmark's (vLLM's counters), each with its interval over requests. The table
never decides a paper claim.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Callable

import pandas as pd

from . import FigureSpec, TraceContext
from ..engine.results.metrics import load_points, pooled_acceptance
from ..core.io import SpecReproError, read_json, write_csv, write_json, write_text
from ..core.latex import tabular_per_group, tex_escape
from ..core.uncertainty import (MIN_INTERVAL_REQUESTS, Interval, bootstrap_function_ci, bootstrap_pooled_ratio_ci,
                                bootstrap_ratio_ci)
from ..analysis.claims import load_claims
from ..analysis.closedloop import config_text
from ..jobspec.args import METHOD_LABELS
from ..analysis.enginesim import best_fixed
from ._enginesim import ordering_text, signed_error_text

SPEC = FigureSpec(
    name="tab_trends",
    kind="table",
    title="Trend checks on the real CPU model",
    paper_ref="Figs. 1, 4, 5; Sec. 4",
    caption=(
        "Which of the paper's qualitative findings the real CPU model ({subject_label}) shows, each with the numbers "
        "measured in this run: vLLM's counters and profiled phases on the stand-in's own workloads (written to be "
        "shaped like the paper's four datasets); the paper's ranking of workloads by n-gram acceptance comes from its "
        "released Llama-3.1-8B traces. Speedups: all workloads pooled, with 95% bootstrap intervals over requests; "
        "the ratio of the largest to the smallest batch size's speedup has a paired interval, and the finding is "
        "shown only where that interval lies below 1. Acceptance per draft position is not a finding here: with "
        "chain verification it cannot rise by construction. Last rows: the drafters trained by the pipeline, "
        "held-out acceptance length (k = 3) untrained, after the least-squares start and after training, and the "
        "trained drafter's tokens per step on the training's held-out prompts beside the benchmark's (vLLM's "
        "counters), each with its 95% interval over requests and per workload: the held-out prompts are new "
        "instances of the training's templates (tools/make_smollm_train_prompts.py), the benchmark's are written "
        "separately, and the two differ by prompt (tools/smollm_acceptance_gap.py walks both with the same rule; "
        "docs/ARTIFACT.md). A CPU run never decides a paper claim."
    ),
    paper_statement=(
        "n-gram drafts best where the output repeats the prompt: its simulated speedup at B = 1, k = 5 ranks code "
        "editing (2.10x), then summaries (1.38x), chat (1.33x), math (1.16x) (Fig. 10(a)-(d), paper/claims.yaml); by "
        "acceptance length, what this table ranks, the released traces put chat above summaries; "
        "verification (the target's forward pass) is the largest phase of a step, but for a draft model at B = 1 "
        "(Qwen3-8B with Qwen3-0.6B: drafting 47.1 %, verification 41.9 %, Fig. 4); speedups fall as the batch grows."
    ),
    data="engine runs (CPU) and released traces",
)

NOT_RESOLVED = "not resolved"
#: a configuration's verdict on "speedup falls with batch size", as the measured text gives it
FALLS = {True: "falls", False: "does not fall", NOT_RESOLVED: "not resolved"}

PAPER_DATASETS = ("instructcoder", "cnn", "sharegpt", "gsm8k")


def add_arguments(p) -> None:
    p.add_argument("--points", nargs="+", required=True, help="bench tables of the checked experiments")
    p.add_argument("--breakdown", nargs="*", default=[], help="profile breakdown CSVs of the checked experiments")
    p.add_argument("--acceptance-metrics", required=True, help="results/metrics/acceptance-<released>.json")
    p.add_argument("--released", required=True, help="name of the released trace set")
    p.add_argument("--claims", required=True, help="paper/claims.yaml: the paper's Fig. 4 shares (verification check)")
    p.add_argument("--drafters", nargs="*", default=[], help="manifests of trained drafters (training records)")
    p.add_argument("--upper-bounds", nargs="*", default=[],
                   help="results/simulator/engine-<exp>/upper_bounds.csv of the checked experiments")
    p.add_argument("--closed-loop", nargs="*", default=[], help="results/simulator/engine-<exp>/closed_loop.json")
    p.add_argument("--csv", required=True)
    p.add_argument("--json", help="the rows as JSON (for the report summary)")


def _fmt(v, f="{:.2f}") -> str:
    return "--" if v is None or (isinstance(v, float) and math.isnan(v)) else f.format(v)


def paper_ngram_ranking(metrics: dict, released: str) -> dict[str, float]:
    """Mean n-gram acceptance length of each paper dataset in the released traces (this run's metrics)."""
    out = {}
    for d in PAPER_DATASETS:
        v = metrics.get(f"traces.{released}.{d}.ngram.mean")
        if v is not None:
            out[d] = float(v)
    return out


def _ks(points: pd.DataFrame) -> str:
    ks = sorted({int(k) for k in points["k"].dropna()})
    return ", ".join(map(str, ks)) or "?"


def ngram_check(points: pd.DataFrame, templates: dict, paper: dict, label: Callable[[str], str] = str) -> dict:
    """The paper's n-gram ranking of its datasets against this run's workloads' (``label``: a dataset's name as the
    report writes it)."""
    ng = points[(points["method"] == "ngram") & (points["status"] == "ok")]
    measured = {}
    for ds, g in ng.groupby("dataset"):
        t = templates.get(ds)
        if t in PAPER_DATASETS:
            measured[ds] = pooled_acceptance(g)["acceptance_length"]
    common = [d for d in measured if templates[d] in paper]
    ours = sorted(common, key=lambda d: -measured[d])
    theirs = sorted(common, key=lambda d: -paper[templates[d]])
    shown = len(common) >= 2 and ours == theirs
    return {
        "check": "n-gram ranks the workloads as the paper's data do",
        "measured": "; ".join(f"{label(d)} {measured[d]:.2f}" for d in ours)
                    + (f" (tokens per drafting step of n-gram at k = {_ks(ng)} in the benchmark, vLLM's counters: 1 + "
                       "accepted / drafts, so a step where n-gram found no match is not counted; all batch sizes "
                       "pooled; not the k = 20 traces' mean over every position of the acceptance table and the paper "
                       "column, nor a speedup)"),
        "paper": "; ".join(f"{label(templates[d])} {paper[templates[d]]:.2f}" for d in theirs) + " (released traces)",
        "shown": shown if common else None,
    }


#: a registry claim of the paper's Fig. 4 shares: engine.<model>.<dataset>.<config>.breakdown.<phase>_pct.b<B>
_PAPER_SHARE = re.compile(r"^engine\.(?P<model>.+)\.(?P<dataset>[^.]+)\.(?P<config>[^.]+)\.breakdown\."
                          r"(?P<phase>\w+)_pct\.b(?P<b>\d+)$")


def paper_phase_exceptions(claims) -> list[dict]:
    """The paper's own Fig. 4 points where drafting takes more of the step than verification, from the registry's
    breakdown claims (``paper/claims.yaml``): model (as its statements name it), method, batch size and the two shares
    in %, smallest batch size first."""
    shares: dict[tuple, dict] = {}
    for c in claims:
        m = _PAPER_SHARE.match(c.measured_by or "")
        if not m or c.value is None:
            continue
        key = (m["model"], m["config"].split("-k")[0], int(m["b"]))
        d = shares.setdefault(key, {"model": c.statement.split(",")[0].strip(), "method": key[1], "batch_size": key[2]})
        d[m["phase"]] = float(c.value)
    out = [d for d in shares.values() if d.get("drafting", 0) > d.get("verification", math.inf)]
    return sorted(out, key=lambda d: (d["batch_size"], d["model"], d["method"]))


def _paper_phase_text(exceptions: list[dict]) -> str:
    return "; ".join(f"{d['model']} {METHOD_LABELS.get(d['method'], d['method'])} B={d['batch_size']}: drafting "
                     f"{d['drafting']:.1f} % > verification {d['verification']:.1f} %" for d in exceptions)


def verification_check(breakdown: pd.DataFrame, paper_exceptions: list[dict] = ()) -> dict:
    """Verification is the largest phase of the step at every profiled configuration and batch size, except where the
    paper's own data make the same exception (``paper_exceptions``, :func:`paper_phase_exceptions`: its draft model at
    B = 1): a point here is excused when its method is one the paper's data show drafting ahead at the paper's
    smallest batch size and the point is at this run's smallest profiled batch size."""
    paper_text = "verification 42-95 % of the step (Fig. 4)"
    if paper_exceptions:
        paper_text = (f"verification 42-95 % of the step, the largest phase except at {_paper_phase_text(paper_exceptions)}"
                      " (Fig. 4)")
    if breakdown.empty or "verification_share" not in breakdown:
        return {"check": "verification dominates the step", "measured": "no profiled steps", "paper": paper_text,
                "shown": None}
    names = [n for n in ("drafting", "verification", "sampling", "overhead") if f"{n}_share" in breakdown]
    label = "config" if "config" in breakdown else "method"
    smallest_b = int(breakdown["batch_size"].min())
    paper_small = min((d["batch_size"] for d in paper_exceptions), default=None)
    excused_methods = {d["method"] for d in paper_exceptions if d["batch_size"] == paper_small}
    rows, beaten, excused = [], [], []
    # one share per configuration and batch size: the phases' times pooled over the profiled requests
    for (cfg, b), g in breakdown.groupby([label, "batch_size"], sort=False):
        if all(f"{n}_s" in g for n in names) and "total_s" in g and float(g["total_s"].sum()) > 0:
            share = {n: float(g[f"{n}_s"].sum()) / float(g["total_s"].sum()) for n in names}
        else:
            share = {n: float(g[f"{n}_share"].mean()) for n in names}
        top = max(share, key=share.get)
        if share["verification"] < share[top] - 1e-12:
            text = (f"{config_text(str(cfg))} B={int(b)}: {top} {100 * share[top]:.1f} % > verification "
                    f"{100 * share['verification']:.1f} %")
            method = str(g["method"].iloc[0]) if "method" in g else str(cfg).split("-k")[0]
            (excused if method in excused_methods and int(b) == smallest_b else beaten).append(text)
        rows.append(f"{config_text(str(cfg))} B={int(b)} {100 * share['verification']:.0f} %")
    measured = "verification the largest phase: " + "; ".join(rows)
    if beaten:
        measured += " -- not the largest at " + "; ".join(beaten)
    if excused:
        measured += (" -- not the largest at " + "; ".join(excused) + ", where the paper's data make the same "
                     f"exception (its smallest batch size, B={paper_small})")
    return {"check": "verification dominates the step", "measured": measured, "paper": paper_text,
            "shown": not beaten}


def _iv(iv: Interval, unit: str = "", f: str = "{:.2f}") -> str:
    """``1.10x [1.02, 1.19]``; under MIN_INTERVAL_REQUESTS requests no interval, and the text says so."""
    if iv.low != iv.low:
        return f.format(iv.estimate) + unit
    if iv.n and iv.n < MIN_INTERVAL_REQUESTS:
        return f"{f.format(iv.estimate)}{unit} ({iv.n} requests: too few for a 95 % interval)"
    return f"{f.format(iv.estimate)}{unit} [{f.format(iv.low)}, {f.format(iv.high)}]"


def _throughputs(ok: pd.DataFrame, config: str, b: int) -> pd.Series:
    """Throughput per request (dataset, request index) of one configuration at batch size ``b``."""
    g = ok[(ok["config"] == config) & (ok["batch_size"] == b)].drop_duplicates(["dataset", "request_index"])
    return g.set_index(["dataset", "request_index"])["throughput"].astype(float).dropna()


def speedup_check(points: pd.DataFrame) -> dict:
    """Speedup at the smallest and the largest batch size per SD configuration, with intervals (module docstring)."""
    ok = points[points["status"] == "ok"]
    sd = ok[ok["method"] != "none"]
    none_bs = set(ok.loc[ok["method"] == "none", "batch_size"])
    rows, verdicts = [], []
    for cfg, g in sd.groupby("config", sort=False):
        bs = sorted(set(g["batch_size"]) & none_bs)
        if len(bs) < 2:
            continue
        b0, b1 = bs[0], bs[-1]
        series = [_throughputs(ok, cfg, b0), _throughputs(ok, "none", b0), _throughputs(ok, cfg, b1),
                  _throughputs(ok, "none", b1)]
        common = series[0].index
        for s in series[1:]:
            common = common.intersection(s.index)
        if len(common) == 0:
            continue
        a = [s.reindex(common).to_numpy() for s in series]
        s0, s1 = bootstrap_ratio_ci(a[0], a[1]), bootstrap_ratio_ci(a[2], a[3])
        ratio = bootstrap_function_ci(a, lambda x0, y0, x1, y1: (x1 / y1) / (x0 / y0))
        few = len(common) < MIN_INTERVAL_REQUESTS  # no 95 % interval, so nothing resolved
        v = NOT_RESOLVED if few else True if ratio.high < 1 else False if ratio.low > 1 else NOT_RESOLVED
        name = config_text(str(cfg))
        verdicts.append((name, v))
        if few:  # said once per configuration: point values only
            pt = lambda iv, u="": f"{iv.estimate:.2f}{u}"  # noqa: E731
            rows.append(f"{name} ({len(common)} requests: too few for a 95 % interval): {pt(s0, 'x')} (B={int(b0)}), "
                        f"{pt(s1, 'x')} (B={int(b1)}); B={int(b1)} / B={int(b0)}: {pt(ratio)}: {FALLS[v]}")
        else:
            rows.append(f"{name}: {_iv(s0, 'x')} (B={int(b0)}), {_iv(s1, 'x')} (B={int(b1)}); B={int(b1)} / B={int(b0)}: "
                        f"{_iv(ratio)} over {len(common)} requests: {FALLS[v]}")
    if not rows:
        return {"check": "speedup falls with batch size", "measured": "no speedups", "paper": "", "shown": None}
    # per configuration: one whose ratio lies below 1 shows it even where another's is not resolved
    yes = [c for c, v in verdicts if v is True]
    no = [c for c, v in verdicts if v is False]
    open_ = [c for c, v in verdicts if v == NOT_RESOLVED]
    if no:
        shown = False
    elif not open_:
        shown = True
    elif yes:
        shown = f"by {', '.join(yes)}; not resolved: {', '.join(open_)}"
    else:
        shown = NOT_RESOLVED
    return {"check": "speedup falls with batch size",
            "measured": "; ".join(rows) + " (all workloads pooled; 95 % intervals over requests)",
            "paper": "e.g. EAGLE, Llama-3.1-8B, GSM8K: 1.73x (B=1) to 1.21x (B=128) (Fig. 1)", "shown": shown}


#: a trained drafter's kind -> the engine method that runs it in the benchmark
DRAFTER_METHOD = {"eagle": "eagle", "draft_model": "draft_model"}


def heldout_interval(rec: dict) -> Interval:
    """Tokens per step on the held-out prompts (as vLLM counts them) with its interval over requests, from the
    training record's per-request steps and tokens (the estimate alone where the record has none)."""
    per = rec.get("per_request") or []
    if per:
        return bootstrap_pooled_ratio_ci([r["tokens"] for r in per], [r["steps"] for r in per])
    v = rec.get("mean_step_length")
    return Interval(math.nan if v is None else float(v), math.nan, math.nan, int(rec.get("requests") or 0))


def heldout_by_workload(rec: dict) -> dict[str, float]:
    """Tokens per step of the held-out requests per workload (training record's per-request steps and tokens)."""
    per = pd.DataFrame(rec.get("per_request") or [])
    if per.empty or "workload" not in per:
        return {}
    g = per.groupby("workload")[["tokens", "steps"]].sum()
    return (g["tokens"] / g["steps"]).to_dict()


def benchmark_by_workload(points: pd.DataFrame, method: str, k: int) -> dict[str, float]:
    """Tokens per step of a method in the benchmark per dataset (vLLM's counters, batch sizes pooled)."""
    ok = points[(points["status"] == "ok") & (points["method"] == method) & (points["k"] == k)]
    if ok.empty:
        return {}
    acc = pd.to_numeric(ok["num_accepted_tokens"], errors="coerce").fillna(0).groupby(ok["dataset"]).sum()
    dr = pd.to_numeric(ok["num_drafts"], errors="coerce").fillna(0).groupby(ok["dataset"]).sum()
    return (1 + acc / dr.where(dr > 0)).dropna().to_dict()


def _split(d: dict[str, float]) -> str:
    return f" ({', '.join(f'{w} {v:.2f}' for w, v in sorted(d.items()))})" if d else ""


def benchmark_interval(points: pd.DataFrame, method: str, k: int) -> Interval:
    """Tokens per step of a method in the benchmark, 1 + accepted / drafts from vLLM's counters, pooled over
    workloads and batch sizes, with its interval over requests (a request's points at every B together)."""
    ok = points[(points["status"] == "ok") & (points["method"] == method) & (points["k"] == k)]
    if ok.empty:
        return Interval(math.nan, math.nan, math.nan, 0)
    g = ok.assign(_acc=pd.to_numeric(ok["num_accepted_tokens"], errors="coerce").fillna(0),
                  _dr=pd.to_numeric(ok["num_drafts"], errors="coerce").fillna(0))
    per = g.groupby(["dataset", "request_index"])[["_acc", "_dr"]].sum()
    iv = bootstrap_pooled_ratio_ci(per["_acc"].to_numpy(), per["_dr"].to_numpy())
    return Interval(1 + iv.estimate, 1 + iv.low, 1 + iv.high, iv.n)


def _drafter(training: dict) -> str:
    kind = str(training.get("kind"))
    return METHOD_LABELS.get(kind, kind)


def drafter_rows(manifests, points: pd.DataFrame | None = None, label: Callable[[str], str] = str,
                 workload_label: Callable[[str, str], str] = lambda model, w: w) -> list[dict]:
    """The trained drafters' rows; ``label`` names a benchmark dataset, ``workload_label(model, workload)`` a training
    workload of that model's held-out prompts (the label of the dataset it is shaped like, where the config says)."""
    out = []
    for path in manifests:
        m = read_json(path)
        model = Path(path).parents[2].name  # resources/models/<model>/drafters/<kind>/manifest.json
        tr = (m or {}).get("training") or {}
        u, t = tr.get("heldout_untrained") or {}, tr.get("heldout_trained") or {}
        cf = tr.get("heldout_closed_form") or {}
        if not tr:
            continue
        out.append({
            "check": f"trained {_drafter(tr)} beats its untrained start (held-out, k = {t.get('k', 3)})",
            "measured": (f"untrained {_fmt(u.get('mean_acceptance_length'))}"
                         + (f", least-squares fit {_fmt(cf.get('mean_acceptance_length'))}" if cf else "")
                         + f", trained {_fmt(t.get('mean_acceptance_length'))}"
                         + (f" (per step, as vLLM counts: {_fmt(t.get('mean_step_length'))})" if t.get("mean_step_length") else "")
                         + f" over {t.get('positions')} positions of {t.get('requests')} held-out requests;"
                         f" training {_fmt(tr.get('train_s'), '{:.0f}')} s, {tr.get('epochs')} epoch(s)"),
            "paper": "(not a paper finding)",
            "shown": (t.get("mean_acceptance_length") or 0) > (u.get("mean_acceptance_length") or 0),
        })
        method = DRAFTER_METHOD.get(str(tr.get("kind")))
        if points is None or not method or not t.get("mean_step_length"):
            continue
        k = int(t.get("k", 3))
        held, bench = heldout_interval(t), benchmark_interval(points, method, k)
        if bench.estimate != bench.estimate:
            continue
        known = (held.low == held.low and bench.low == bench.low
                 and min(held.n or 0, bench.n or 0) >= MIN_INTERVAL_REQUESTS)
        apart = known and (held.low > bench.high or held.high < bench.low)
        bench_split = {label(w): v for w, v in benchmark_by_workload(points, method, k).items()}
        held_split = {workload_label(model, w): v for w, v in heldout_by_workload(t).items()}
        out.append({
            "check": f"trained {_drafter(tr)}: tokens per step on held-out prompts and in the benchmark (k = {k})",
            "measured": (f"held-out (the training's prompts, host-side, {held.n} requests): {_iv(held)}"
                         f"{_split(held_split)}; benchmark (vLLM's counters, {bench.n} requests): "
                         f"{_iv(bench)}{_split(bench_split)}"
                         + ("; the intervals overlap" if known and not apart else "")),
            "paper": "(not a paper finding)",
            "shown": None,
        })
    return out


def upper_bound_checks(summary: pd.DataFrame, closed: dict | None, label: Callable[[str], str] = str) -> list[dict]:
    """Figs. 10 and 12's findings on the experiment's own traces that the simulator does not make true by construction
    (module docstring, item 4), and the closed loop's error (``label``: a dataset's name as the report writes it)."""
    single = summary[~summary["proposer"].str.contains(r"\+") & (summary["proposer"] != "combined")]
    bf = best_fixed(single)
    out = []
    parts, narrow = [], []
    for (p, d), g in bf.groupby(["proposer", "dataset"], sort=False):
        g = g.sort_values("batch_size")
        if len(g) < 2:
            continue
        lo, hi = g.iloc[0], g.iloc[-1]
        a, b = float(lo["oracle_over_best_fixed"]), float(hi["oracle_over_best_fixed"])
        # as many decimals as tell the two apart (up to 4): "1.14x to 1.14x" would hide which way it went
        f = next((f"{{:.{n}f}}" for n in (2, 3, 4) if f"{a:.{n}f}" != f"{b:.{n}f}"), "{:.4f}")
        text = (f"{METHOD_LABELS.get(p, p)} {label(d)} {f.format(a)}x (B={int(lo['batch_size'])}) to {f.format(b)}x (B={int(hi['batch_size'])})")
        parts.append(text)
        if not b > a:
            narrow.append(text)
    measured = "; ".join(parts) or "one batch size"
    if narrow:
        measured += f" -- narrows or holds at {len(narrow)} of {len(parts)}: " + "; ".join(narrow)
    out.append({"check": "the oracle's margin over a fixed k widens with batch size (simulated)", "measured": measured,
                "paper": "1.30x at B=1, 1.36x at B=128 (Fig. 10a: 2.73/2.1, 1.52/1.12)",
                "shown": not narrow if parts else None})
    if closed and closed.get("points"):
        # the error's sign and the ordering beside its baseline, worded as above the experiment's Figs. 10 and 12
        parts = [f"median |error| {100 * closed['median_abs_error']:.0f} %, worst "
                 f"{100 * closed['worst_abs_error']:.0f} % over {closed['points']} points",
                 signed_error_text(closed), ordering_text(closed)]
        out.append({"check": "simulator against measured speedups (closed loop; not a paper finding)",
                    "measured": "; ".join(x for x in parts if x),
                    "paper": "(the paper does not check its simulator)", "shown": None})
    return out


def trend_table(points: pd.DataFrame, breakdown: pd.DataFrame, templates: dict, paper: dict, manifests=(),
                upper: dict | None = None, closed: dict | None = None,
                label: Callable[[str], str] = str, paper_exceptions: list[dict] = (),
                workload_label: Callable[[str, str], str] = lambda model, w: w) -> pd.DataFrame:
    """Every trend check of every experiment, then the trained drafters' (``label``: a dataset's report name;
    ``paper_exceptions``: :func:`paper_phase_exceptions`)."""
    rows = []
    for exp, p in points.groupby("exp", sort=False):
        b = breakdown[breakdown["exp"] == exp] if "exp" in breakdown else breakdown
        for r in (ngram_check(p, templates, paper, label), verification_check(b, paper_exceptions), speedup_check(p)):
            rows.append({"exp": exp, **r})
        if upper and exp in upper:
            rows += [{"exp": exp, **r} for r in upper_bound_checks(upper[exp], (closed or {}).get(exp), label)]
    for r in drafter_rows(manifests, points, label, workload_label):
        rows.append({"exp": "drafters", **r})
    return pd.DataFrame(rows, columns=["exp", "check", "shown", "measured", "paper"])


def to_latex(t: pd.DataFrame) -> str:
    """One tabular per experiment and one for the drafters (:func:`~specrepro.core.latex.tabular_per_group`)."""
    head = [r"\begin{tabular}{@{}>{\raggedright\arraybackslash}p{0.19\textwidth}>{\raggedright\arraybackslash}p{0.11\textwidth}"
            r">{\raggedright\arraybackslash}p{0.40\textwidth}>{\raggedright\arraybackslash}p{0.2\textwidth}@{}}",
            r"\toprule", r"Finding & shown & measured here & paper \\", r"\midrule"]

    def body(g):
        for r in g.itertuples(index=False):
            shown = r.shown if isinstance(r.shown, str) else {True: "yes", False: "no"}.get(
                None if r.shown is None or r.shown != r.shown else bool(r.shown), "n/a")
            yield (f"{tex_escape(r.check)} & {tex_escape(shown)} & {{\\scriptsize {tex_escape(r.measured)}}} & "
                   f"{{\\scriptsize {tex_escape(r.paper)}}} \\\\")

    groups = [list(body(g)) for _, g in t.groupby("exp", sort=False)] or [
        [r"\multicolumn{4}{c}{no experiment with trend checks} \\"]]
    return "\n".join(tabular_per_group(head, groups) + [""])


def workload_labeller(run_config: dict, label: Callable[[str], str]) -> Callable[[str, str], str]:
    """(model, training workload) -> the label of the benchmark dataset that workload is shaped like
    (``models.<m>.train_data.workload_datasets``), else the workload's own name."""
    maps = {m: (d.get("train_data") or {}).get("workload_datasets") or {}
            for m, d in (run_config.get("models") or {}).items()}
    return lambda model, w: label(maps[model][w]) if w in maps.get(model, {}) else w


def build(args, ctx: TraceContext) -> None:
    points = load_points(args.points)
    frames = [pd.read_csv(p) for p in args.breakdown if Path(p).exists()]
    breakdown = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    rc = read_json(args.run_config)
    templates = {k: v.get("prompt_template") for k, v in (rc.get("datasets") or {}).items()}
    metrics = read_json(args.acceptance_metrics)
    if not isinstance(metrics, dict):
        raise SpecReproError(f"{args.acceptance_metrics}: not a metrics object")
    upper = {}
    for path in args.upper_bounds:
        u = pd.read_csv(path)
        for exp, g in u.groupby("exp"):
            upper[str(exp)] = g
    closed = {str(c["exp"]): c for c in (read_json(p) for p in args.closed_loop)}
    t = trend_table(points, breakdown, templates, paper_ngram_ranking(metrics, args.released), args.drafters,
                    upper, closed, ctx.dataset_label, paper_phase_exceptions(load_claims(args.claims)),
                    workload_labeller(rc, ctx.dataset_label))
    exp_labels = {e["name"]: e.get("label", e["name"]) for e in rc.get("experiments") or []}
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind, exp_label=[exp_labels.get(x, x) for x in t["exp"]]))
    if args.json:
        write_json(args.json, json.loads(t.to_json(orient="records")))
    write_text(args.output, to_latex(t))


def finding(csv) -> str:
    """How many of the paper's trends the checked experiments show (the trend table's CSV)."""
    t = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    t = t[t["exp"] != "drafters"]
    judged = t[t["shown"].notna() & (t["shown"].astype(str) != "")]
    if judged.empty:
        return ""
    s = judged["shown"].astype(str)
    yes = judged[s == "True"]["check"].tolist()
    part = judged[s.str.startswith("by ")]["check"].tolist()
    no = judged[s == "False"]["check"].tolist()
    open_ = judged[s == NOT_RESOLVED]["check"].tolist()
    # the experiments as the report names them (exp_label: the config's label), not by their config names
    names = judged["exp_label"] if "exp_label" in judged else judged["exp"]
    exps = ", ".join(dict.fromkeys(names.astype(str)))
    text = f"{exps} shows {len(yes)} of the {len(judged)} paper trends checked here" + (
        f" ({'; '.join(yes)})" if yes else "")
    if part:
        text += f"; for some configurations: {'; '.join(part)}"
    if no:
        text += f"; not shown: {'; '.join(no)}"
    if open_:
        text += f"; not resolved: {'; '.join(open_)}"
    return text + "."
