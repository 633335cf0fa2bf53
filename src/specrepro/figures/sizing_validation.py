"""Table: the sizing rule of the quick GPU run checked by subsampling the released traces.

Input: ``results/sizing/<trace set>/validation.csv`` of ``specrepro sizing-study`` (columns
:data:`specrepro.analysis.sizing.STUDY_COLUMNS`), one row per simulator headline claim and per stand-in of a sized
engine claim of the quick config.
"""

from __future__ import annotations

import math

import pandas as pd

from ..core.io import SpecReproError, write_csv, write_text
from ..core.latex import tex_breakable, tex_escape
from ..analysis.sizing import ENGINE_PROXY, SIM_CLAIM, STUDY_COLUMNS
from . import FigureSpec, TraceContext

SPEC = FigureSpec(
    name="tab_sizing_validation",
    kind="table",
    title="Sizing a run from per-request variance, checked on the released traces",
    paper_ref="--",
    caption=(
        "The rule that sizes the quick GPU run (config/paper-quick.yaml) checked on the released traces "
        "({subject_label}), simulated request by request on the authors' draw (300 requests, seed 42): the draw's "
        "value is the truth here. The rule gives n requests, so that the expected 95 % half-width (pred.) leaves "
        "a claim decided with probability 0.9 if that truth holds (at least 20). Subsamples of n requests "
        "(with replacement, seeded) each get the artifact's bootstrap interval; coverage: the share holding the "
        "draw's value (expected about 95 %; Wilson 95 % interval over the subsamples). Simulator claims: the share "
        "of subsamples that decide the claim as the draw does, leave it undecided, decide it the opposite way. "
        "Stand-ins: the traces' quantity that sized an engine claim, at the requests the quick config gives it; "
        "they decide no engine claim."
    ),
    paper_statement=(
        "No statement: the paper reports every speedup as a mean over its requests (500 per dataset; 90 AIME, "
        "448 GPQA problems) without an interval. This section checks how this artifact sizes an affordable "
        "reproduction of it."
    ),
    data="simulator on released traces",
)


def add_arguments(p) -> None:
    p.add_argument("--study", required=True, help="results/sizing/<trace set>/validation.csv (specrepro sizing-study)")
    p.add_argument("--csv", required=True, help="the same table as CSV")


def load_study(path) -> pd.DataFrame:
    """The study CSV; a missing file or column is a one-line error."""
    try:
        t = pd.read_csv(path, keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise SpecReproError(f"{path}: file not found (run specrepro sizing-study)") from None
    missing = [c for c in STUDY_COLUMNS if c not in t.columns]
    if missing:
        raise SpecReproError(f"{path}: not a sizing-study table (missing column(s) {', '.join(missing)})")
    return t


def _num(x, fmt: str = ".3g") -> str:
    return "--" if pd.isna(x) or not math.isfinite(float(x)) else format(float(x), fmt)


def _pct(x) -> str:
    return "--" if pd.isna(x) else f"{100 * float(x):.0f}"


PROPOSERS = {"ngram": "n-gram", "eagle": "EAGLE", "combined": "Oracle Combine"}


def _quantity(r, ctx: TraceContext) -> str:
    policy = "oracle" if r.policy == "oracle" else f"k={str(r.policy).split('-')[-1]}"
    return tex_escape(f"{ctx.dataset_label(r.dataset)}, {PROPOSERS.get(r.proposer, r.proposer)} {policy}, "
                      f"B={str(r.batch_sizes).replace('->', '→')}")


def _ids(text) -> str:
    return r"\newline ".join(tex_breakable(i) for i in str(text).split())


def to_latex(t: pd.DataFrame, ctx: TraceContext) -> str:
    """The study as a tabular: one row per subsampled quantity; the simulator claims the rule cannot size within
    the draw listed after their group."""
    end = r" \\"
    lines = [
        r"\scriptsize\setlength{\tabcolsep}{3pt}",
        (r"\begin{tabular}{>{\raggedright\arraybackslash\ttfamily\scriptsize}p{0.25\textwidth} "
         r">{\raggedright\arraybackslash}p{0.19\textwidth} r r r r r}"),
        r"\toprule",
        (r"Claim & Quantity on the traces & $n$ / $N$ & Full draw & Half-width pred./mean & Coverage \% [CI] & "
         r"Agree/undec./opp.\ \%" + end),
        r"\midrule",
    ]
    groups = ((SIM_CLAIM, "Simulator claims (headline), at the requests the rule gives them"),
              (ENGINE_PROXY, ("Stand-ins of the quick config's engine claims, at the config's requests (last column: "
                              "half-width within the claim's target, %)")))
    for role, title in groups:
        sub = t[t["role"] == role]
        if sub.empty:
            continue
        lines.append(r"\multicolumn{7}{l}{\textit{" + tex_escape(title) + "}}" + end)
        skipped = []
        for r in sub.itertuples(index=False):
            value = _num(r.full_value)
            if not pd.isna(r.full_value_b):
                value += f" > {_num(r.full_value_b)}"
            if pd.isna(r.replications):
                skipped.append(f"{r.id} ({value})")
                continue
            cov = f"{_pct(r.coverage)} [{_pct(r.coverage_ci_low)}, {_pct(r.coverage_ci_high)}]"
            if not pd.isna(r.coverage_b):
                cov += f"; {_pct(r.coverage_b)}"
            dec = (f"{_pct(r.agree)}/{_pct(r.undecided)}/{_pct(r.opposite)}" if role == SIM_CLAIM
                   else _pct(r.within_target))
            lines.append(f"{_ids(r.id)} & {_quantity(r, ctx)} & {int(r.requests)} / {int(r.full_requests)} & "
                         f"{tex_escape(value)} & {_num(r.predicted_half_width)} / {_num(r.mean_half_width)} & "
                         f"{cov} & {dec}" + end)
        if skipped:
            lines.append(r"\multicolumn{7}{p{0.95\textwidth}}{\raggedright Not subsampled: the rule asks for more "
                         f"requests than the draw's {int(sub['full_requests'].max())} (the value lies too close to a "
                         "tolerance edge); decided on the paper's own requests only: "
                         + tex_escape("; ".join(skipped)) + "}" + end)
    n_rep = t["replications"].dropna()
    lines += [r"\bottomrule", r"\end{tabular}"]
    if len(n_rep):
        lines.append(r"\par\smallskip{\scriptsize " + f"{int(n_rep.max())} subsamples per quantity; an ordering's coverage "
                     "is given for both of its quantities (A [CI]; B).}")
    return "\n".join(lines) + "\n" + coverage_note(t)


def coverage_note(t: pd.DataFrame) -> str:
    """One sentence on the coverage at the fewest requests the study subsampled, where it falls below the nominal
    95 %: the quick GPU run's engine claims are sized there (the stand-ins' rows)."""
    c = t[t["coverage"].notna()]
    if c.empty:
        return ""
    n = int(c["requests"].min())
    at = c[c["requests"] == n]
    lo, hi = float(at["coverage"].min()), float(at["coverage"].max())
    if lo >= 0.95:
        return ""
    quick = (at["role"] == ENGINE_PROXY).any()
    return (r"\par\smallskip\noindent{\footnotesize " + f"At n = {n} requests the intervals cover the full draw's value in "
            f"{100 * lo:.1f}-{100 * hi:.1f}\\,\\% of the subsamples ({len(at)} quantities), below their stated 95\\,\\%: a "
            f"percentile bootstrap over so few requests is too narrow"
            + (f", and the quick GPU run sizes engine claims at n = {n}, so its intervals there are too" if quick else "")
            + " (columns requests and coverage of the CSV).}\n")


def build(args, ctx: TraceContext) -> None:
    t = load_study(args.study)
    write_csv(args.csv, t, float_format="%.6g")
    write_text(args.output, to_latex(t, ctx))


def finding(csv) -> str:
    """The sizing rule's coverage in one sentence (the study's CSV)."""
    t = pd.read_csv(csv)
    c = t[t["coverage"].notna()]
    if c.empty:
        return ""
    n = int(c["requests"].min())
    at = c[c["requests"] == n]
    return (f"Subsampled from the released traces, the sized runs' 95 % intervals cover the full draw's value in "
            f"{100 * c['coverage'].min():.1f}-{100 * c['coverage'].max():.1f} % of subsamples over {len(c)} quantities; "
            f"at the fewest requests, n = {n}, in {100 * at['coverage'].min():.1f}-{100 * at['coverage'].max():.1f} %, "
            "below the stated 95 %.")
