"""Legends: each entry's colour, its marker shape and line style (from the sample above and below its line) and its
text, matched against the figure's label lexicon; the filled-patch legends of bar charts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...core.io import SpecReproError
from .axes import Frame, _rendered, _resize, _text_rows
from .image import INK, Component, Picture, color_mask, components, saturation
from .markers import MARKER_SHAPES, marker_mask


@dataclass
class Series:
    """One legend entry: its label, colour and marker template (cut from the legend sample)."""

    label: str
    rgb: tuple[float, float, float]  #: the colour at full strength
    marker: str  #: matplotlib marker code of the shape in the legend
    legend_size: float  #: the legend marker's height in pixels (plotted markers may be smaller)
    line: str = "solid"  #: "solid" or "dotted", as the sample's line is drawn
    score: float = 0.0  #: distance of the label text to the lexicon entry chosen


def dominant_color(pixels: np.ndarray) -> tuple[float, float, float]:
    """The colour at full strength of pixels that are one colour blended over white in varying amounts."""
    v = 1.0 - pixels
    mag = np.linalg.norm(v, axis=1)
    keep = mag > 0.2
    d = np.median(v[keep] / mag[keep, None], axis=0)
    d /= np.linalg.norm(d)
    strength = float(np.percentile((v[keep] @ d), 90))
    return tuple(float(x) for x in np.clip(1.0 - d * strength, 0.0, 1.0))


def _hgap(a: Component, b: Component) -> int:
    return max(a.left - b.right, b.left - a.right) - 1


def _cluster(comps: Sequence[Component], near) -> list[list[Component]]:
    """Groups of components linked by the relation ``near`` (transitively), in reading order."""
    parent = list(range(len(comps)))

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(len(comps)):
        for j in range(i + 1, len(comps)):
            if near(comps[i], comps[j]):
                parent[find(j)] = find(i)
    groups: dict[int, list[Component]] = {}
    for i, c in enumerate(comps):
        groups.setdefault(find(i), []).append(c)
    return sorted(groups.values(), key=lambda g: (min(c.top for c in g) // 10, min(c.left for c in g)))


def _label_right_of(text: np.ndarray, cy: int, x0: int, x1: int, reach: int = 60) -> np.ndarray:
    """The ink of the text line crossing row ``cy`` that starts right of column ``x0`` (up to ``x1``)."""
    b0 = max(0, cy - reach)
    band = text[b0:cy + reach + 1, x0:x1]
    comps = [c for c in components(band) if c.height < reach]
    core = [c for c in comps if c.top <= cy - b0 + 2 and c.bottom >= cy - b0 - 2]
    out = np.zeros_like(band)
    if core:
        lo, hi = min(c.top for c in core), max(c.bottom for c in core)
        # glyphs ("_" hangs below the line), not the edges of bars or frames nearby
        words = [c for c in comps if lo - 3 <= c.top <= hi + 0.4 * (hi - lo) and c.width <= 1.5 * (hi - lo)]
        rows = _text_rows(words, gap=0.9 * (hi - lo))
        if rows and rows[0][0].left <= 3 * (hi - lo):  # the label follows its sample closely
            for c in rows[0]:
                out[c.ys, c.xs] = True
    return out


def _label_distance(ink: np.ndarray, text: str) -> float:
    ys, xs = np.nonzero(ink)
    if len(ys) == 0:
        return math.inf
    crop = ink[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    ref = _rendered(text)
    a, b = crop.shape[1] / crop.shape[0], ref.shape[1] / ref.shape[0]
    shape = (32, max(8, int(round(32 * a))))
    return float(np.mean((_resize(crop, shape) - _resize(ref, shape)) ** 2)) + 0.5 * abs(math.log(a / b))


def _sample_marker(mask: np.ndarray) -> tuple[str, float, str]:
    """(marker code, marker height in pixels, line style) of a legend sample's colour mask.

    The sample's line passes through the marker's centre; the marker is compared with matplotlib's marker
    outlines above and below the line only, where nothing else is drawn.
    """
    comps = components(mask)
    big = max(comps, key=len)
    line = "dotted" if sum(1 for c in comps if c is not big and len(c) >= 4) >= 2 else "solid"
    left_cols = [x for x in range(mask.shape[1]) if mask[:, x].any()][:3]
    rows = np.nonzero(mask[:, left_cols].any(axis=1))[0]
    thickness = len(rows)
    cy = float(rows.mean())
    extent = mask.sum(axis=0)
    cols = np.nonzero(extent > thickness + 2)[0]
    if len(cols) == 0:
        raise SpecReproError("legend sample without a marker")
    c0, c1 = int(cols[0]), int(cols[-1])
    mrows = np.nonzero(mask[:, c0:c1 + 1].any(axis=1))[0]
    height = float(mrows[-1] - mrows[0] + 1)
    cx = (c0 + c1) / 2
    yy, xx = np.mgrid[0:mask.shape[0], 0:mask.shape[1]]
    region = (np.abs(yy - cy) > thickness / 2 + 1) & (xx >= c0 - 2) & (xx <= c1 + 2)
    best = ("o", -1.0, height)
    for code in MARKER_SHAPES:
        for size in np.arange(0.5 * height, 1.6 * height, 0.5):
            m, (mr, mc) = marker_mask(code, float(size))
            if abs(m.shape[0] - height) > 2:
                continue
            ys0, xs0 = np.nonzero(m)
            for dy in (-1, 0, 1):  # the centre is known to a pixel: try its neighbours
                for dx in (-1, 0, 1):
                    placed = np.zeros_like(mask)
                    ys = ys0 - mr + int(round(cy)) + dy
                    xs = xs0 - mc + int(round(cx)) + dx
                    ok = (ys >= 0) & (ys < mask.shape[0]) & (xs >= 0) & (xs < mask.shape[1])
                    placed[ys[ok], xs[ok]] = True
                    a_, b_ = placed & region, mask & region
                    iou = (a_ & b_).sum() / max(1, (a_ | b_).sum())
                    if iou > best[1]:
                        best = (code, float(iou), height)
    return best[0], height, line


def read_legend(pic: Picture, region: tuple[int, int, int, int], lexicon: Sequence[str],
                min_pixels: int = 20) -> list[Series]:
    """Legend entries in ``region`` (top, bottom, left, right): coloured samples and the label right of each."""
    t0, b0, l0, r0 = region
    sub = pic.rgb[t0:b0, l0:r0]
    colored = saturation(sub) > 0.15
    comps = [c for c in components(colored, min_pixels=4)]
    # samples: coloured components on one row and close together (a dotted line is several)
    groups = _cluster(comps, lambda a, b: abs(a.cy - b.cy) <= 6 and _hgap(a, b) <= 14)
    groups = [g for g in groups if sum(len(c) for c in g) >= min_pixels]
    ink = pic.text[t0:b0, l0:r0]
    out = []
    for g in groups:
        top, bottom = min(c.top for c in g), max(c.bottom for c in g)
        left, right = min(c.left for c in g), max(c.right for c in g)
        pix = np.concatenate([sub[c.ys, c.xs] for c in g])
        rgb = dominant_color(pix)
        pad = 3
        box = (max(0, top - pad), bottom + pad + 1, max(0, left - pad), right + pad + 1)
        mask = color_mask(sub[box[0]:box[1], box[2]:box[3]], rgb)
        marker, height, line = _sample_marker(mask)
        # the label: ink right of the sample, on its row, up to the next sample on that row
        nxt = [min(c.left for c in h) for h in groups
               if h is not g and abs(np.mean([c.cy for c in h]) - (top + bottom) / 2) <= 6
               and min(c.left for c in h) > right]
        end = min(nxt) if nxt else sub.shape[1]
        lab_ink = _label_right_of(ink, (top + bottom) // 2, right + 1, end)
        out.append((Series("", rgb, marker, height, line), [_label_distance(lab_ink, w) for w in lexicon]))
    # each lexicon entry names one sample: the closest pairs first
    pairs = sorted((d, i, j) for i, (_, ds) in enumerate(out) for j, d in enumerate(ds))
    named, used = {}, set()
    for d, i, j in pairs:
        if i not in named and j not in used:
            named[i] = (lexicon[j], d)
            used.add(j)
    series = []
    for i, (s, _) in enumerate(out):
        if i in named:
            s.label, s.score = named[i]
            series.append(s)
    return series


def _fill_mask(rgb: np.ndarray) -> np.ndarray:
    """Painted, not white and not black: bar and legend-patch fills, grey ones included."""
    return (rgb.min(axis=2) < 0.85) & (rgb.max(axis=2) >= INK)


def read_patch_legend(pic: Picture, frame: Frame, lexicon: Sequence[str], avoid=()) -> list[tuple[Series, Component]]:
    """Legend entries inside a frame: filled patches with a lexicon label right of them (and the patch)."""
    t0, b0, l0, r0 = frame.inner
    fill = _fill_mask(pic.rgb[t0:b0, l0:r0])
    for (top, bottom, left, right) in avoid:
        fill[max(0, top - t0):max(0, bottom - t0), max(0, left - l0):max(0, right - l0)] = False
    cands = [c for c in components(fill, min_pixels=60)
             if c.bottom < fill.shape[0] - 3 and 1.5 <= c.width / c.height <= 5]  # patch-shaped, not a bar
    scored = []
    for c in cands:
        y, x = t0 + int(c.cy), l0 + c.right + 1
        # past the patch's edge line (a column of ink as tall as the patch), and a pixel of antialiasing
        while x < r0 and (pic.text[t0 + c.top:t0 + c.bottom + 1, x].mean() > 0.5 or
                          pic.text[t0 + c.top:t0 + c.bottom + 1, x + 1].mean() > 0.5):
            x += 1
        x += 1
        lab = _label_right_of(pic.text, y, x, r0, reach=max(20, 2 * c.height))
        if lab.any():
            scored.append((c, [_label_distance(lab, w) for w in lexicon]))
    pairs = sorted((d, i, j) for i, (_, ds) in enumerate(scored) for j, d in enumerate(ds) if d < 0.3)
    named, used = {}, set()
    for d, i, j in pairs:
        if i not in named and j not in used:
            named[i] = (lexicon[j], d)
            used.add(j)
    out = []
    for i, (label, d) in sorted(named.items()):
        c = scored[i][0]
        rgb = dominant_color(pic.rgb[t0:b0, l0:r0][c.ys, c.xs])
        out.append((Series(label, rgb, "bar", float(c.height), "none", d), c))
    return out
