"""Table: can the closed loop fail? One experiment's closed loop with its real traces next to wrong inputs.

Input: ``specrepro falsify``'s document (:mod:`specrepro.analysis.falsify`): per variant (real traces, drafters'
acceptance swapped, every / no draft accepted, another dataset's acceptance, n-gram's and EAGLE's swapped, no traces)
the median, worst and mean signed |error| over the same measured points, its median against the real one's, and the
ordering agreement of methods within a (dataset, B), of datasets within a (method, k, B) and of k within a (dataset,
method, B), each with the score of always guessing the most common measured order. With the experiment's draft
jobs (``specrepro engine-drafted``'s summary), a last row gives the noise floor no simulator can beat on the machine:
the same configuration measured in two jobs (a controlled run replaying a method's own trace against that method's
fixed-k job), their speedups' median and largest |difference|.
"""

from __future__ import annotations

import pandas as pd

from . import FigureSpec, TraceContext
from ._enginesim import tex_pct
from ..analysis.closedloop import DRIFT_NOTED, config_text
from ..analysis.falsify import FACTOR, ORDERINGS, VARIANT_LABELS, VARIANTS
from ..core.io import read_json, write_csv, write_text
from ..core.latex import tex_escape

SPEC = FigureSpec(
    name="tab_falsification",
    kind="table",
    title="Closed loop against wrong inputs: does it fail?",
    paper_ref="Sec. 6 (beyond the paper)",
    caption=(
        "The closed loop of {subject_label} recomputed on the same measured points, cost model and requests with only "
        "the simulator's acceptance changed: the real traces; the model-based drafters' traces swapped; every draft "
        "accepted; none accepted; each request given another dataset's acceptance; n-gram's and EAGLE's traces swapped; "
        "and no simulator at all (each point predicted by the mean measured speedup of the same method, k and B on the "
        "other datasets). Median, worst and mean signed error (> 0: the simulator optimistic), the median against the "
        "real one's (a wrong input should give at least 1.5x), and ordering agreement (groups with no discordant pair "
        "/ groups; in brackets, always guessing the most common measured order): methods within a (dataset, B), "
        "datasets within a (method, k, B) (acceptance alone tells these apart), k within a (dataset, method, B). "
        "Where the experiment ran draft jobs, the last row is the noise floor: the same configuration measured in two "
        "jobs (median and largest |difference| of their speedups), below which no closed loop can be checked here; "
        "then the simulator against the draft jobs with their real acceptance: the calibration (controlled profiles, "
        "from nothing to everything accepted, at each k; results/simulator/engine-<exp>/calibration.csv) and the "
        "measured upper bound (the oracle jobs; measured_bounds.csv), each with its error split by job (absolute: the "
        "draft jobs' and the no-SD jobs' throughput against the cost model's, median |error|; a speedup divides the "
        "two); where one draft job's same-window references lay more than " f"{100 * DRIFT_NOTED:.0f}"
        " % from the no-SD job (median; a slow window, which the pairing cancels only as far as it hits SD and no-SD "
        "steps alike), an indented row gives the same check without that job, and its references' median. On a CPU "
        "run a timed job shares the cores with one other job at a time unless its experiment sets exclusive_timing "
        "(config/cpu-closedloop.yaml does for "
        "SmolLM2; docs/ARTIFACT.md, ``Concurrent jobs'', measures what sharing shifts)."
    ),
    paper_statement="The paper does not compare its simulator with its measured speedups.",
    data="engine runs and this run's engine traces",
)

LABELS = {**VARIANT_LABELS, "repeat": "noise floor: one configuration in two jobs (its trace replayed by a draft job, and the benchmark)",
          "calibration": "calibration", "oracle": "measured upper bound"}
#: the rows that feed the closed loop a wrong input: each is set beside the real traces' row
VARIANTS_OF_REAL = ("drafters-swapped", "all-accepted", "none-accepted", "other-dataset", "lookup-drafter-swapped",
                    "no-traces")
#: the suffix of a row that repeats the calibration or upper bound row less its slow-window job
WITHOUT_DRIFTED = "-without-drifted"
COLUMNS = ["variant", "points", "median_abs_error", "worst_abs_error", "mean_error", "optimistic_points", "ratio",
           "falsified", "not_applicable"] + [f"{n}_{c}" for n, _, _ in ORDERINGS
                                              for c in ("groups", "agreeing", "baseline_agreeing")]


def add_arguments(p) -> None:
    p.add_argument("--falsification", required=True, help="results/simulator/engine-<exp>/falsification.json")
    p.add_argument("--drafted", help="results/simulator/engine-<exp>/drafted.json (its repeat check: the noise floor)")
    p.add_argument("--csv", required=True)


def rows(doc: dict, drafted: dict | None = None) -> pd.DataFrame:
    """One row per variant of ``doc``; the noise-floor row (``repeat``) from ``drafted``'s repeat check if it paired
    any configuration."""
    out = []
    for v in VARIANTS:
        s = (doc.get("variants") or {}).get(v)
        if s is None:
            continue
        r = {"variant": v, **{c: s.get(c) for c in COLUMNS[1:9]}}
        for n, _, _ in ORDERINGS:
            o = s.get(n) or {}
            for c in ("groups", "agreeing", "baseline_agreeing"):
                r[f"{n}_{c}"] = o.get(c)
        out.append(r)
    rep = (drafted or {}).get("repeat") or {}
    if rep.get("pairs"):
        out.append({"variant": "repeat", "points": rep["pairs"], "median_abs_error": rep["median_abs"],
                    "worst_abs_error": rep["max_abs"]})
    # the simulator against the draft jobs (same cost model, the jobs' own acceptance): other closed loops
    for v in ("calibration", "oracle"):
        s = (drafted or {}).get(v) or {}
        if s.get("points"):
            out.append({"variant": v, "points": s["points"], "median_abs_error": s["median_abs_error"],
                        "worst_abs_error": s["worst_abs_error"], "mean_error": s.get("mean_error"),
                        "ks": ", ".join(str(k) for k in s.get("ks") or []),
                        "sd_abs_error": s.get("median_abs_sd_error"),
                        "baseline_abs_error": s.get("median_abs_baseline_error")})
            d = s.get("drifted_job") or {}
            if d:  # the same points less the one job that ran in a slow window (closedloop.drifted_job)
                out.append({"variant": f"{v}{WITHOUT_DRIFTED}", "points": d["others_points"],
                            "median_abs_error": d["others_median_abs_error"],
                            "worst_abs_error": d["others_worst_abs_error"], "drifted_job": d["config"],
                            "drifted_reference_vs_job": d["median_reference_vs_job"]})
    return pd.DataFrame(out, columns=COLUMNS + ["ks", "sd_abs_error", "baseline_abs_error", "drifted_job",
                                                "drifted_reference_vs_job"])


def misses_note(doc: dict) -> str:
    """For every applied variant under the bar (``falsified`` false): how far its input moved the simulated speedups
    against the real median |error| on its points, those that moved them less than that error first ("" where every
    variant reached the bar)."""
    less, more = [], []
    for v in VARIANTS[1:]:
        s = (doc.get("variants") or {}).get(v) or {}
        if s.get("falsified", True) or s.get("input_effect_median") is None:
            continue
        base = s["real_median_same_points"]
        item = (f"{LABELS[v]} ({s['ratio']:.1f}x: {100 * s['input_effect_median']:.1f} %, "
                f"{100 * s['input_effect_max']:.0f} %, {100 * base:.1f} %)")
        (less if s["input_effect_median"] < base else more).append(item)
    if not less and not more:
        return ""
    what = ("(the median and largest move from the real traces' simulated speedups, then the real median |error| on "
            "the variant's points)")
    out = []
    if less:
        out.append(f"Under the {FACTOR:g}x bar, moving the predictions less than the real error {what}: " + "; ".join(less))
    if more:
        out.append(f"Under the {FACTOR:g}x bar though moving them more than the real error"
                   + ("" if less else f" {what}") + ": " + "; ".join(more))
    return (". ".join(out) + ". A wrong input that moves the predictions less than the real error cannot be told from "
            "the right one on these points, whatever the simulator; one that moves them more and still passes, could "
            "have been caught and was not.")


def to_latex(t: pd.DataFrame) -> str:
    def order(r, n):
        g = getattr(r, f"{n}_groups")
        if not g or g != g:
            return "--"
        return f"{int(getattr(r, f'{n}_agreeing'))}/{int(g)} [{int(getattr(r, f'{n}_baseline_agreeing'))}]"

    lines = [r"\begin{tabular}{@{}>{\raggedright\arraybackslash}p{0.3\textwidth}rrrrlll@{}}", r"\toprule",
             r" & & & & & \multicolumn{3}{c}{ordering agrees [most common order]} \\ \cmidrule(l){6-8}",
             r"simulator's input & median & worst & mean & $\times$ real & methods & datasets & $k$ \\", r"\midrule"]
    real = t.loc[t["variant"] == "real", "points"]
    n_real = int(real.iloc[0]) if len(real) and pd.notna(real.iloc[0]) else None
    for r in t.itertuples(index=False):
        name = tex_escape(LABELS.get(r.variant, r.variant))
        if (n_real is not None and r.variant in VARIANTS_OF_REAL and pd.notna(r.points)
                and int(r.points) != n_real):
            # a variant that predicts fewer points (no traces: a point with no other dataset to copy) is compared
            # with the real error on its own points, not the real row's
            name += f" ({int(r.points)} of {n_real} points; $\\times$ real on those)"
        if isinstance(r.not_applicable, str) and r.not_applicable:
            lines.append(f"{name} & \\multicolumn{{7}}{{l}}{{not applicable: {tex_escape(r.not_applicable)}}} \\\\")
            continue
        if r.variant == "repeat":
            lines += [r"\midrule", f"{name} ({int(r.points)} pairs) & {tex_pct(r.median_abs_error)} & "
                                    f"{tex_pct(r.worst_abs_error)} & \\multicolumn{{5}}{{l}}{{}} \\\\"]
            continue
        if r.variant.endswith(WITHOUT_DRIFTED):
            lines.append(f"\\quad without {tex_escape(config_text(r.drifted_job))} ({int(r.points)} points) & "
                         f"{tex_pct(r.median_abs_error)} & {tex_pct(r.worst_abs_error)} & & "
                         "\\multicolumn{4}{l}{slow window: references "
                         f"{tex_pct(r.drifted_reference_vs_job, True)}}} \\\\")
            continue
        if r.variant in ("calibration", "oracle"):
            ks = f", $k$ = {r.ks}" if isinstance(r.ks, str) and r.ks else ""
            split = ("" if r.sd_abs_error is None or r.sd_abs_error != r.sd_abs_error else
                     f"absolute: draft jobs {tex_pct(r.sd_abs_error)}, no SD {tex_pct(r.baseline_abs_error)}")
            lines += ([r"\midrule"] if r.variant == "calibration" else []) + [
                f"{name}{ks} ({int(r.points)} points) & {tex_pct(r.median_abs_error)} & {tex_pct(r.worst_abs_error)} & "
                f"{tex_pct(r.mean_error, True)} & \\multicolumn{{4}}{{l}}{{{split}}} \\\\"]
            continue
        ratio = "--" if r.ratio is None or r.ratio != r.ratio else f"{r.ratio:.1f}"
        lines.append(f"{name} & {tex_pct(r.median_abs_error)} & {tex_pct(r.worst_abs_error)} & "
                     f"{tex_pct(r.mean_error, True)} & {ratio} & {order(r, 'order_methods')} & "
                     f"{order(r, 'order_datasets')} & {order(r, 'order_k')} \\\\")
        if r.variant == "real":
            lines.append(r"\midrule")
    return "\n".join(lines + [r"\bottomrule", r"\end{tabular}"]) + "\n"


def timing_note(run_config: dict, exp: str) -> str:
    """How this run timed the experiment's jobs on a CPU (the caption names the setting; a reader needs its value)."""
    if run_config.get("run", {}).get("kind") == "gpu":
        return ""
    e = next((x for x in run_config.get("experiments") or [] if x.get("name") == exp), None)
    if e is None:
        return ""
    return (f"This run: exclusive_timing on for {exp}, its timed jobs ran with no other job beside them."
            if e.get("exclusive_timing") else
            f"This run: exclusive_timing off for {exp}, each timed job shared the cores with up to one other job.")


def build(args, ctx: TraceContext) -> None:
    doc = read_json(args.falsification)
    t = rows(doc, read_json(args.drafted) if args.drafted else None)
    write_csv(args.csv, t.assign(run_kind=ctx.run_kind), float_format="%.6g")
    note = " ".join(x for x in (timing_note(read_json(args.run_config), ctx.subject.removeprefix("engine-")),
                                misses_note(doc)) if x)
    write_text(args.output, to_latex(t) + (f"\n\\smallskip\n\\parbox{{\\textwidth}}{{\\footnotesize "
                                           f"{tex_escape(note)}}}\n" if note else ""))
