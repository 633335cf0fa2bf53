"""The readings against the claims registry (the claims are passed in: this package imports no registry): each
reading with its claim and whether it agrees, a summary per figure; the figure images' checksums and origins."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from ...core.io import SpecReproError, sha256_file


_FIG_RE = re.compile(r"^\s*Figs?\.\s*(\d+)(?:\(([a-z])\))?")


def claim_figure(source: str) -> tuple[str, str]:
    """("Fig. 10", "a") from a claim's source "Fig. 10(a), digitised ..."; ("", "") for text claims."""
    m = _FIG_RE.match(source)
    return (f"Fig. {m.group(1)}", m.group(2) or "") if m else ("", "")


#: columns of the agreement table (:func:`agreement`)
AGREEMENT_COLUMNS = ["figure", "panel", "series", "x", "quantity", "key", "read", "readable", "why", "claim_id",
                     "paper_value", "tolerance", "difference", "agrees", "other_figure_claim", "other_figure_value",
                     "other_agrees"]


def _value_claim(c) -> bool:
    """A claim of a plotted value (a number, its tolerance, one metric key), not a bound or an ordering."""
    return (getattr(c, "kind", "value") in ("value", None) and isinstance(c.measured_by, str) and bool(c.measured_by)
            and isinstance(c.value, (int, float)) and c.value == c.value)


def agreement(readings: pd.DataFrame, claims) -> pd.DataFrame:
    """Each reading against the registry claim of the same figure (and panel, where the claim names one) and key.

    ``agrees`` is |read - paper value| <= the claim's tolerance, for readable readings with a claim (None
    otherwise). A claim of another figure with the same key (Fig. 12 replots Fig. 10's values) is compared
    in ``other_agrees`` with that claim's tolerance, which was set for the other figure's resolution.
    """
    by_key: dict[str, list] = {}
    for c in claims:
        fig, panel = claim_figure(c.source)
        if fig and _value_claim(c):
            by_key.setdefault(c.measured_by, []).append((fig, panel, c))
    rows = []
    for r in readings.itertuples(index=False):
        cands = by_key.get(r.key, [])
        own = [c for fig, panel, c in cands if fig == r.figure and panel in ("", r.panel)]
        other = [c for fig, _, c in cands if fig != r.figure]
        row = {k: getattr(r, k) for k in ("figure", "panel", "series", "x", "quantity", "key", "read", "readable",
                                           "why")}
        read = float(r.read)
        # a marker with several claims (the registry repeats some values) agrees when it agrees with each
        diffs = [(read - c.value, c.tolerance(c.value)) for c in own]
        worst = max(diffs, key=lambda d: abs(d[0]) - d[1]) if diffs else (math.nan, math.nan)
        judged = bool(own) and bool(r.readable) and read == read
        o = other[0] if other and not own else None
        row.update(claim_id=";".join(c.id for c in own), paper_value=own[0].value if own else math.nan,
                   tolerance=worst[1], difference=worst[0],
                   agrees=all(abs(d) <= t + 1e-12 for d, t in diffs) if judged else None,
                   other_figure_claim=o.id if o else "", other_figure_value=o.value if o else math.nan,
                   other_agrees=(abs(read - o.value) <= o.tolerance(o.value) + 1e-12) if o and r.readable else None)
        rows.append(row)
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)


SUMMARY_COLUMNS = ["figure", "claims", "readings", "readable", "judged", "agree", "rate", "median_abs_difference",
                   "max_abs_difference", "tolerance_min", "tolerance_max", "max_share_of_tolerance", "claims_unread",
                   "other_judged", "other_agree"]


def summary(agree: pd.DataFrame, claims) -> pd.DataFrame:
    """Per figure: its registry claims, readings, readable ones, those judged against a claim, how many agree.

    ``rate`` = agree / judged; ``median_abs_difference`` / ``max_abs_difference``: |read - paper value| over the
    judged readings; ``tolerance_min`` / ``_max``: the tolerances they were judged against;
    ``max_share_of_tolerance``: the largest |read - paper value| / tolerance (above 1: a disagreement);
    ``claims_unread``: the figure's claims no readable reading decides; ``other_*``: readable readings compared (not
    judged) with another figure's claim of the same key.
    """
    rows = []
    for fig, g in agree.groupby("figure", sort=False):
        fig_claims = {c.id for c in claims if claim_figure(c.source)[0] == fig and _value_claim(c)}
        judged = g[g["readable"] & (g["claim_id"] != "")]
        read_ids = {i for ids in judged["claim_id"] for i in ids.split(";")}
        other = g[g["readable"] & (g["other_figure_claim"] != "")]
        n_ok = int((judged["agrees"] == True).sum())  # noqa: E712
        d = judged["difference"].astype(float).abs()
        tol = judged["tolerance"].astype(float)
        share = d / tol.where(tol > 0)
        rows.append({"figure": fig, "claims": len(fig_claims), "readings": int(g["read"].notna().sum()),
                     "readable": int(g["readable"].sum()), "judged": len(judged), "agree": n_ok,
                     "rate": n_ok / len(judged) if len(judged) else math.nan,
                     "median_abs_difference": float(d.median()) if len(d) else math.nan,
                     "max_abs_difference": float(d.max()) if len(d) else math.nan,
                     "tolerance_min": float(tol.min()) if len(tol) else math.nan,
                     "tolerance_max": float(tol.max()) if len(tol) else math.nan,
                     "max_share_of_tolerance": float(share.max()) if share.notna().any() else math.nan,
                     "claims_unread": len(fig_claims - read_ids), "other_judged": len(other),
                     "other_agree": int((other["other_agrees"] == True).sum())})  # noqa: E712
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def nearest_tolerance(agree: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The ``n`` judged readings closest to (or beyond) their claim's tolerance: largest |difference| / tolerance."""
    j = agree[agree["agrees"].notna()].copy()
    j["share_of_tolerance"] = j["difference"].astype(float).abs() / j["tolerance"].astype(float)
    return j.sort_values(["share_of_tolerance", "figure"], ascending=[False, True], kind="stable").head(n)


def image_facts(path: str | Path) -> dict:
    """What a figure image says about itself: SHA-256, [width, height] in pixels, dpi (the PNG pHYs chunk, rounded)
    and the program that wrote it (the PNG Software text chunk; None without one)."""
    from PIL import Image

    path = Path(path)
    try:
        with Image.open(path) as im:
            dpi = im.info.get("dpi")
            return {"sha256": sha256_file(path), "pixels": [int(im.width), int(im.height)],
                    "dpi": int(round(dpi[0])) if dpi else None, "software": im.info.get("Software")}
    except FileNotFoundError:
        raise SpecReproError(f"{path}: figure image not found") from None


#: what paper/figure_images.yaml records for every image
IMAGE_FIELDS = ("figure", "sha256", "pixels", "dpi", "software", "arxiv_version", "page", "rasterised")


def load_image_origins(path: str | Path) -> dict[str, dict]:
    """The images' origin records (``paper/figure_images.yaml``: file name -> :data:`IMAGE_FIELDS`)."""
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecReproError(f"{path}: figure image origins not found") from None
    images = (doc or {}).get("images") if isinstance(doc, dict) else None
    if not isinstance(images, dict):
        raise SpecReproError(f"{path}: expected a top-level 'images:' mapping")
    for name, rec in images.items():
        missing = [f for f in IMAGE_FIELDS if f not in (rec or {})]
        if missing:
            raise SpecReproError(f"{path}: image {name} lacks {', '.join(missing)} (write 'unknown' where it is not known)")
    return images


def verify_images(figdir: str | Path, sha256: dict[str, str]) -> None:
    """Check each image against its SHA-256 (file name -> hex); a mismatch or a missing file is one line."""
    for name, want in sha256.items():
        path = Path(figdir) / name
        if not path.exists():
            raise SpecReproError(f"{path}: figure image not found (paper_figures.dir in the config)")
        got = sha256_file(path)
        if got != want:
            raise SpecReproError(f"{path}: SHA-256 {got} differs from paper_figures.files[{name}] = {want}: "
                                 "use the paper's own figure image or correct the checksum")
