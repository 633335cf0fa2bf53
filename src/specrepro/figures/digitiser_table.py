"""Table: an independent reading of the paper's figure images against the values in the claims registry."""

from __future__ import annotations

import math

import pandas as pd

from . import FigureSpec, TraceContext
from ..claims import load_claims
from ..digitise import agreement, summary
from ..io import SpecReproError, write_csv, write_text
from ..latex import tex_escape

SPEC = FigureSpec(
    name="tab_digitiser",
    kind="table",
    title="The paper's figures read independently",
    paper_ref="Figs. 1, 3, 10, 12",
    caption=(
        "Values read from the paper's figure images by specrepro.digitise, which knows no registry or simulator "
        "value: axes calibrated from the tick marks and their labels (read glyph by glyph), series identified by "
        "the legend's colour, marker shape and label, markers found by template matching and bars by their top "
        "edges (images checked against the SHA-256 values of the config's paper_figures). Found: markers or bars "
        "located at an x tick of their series. A marker is readable when at least 85% of it shows in its colour "
        "and it is not merged with or mistaken for another marker of that colour (bars: at least 15 px tall); "
        "Fig. 3's speedups are ratios of two bars. Judged: readable readings with a registry claim of the same "
        "figure, "
        "panel, series and x; they agree when they lie within the claim's tolerance. Claims: the figure's value "
        "claims in the registry (bounds and orderings are not read here); claims unread: those no readable "
        "reading decides. Fig. 12 replots Fig. 10's series: those readings are "
        "compared with Fig. 10's claims (other figure), not judged."
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


def to_latex(s: pd.DataFrame, agree: pd.DataFrame) -> str:
    lines = [
        r"\begin{tabular}{l rrrrrrr r}",
        r"\toprule",
        r"Figure & claims & found & readable & judged & agree & rate & claims unread & other figure \\",
        r"\midrule",
    ]
    for r in s.itertuples(index=False):
        other = f"{r.other_agree}/{r.other_judged}" if r.other_judged else "--"
        lines.append(f"{tex_escape(r.figure)} & {r.claims} & {r.readings} & {r.readable} & {r.judged} & {r.agree} & "
                     f"{_pct(r.rate)} & {r.claims_unread} & {other} \\\\")
    tot = s[["claims", "readings", "readable", "judged", "agree", "claims_unread"]].sum()
    rate = tot["agree"] / tot["judged"] if tot["judged"] else math.nan
    lines += [r"\midrule",
              f"All & {tot['claims']} & {tot['readings']} & {tot['readable']} & {tot['judged']} & {tot['agree']} & "
              f"{_pct(rate)} & {tot['claims_unread']} & \\\\",
              r"\bottomrule", r"\end{tabular}", ""]
    bad = agree[agree["agrees"] == False]  # noqa: E712
    lines.append(r"\par\medskip")
    if bad.empty:
        lines.append(r"\noindent No judged reading disagrees with the registry.")
    else:
        lines += [r"\noindent Disagreements:\par\smallskip", r"\begin{tabular}{l l l l r r r}", r"\toprule",
                  r"Figure & series & x & claim & read & paper & tolerance \\", r"\midrule"]
        for r in bad.itertuples(index=False):
            where = f"{tex_escape(r.figure)}({tex_escape(r.panel)})"
            lines.append(f"{where} & {tex_escape(r.series)} & {tex_escape(r.x)} & "
                         f"\\texttt{{{tex_escape(r.claim_id)}}} & {r.read:.3f} & {r.paper_value:.3f} & "
                         f"{r.tolerance:.3g} \\\\")
        lines += [r"\bottomrule", r"\end{tabular}"]
    lines.append("")
    return "\n".join(lines)


def build(args, ctx: TraceContext) -> None:
    claims = load_claims(args.claims)
    readings = load_readings(args.readings)
    agree = agreement(readings, claims)
    write_csv(args.csv, agree, float_format="%.6g")
    write_text(args.output, to_latex(summary(agree, claims), agree))
