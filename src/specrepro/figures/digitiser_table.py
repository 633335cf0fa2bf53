"""Table: an independent reading of the paper's figure images against the values in the claims registry."""

from __future__ import annotations

import math

import pandas as pd

from . import FigureSpec, TraceContext
from ..analysis.claims import load_claims
from ..analysis.digitise.agreement import agreement, load_image_origins, nearest_tolerance, summary
from ..core.io import SpecReproError, write_csv, write_text
from ..core.latex import tex_escape

SPEC = FigureSpec(
    name="tab_digitiser",
    kind="table",
    title="The paper's figures read independently",
    paper_ref="Figs. 1, 3, 10, 12",
    caption=(
        "Values read from the paper's figure images by specrepro.analysis.digitise, which knows no registry or simulator "
        "value: axes calibrated from the tick marks and their labels (read glyph by glyph), series identified by "
        "the legend's colour, marker shape and label, markers found by template matching and bars by their top "
        "edges (images checked against the SHA-256 values of the config's paper_figures). Found: markers or bars "
        "located at an x tick of their series. A marker is readable when at least 85% of it shows in its colour "
        "and it is not merged with or mistaken for another marker of that colour (bars: at least 15 px tall); "
        "Fig. 3's speedups are ratios of two bars. Judged: readable readings with a registry claim of the same "
        "figure, "
        "panel, series and x; they agree when they lie within the claim's tolerance. |read - paper|: the median and "
        "largest difference between a judged reading and the registry's value; tolerance: the claims' tolerances "
        "(their range); max share: the largest difference as a share of its tolerance (above 100% = a "
        "disagreement). Claims: the figure's value "
        "claims in the registry (bounds and orderings are not read here); claims unread: those no readable "
        "reading decides. Fig. 12 replots Fig. 10's series: those readings are "
        "compared with Fig. 10's claims (other figure), not judged. Below: the judged readings nearest their "
        "tolerance, and where each image comes from (paper/figure_images.yaml; what is not recorded is marked "
        "unknown)."
    ),
    paper_statement=(
        "The registry's values for Figs. 1, 3, 10 and 12 were read from the paper's figures; an independent "
        "reader of the same images should find the same values within each claim's tolerance."
    ),
    data="the paper's figure images (read by this run) and paper/claims.yaml",
)


def add_arguments(p) -> None:
    p.add_argument("--readings", required=True, help="readings CSV of specrepro digitise")
    p.add_argument("--claims", required=True, help="paper/claims.yaml")
    p.add_argument("--csv", required=True, help="the agreement table (one row per reading) as CSV")
    p.add_argument("--images", help="paper/figure_images.yaml: where each image comes from (listed under the table)")


def load_readings(path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype={"x": str, "panel": str}, keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise SpecReproError(f"{path}: readings not found (run specrepro digitise)") from None
    missing = {"figure", "panel", "series", "x", "quantity", "key", "read", "readable", "why"} - set(df.columns)
    if missing:
        raise SpecReproError(f"{path}: not a digitiser readings table (missing {', '.join(sorted(missing))})")
    df["readable"] = df["readable"].astype(str).str.lower().isin(["true", "1"])
    df["why"] = df["why"].fillna("")
    return df


def _pct(x: float) -> str:
    return "--" if x != x else f"{100 * x:.1f}\\%"


def _num(x: float) -> str:
    return "--" if x != x else f"{x:.2g}" if abs(x) < 0.01 else f"{x:.3f}".rstrip("0").rstrip(".")


def _tol(lo: float, hi: float) -> str:
    if lo != lo:
        return "--"
    return _num(lo) if abs(hi - lo) < 1e-12 else f"{_num(lo)}--{_num(hi)}"


def to_latex(s: pd.DataFrame, agree: pd.DataFrame, images: dict | None = None) -> str:
    lines = [
        r"{\footnotesize\setlength{\tabcolsep}{3.5pt}\begin{tabular}{l rrrrrr c c r r r}",
        r"\toprule",
        r"Figure & claims & found & readable & judged & agree & rate & $|$read $-$ paper$|$ & tolerance & max share & "
        r"claims & other \\",
        r" & & & & & & & median / max & & of tol. & unread & figure \\",
        r"\midrule",
    ]
    for r in s.itertuples(index=False):
        other = f"{r.other_agree}/{r.other_judged}" if r.other_judged else "--"
        lines.append(f"{tex_escape(r.figure)} & {r.claims} & {r.readings} & {r.readable} & {r.judged} & {r.agree} & "
                     f"{_pct(r.rate)} & {_num(r.median_abs_difference)} / {_num(r.max_abs_difference)} & "
                     f"{_tol(r.tolerance_min, r.tolerance_max)} & {_pct(r.max_share_of_tolerance)} & "
                     f"{r.claims_unread} & {other} \\\\")
    tot = s[["claims", "readings", "readable", "judged", "agree", "claims_unread"]].sum()
    rate = tot["agree"] / tot["judged"] if tot["judged"] else math.nan
    judged = agree[agree["agrees"].notna()]
    d = judged["difference"].astype(float).abs()
    share = (d / judged["tolerance"].astype(float)).max() if len(judged) else math.nan
    lines += [r"\midrule",
              f"All & {tot['claims']} & {tot['readings']} & {tot['readable']} & {tot['judged']} & {tot['agree']} & "
              f"{_pct(rate)} & {_num(float(d.median()) if len(d) else math.nan)} / "
              f"{_num(float(d.max()) if len(d) else math.nan)} & "
              f"{_tol(float(s['tolerance_min'].min()), float(s['tolerance_max'].max()))} & {_pct(share)} & "
              f"{tot['claims_unread']} & \\\\",
              r"\bottomrule", r"\end{tabular}}", ""]
    bad = agree[agree["agrees"] == False]  # noqa: E712
    lines.append(r"\par\medskip")
    other_bad = agree[agree["other_agrees"] == False] if "other_agrees" in agree else agree.iloc[:0]  # noqa: E712
    if bad.empty:
        lines.append(r"\noindent No judged reading disagrees with the registry's claim of its own figure"
                     + ("." if other_bad.empty else ";"))
    if len(other_bad):
        parts = [f"{tex_escape(r.figure)}({tex_escape(r.panel)}) {tex_escape(r.series)} at {tex_escape(str(r.x))} reads "
                 f"{float(r.read):.3f} against \\texttt{{{tex_escape(r.other_figure_claim)}}}, "
                 f"{float(r.other_figure_value):.2f} $\\pm$ its tolerance (set for the other figure's resolution)"
                 for r in other_bad.itertuples(index=False)]
        lines.append(("" if bad.empty else r"\noindent ") + f"{len(other_bad)} reading"
                     + (" disagrees" if len(other_bad) == 1 else "s disagree")
                     + " with another figure's claim of the same quantity: " + "; ".join(parts) + ".")
    near = nearest_tolerance(agree)
    if len(near):
        title = "Disagreements and the" if not bad.empty else "The"
        lines += [r"\par\smallskip",
                  rf"\noindent {title} judged readings nearest their tolerance (read $-$ paper as a share of the "
                  r"tolerance):\par\smallskip", r"{\footnotesize\setlength{\tabcolsep}{3.5pt}\begin{tabular}{l l l l r r r r r}",
                  r"\toprule",
                  r"Figure & series & x & claim & read & paper & read $-$ paper & tolerance & share \\", r"\midrule"]
        rows = pd.concat([bad, near]).drop_duplicates(["figure", "panel", "series", "x"]) if not bad.empty else near
        for r in rows.itertuples(index=False):
            where = f"{tex_escape(r.figure)}({tex_escape(r.panel)})" if r.panel else tex_escape(r.figure)
            diff = float(r.difference)
            lines.append(f"{where} & {tex_escape(r.series)} & {tex_escape(r.x)} & "
                         f"\\texttt{{{tex_escape(r.claim_id)}}} & {r.read:.3f} & {r.paper_value:.3f} & "
                         f"{diff:+.4f} & {r.tolerance:.3g} & {_pct(abs(diff) / r.tolerance)} \\\\")
        lines += [r"\bottomrule", r"\end{tabular}}"]
    if images:
        lines += [r"\par\smallskip", r"\noindent Where the images come from (paper/figure\_images.yaml):"
                  r"\par\smallskip", r"{\scriptsize\begin{tabular}{l l r r l l l l}", r"\toprule",
                  r"Image & figure & pixels & dpi & written by & arXiv version & page & SHA-256 \\", r"\midrule"]
        for name, rec in images.items():
            px = "x".join(str(v) for v in rec["pixels"])
            lines.append(f"{tex_escape(name)} & {tex_escape(str(rec['figure']).split(':')[0])} & {px} & {rec['dpi']} & "
                         f"{tex_escape(rec['software'] or 'unknown')} & {tex_escape(str(rec['arxiv_version']))} & "
                         f"{tex_escape(str(rec['page']))} & \\texttt{{{rec['sha256'][:16]}}}\\ldots \\\\")
        lines += [r"\bottomrule", r"\end{tabular}}"]
    lines.append("")
    return "\n".join(lines)


def build(args, ctx: TraceContext) -> None:
    claims = load_claims(args.claims)
    readings = load_readings(args.readings)
    agree = agreement(readings, claims)
    write_csv(args.csv, agree, float_format="%.6g")
    images = load_image_origins(args.images) if args.images else None
    write_text(args.output, to_latex(summary(agree, claims), agree, images))


def finding(csv) -> str:
    """The digitiser's agreement with the registry in one sentence (its readings table, the CSV)."""
    a = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    judged = a[a["agrees"].astype(str).isin(["True", "False"])]
    if judged.empty:
        return ""
    ok = int((judged["agrees"].astype(str) == "True").sum())
    other = a[a["other_agrees"].astype(str).isin(["True", "False"])]
    bad_other = int((other["other_agrees"].astype(str) == "False").sum())
    d = judged["difference"].astype(float).abs()
    text = (f"Read from the paper's images alone, {ok} of {len(judged)} judged readings agree with the registry's "
            f"claim of their own figure (median |difference| {d.median():.2g})")
    if len(other):
        text += (f", and {len(other) - bad_other} of {len(other)} with another figure's claim of the same quantity"
                 + (f" ({bad_other} {'does' if bad_other == 1 else 'do'} not, named below the table)" if bad_other else ""))
    return text + "."
