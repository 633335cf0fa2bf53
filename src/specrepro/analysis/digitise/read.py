"""Reading figures: every series' marker at every x tick (the plotted marker size fitted in the panels; each reading
with its fit and whether it is readable), bar figures through :mod:`.bars`, all named figures into one table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ...core.io import SpecReproError
from .axes import find_frames, grid_order
from .bars import read_bars
from .image import Picture, color_mask, load_image
from .layouts import FIGURES, PAD, Layout, _Panel, _panel
from .legend import Series, read_legend
from .markers import MAX_SPILL, MIN_COVERAGE, SHAPE_MARGIN, Correlator, Detection, _fast_len, markers_at


def _series_corr(pic: Picture, p: _Panel, s: Series, shape: tuple[int, int], bank: dict) -> Correlator:
    top, bottom, left, right = p.box
    mask = color_mask(pic.rgb[top:bottom, left:right], s.rgb) & p.interior
    return Correlator({"mask": mask}, shape, bank)


def fit_marker_size(corr: Correlator, s: Series, columns: Sequence[float]) -> float:
    """The plotted size of a series' marker: the one whose full-coverage fits at the ticks score best."""
    def quality(size: float) -> float:
        d = [x for x in markers_at(corr, s.marker, size, columns) if x is not None and x.coverage >= MIN_COVERAGE]
        return float(np.mean([x.score for x in d])) if len(d) >= min(3, len(columns)) else -1.0

    lo, hi = 0.4 * s.legend_size, 1.3 * s.legend_size
    tried = {float(z): quality(float(z)) for z in np.arange(lo, hi + 1e-9, 2.0)}
    for step in (1.0, 0.5):  # refine around the best so far
        best = max(tried, key=lambda z: (tried[z], z))
        for z in (best - step, best + step):
            if z > 0 and z not in tried:
                tried[z] = quality(z)
    # the largest size among equal scores: a smaller template fits inside a marker just as well
    top = max(tried.values())
    return max(z for z, q in tried.items() if q >= top - 1e-9)


def read_markers(pic: Picture, layout: Layout, traceset: str = "") -> pd.DataFrame:
    """One row per panel x legend series x x-tick: the marker's value as read, its fit, whether readable."""
    grid = grid_order(find_frames(pic))
    shape = [len(r) for r in layout.panels]
    if [len(r) for r in grid] != shape:
        raise SpecReproError(f"{layout.file}: found axes frames in rows of {[len(r) for r in grid]}, expected {shape}")
    top = min(f.top for r in grid for f in r)
    legend = read_legend(pic, (0, max(1, top - 5), 0, pic.shape[1]), list(layout.series))
    missing = sorted(set(layout.series) - {s.label for s in legend})
    if missing:
        raise SpecReproError(f"{layout.file}: legend entries not found: {', '.join(missing)}")
    panels = [_panel(pic, f, fields, layout.figure) for r, fr in zip(layout.panels, grid) for fields, f in zip(r, fr)]
    rows = []
    sizes = {}
    shape = (_fast_len(max(p.interior.shape[0] for p in panels) + 60),
             _fast_len(max(p.interior.shape[1] for p in panels) + 60))
    bank: dict = {}
    corrs = {(i, s.label): _series_corr(pic, p, s, shape, bank) for i, p in enumerate(panels) for s in legend}
    cols = [[tp - p.box[2] for tp in p.xaxis.ticks] for p in panels]
    for s in legend:
        # fitted in the panel where the series has most pixels (the transform's DC term is their count)
        i = max(range(len(panels)), key=lambda i: float(corrs[(i, s.label)].F["mask"][0, 0].real))
        sizes[s.label] = fit_marker_size(corrs[(i, s.label)], s, cols[i])
    for i, p in enumerate(panels):
        found: dict[str, list[Detection | None]] = {}
        for s in legend:
            found[s.label] = markers_at(corrs[(i, s.label)], s.marker, sizes[s.label], cols[i], PAD)
        # series of one colour compete for a marker: it belongs to the shape that fits it clearly best
        # (by SHAPE_MARGIN); a near tie leaves it to neither
        taken: dict[tuple[str, int], str] = {}
        for a in legend:
            for b in legend:
                if a is b or np.abs(np.subtract(a.rgb, b.rgb)).max() > 0.08:
                    continue
                for k, (da, db) in enumerate(zip(found[a.label], found[b.label])):
                    if da is None or db is None:
                        continue
                    if math.hypot(da.y - db.y, da.x - db.x) <= 0.5 * max(sizes[a.label], sizes[b.label]) \
                            and db.score > da.score - SHAPE_MARGIN:
                        taken[(a.label, k)] = ("another series of this colour fits better" if db.score > da.score
                                               else f"its shape is not told apart from {b.label}'s")
        for s in legend:
            for k, tp in enumerate(p.xaxis.ticks):
                d = found[s.label][k]
                x_label = p.xaxis.labels[k]
                fields = {**p.fields, **layout.series[s.label], "x": x_label, "traceset": traceset}
                row = {"figure": layout.figure, "panel": p.fields.get("panel", ""), "series": s.label, "x": x_label,
                       "key": layout.key.format(**fields), "quantity": layout.quantity,
                       "marker": s.marker, "size_px": sizes[s.label], "px_per_unit": abs(1 / p.yaxis.slope)}
                if d is None:
                    row.update(read=math.nan, y_px=math.nan, x_px=math.nan, coverage=0.0, spill=math.nan,
                               readable=False, why="no marker found at this tick")
                else:
                    y = d.y + p.box[0]
                    lost = taken.get((s.label, k), "")
                    cov = d.coverage
                    readable = not lost and cov >= MIN_COVERAGE and d.spill <= MAX_SPILL and d.visible >= 0.8
                    why = (lost if lost else
                           "partly hidden" if cov < MIN_COVERAGE else
                           "merged with a marker of its colour" if d.spill > MAX_SPILL else
                           "cut by the frame" if d.visible < 0.8 else "")
                    row.update(read=p.yaxis.value(y), y_px=y, x_px=d.x + p.box[2], coverage=cov, spill=d.spill,
                               readable=readable, why=why)
                rows.append(row)
    return pd.DataFrame(rows)


#: columns of the readings table (:func:`digitise_figures`)
READING_COLUMNS = ["figure", "panel", "series", "x", "axes", "quantity", "key", "read", "readable", "why",
                   "px_per_unit", "marker", "size_px", "coverage", "spill", "bar_px", "x_px", "y_px"]


def digitise_figures(figdir: str | Path, names: Sequence[str] = tuple(FIGURES), traceset: str = "") -> pd.DataFrame:
    """Readings of every marker/bar of the named figures (:data:`FIGURES`) from ``figdir``/paper-fig<N>.png.

    ``traceset`` names the released trace set in the simulator figures' metric keys. Where a value is shown
    twice (Fig. 3's inset repeats the B = 1 bars at a finer scale), only the finer reading is kept.
    """
    frames = []
    for name in names:
        if name not in FIGURES:
            raise SpecReproError(f"no layout for figure {name!r} (known: {', '.join(FIGURES)})")
        layout = FIGURES[name]
        pic = Picture.of(load_image(Path(figdir) / layout.file))
        df = read_markers(pic, layout, traceset) if layout.kind == "markers" else read_bars(pic, layout, traceset)
        if "preferred" in df.columns:
            df = df[df["preferred"]].drop(columns="preferred")
        if "axes" not in df.columns:
            df["axes"] = "main"
        frames.append(df.reindex(columns=READING_COLUMNS))
    out = pd.concat(frames, ignore_index=True)
    out["readable"] = out["readable"].astype(bool)
    out["x"] = out["x"].astype(str)
    return out
