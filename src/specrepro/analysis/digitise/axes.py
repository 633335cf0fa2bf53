"""Read the plotted values of the paper's figures from their images alone.

An independent check of the values in ``paper/claims.yaml``: nothing here knows a registry or simulator
value. Per figure image (``paper-fig<N>.png``) it

* finds the axes frames (long dark lines joined into rectangles) and orders them into the figure's grid;
* calibrates each axis from its tick marks (the short dark lines outside the frame, centred by their
  darkness) and their labels, read glyph by glyph against DejaVu Sans digits rendered here (matplotlib's
  default font, the paper's);
* reads the legend: each entry's colour, its marker shape (the sample above and below its line compared
  with matplotlib's own marker outlines) and its text, matched against the figure's label lexicon
  (:data:`FIGURES`); the plotted marker size is fitted in the panels (legends may draw markers larger);
* finds every series' marker at every x tick by template matching on the series' colour mask (coverage of
  the template minus the share of a ring around it on that colour), and maps its centre through the axis
  calibration; bars (Fig. 3) are read from the centre of their top edge, Fig. 3's magnified insets too.

A marker is *readable* when at least :data:`MIN_COVERAGE` of its template lies on its own colour (not hidden
by another series), at most :data:`MAX_SPILL` of the ring around it does (no second marker of the same
colour merged into it), most of it lies inside the frame, and no other series of the same colour fits
there as well (within :data:`SHAPE_MARGIN`). A bar is readable when at least :data:`MIN_BAR_PX` tall. Only
the figure's layout (which panel is which model and dataset, which legend label is which method, how a
metric key is formed) comes from :data:`FIGURES`.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ...io import SpecReproError

#: a pixel is "ink" (spines, ticks) when its brightest channel is below this
INK = 0.45
#: ... and part of a glyph when below this (thin antialiased strokes are grey)
TEXT_INK = 0.7
#: a marker is readable when this share of its template lies on its colour
MIN_COVERAGE = 0.85
#: ... and at most this share of the ring around the template does
MAX_SPILL = 0.35
#: where markers of one colour overlap, the shape that fits must score this much better than the others
SHAPE_MARGIN = 0.1


# --------------------------------------------------------------------------------------------------------------
# image primitives


def load_image(path: str | Path) -> np.ndarray:
    """RGB floats in [0, 1], shape (H, W, 3); a missing or unreadable file is a one-line error."""
    import matplotlib.image as mpimg

    path = Path(path)
    try:
        im = mpimg.imread(path)
    except FileNotFoundError:
        raise SpecReproError(f"{path}: figure image not found") from None
    except (OSError, ValueError, SyntaxError) as e:
        raise SpecReproError(f"{path}: not a readable PNG ({e})") from None
    im = np.asarray(im, dtype=float)
    if im.ndim == 2:
        im = np.repeat(im[..., None], 3, axis=2)
    if im.dtype.kind == "u" or im.max() > 1.0:
        im = im / 255.0
    return im[..., :3]


def ink_mask(im: np.ndarray) -> np.ndarray:
    return im.max(axis=2) < INK


@dataclass
class Picture:
    """A figure image and its ink masks (computed once): lines, glyphs (grey-tolerant, uncoloured), darkness."""

    rgb: np.ndarray
    ink: np.ndarray
    text: np.ndarray
    dark: np.ndarray  #: 1 - the brightest channel

    @classmethod
    def of(cls, rgb: np.ndarray) -> "Picture":
        dark = 1.0 - rgb.max(axis=2)
        return cls(rgb, dark > 1.0 - INK, (dark > 1.0 - TEXT_INK) & (saturation(rgb) < 0.15), dark)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.rgb.shape


def _runs(v: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of the True runs of a 1-D boolean array, end exclusive."""
    d = np.diff(np.concatenate([[0], v.astype(np.int8), [0]]))
    return list(zip(np.nonzero(d == 1)[0].tolist(), np.nonzero(d == -1)[0].tolist()))


@dataclass
class Component:
    """An 8-connected set of pixels."""

    ys: np.ndarray
    xs: np.ndarray

    @property
    def top(self) -> int:
        return int(self.ys.min())

    @property
    def bottom(self) -> int:
        return int(self.ys.max())

    @property
    def left(self) -> int:
        return int(self.xs.min())

    @property
    def right(self) -> int:
        return int(self.xs.max())

    @property
    def height(self) -> int:
        return self.bottom - self.top + 1

    @property
    def width(self) -> int:
        return self.right - self.left + 1

    @property
    def cx(self) -> float:
        return (self.left + self.right) / 2

    @property
    def cy(self) -> float:
        return (self.top + self.bottom) / 2

    def __len__(self) -> int:
        return len(self.ys)

    def crop(self) -> np.ndarray:
        m = np.zeros((self.height, self.width), dtype=bool)
        m[self.ys - self.top, self.xs - self.left] = True
        return m


def components(mask: np.ndarray, min_pixels: int = 1) -> list[Component]:
    """8-connected components of a boolean image, by row runs and union-find (sorted top-left first)."""
    parent: list[int] = []

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    runs: list[tuple[int, int, int]] = []  # (row, start, end)
    prev: list[tuple[int, int, int]] = []  # (start, end, run id) of the previous row
    for y in range(mask.shape[0]):
        row = mask[y]
        if not row.any():
            prev = []
            continue
        cur = []
        j = 0
        for s, e in _runs(row):
            rid = len(runs)
            runs.append((y, s, e))
            parent.append(rid)
            while j < len(prev) and prev[j][1] < s:  # previous runs ending left of this one (8-connectivity)
                j += 1
            k = j
            while k < len(prev) and prev[k][0] <= e:
                a, b = find(prev[k][2]), find(rid)
                if a != b:
                    parent[max(a, b)] = min(a, b)
                k += 1
            cur.append((s, e, rid))
        prev = cur
    groups: dict[int, list[int]] = {}
    for rid in range(len(runs)):
        groups.setdefault(find(rid), []).append(rid)
    out = []
    for ids in groups.values():
        ys = np.concatenate([np.full(runs[i][2] - runs[i][1], runs[i][0]) for i in ids])
        xs = np.concatenate([np.arange(runs[i][1], runs[i][2]) for i in ids])
        if len(ys) >= min_pixels:
            out.append(Component(ys, xs))
    out.sort(key=lambda c: (c.top, c.left))
    return out


def color_alpha(im: np.ndarray, rgb: Sequence[float], min_cos: float = 0.99) -> np.ndarray:
    """How much of ``rgb`` each pixel holds over white (0..1+), 0 where its hue is not ``rgb``'s.

    A colour blended over white with opacity a is ``1 - a (1 - rgb)``: ``1 - pixel`` points the way ``1 - rgb``
    does, whatever a, and its length over that of ``1 - rgb`` is a.
    """
    u = 1.0 - np.asarray(rgb, dtype=float)
    v = 1.0 - im
    nu = float(np.sqrt(np.sum(u * u)))
    mag = np.sqrt(v[..., 0] ** 2 + v[..., 1] ** 2 + v[..., 2] ** 2)
    cos = (v[..., 0] * u[0] + v[..., 1] * u[1] + v[..., 2] * u[2]) / (np.maximum(mag, 1e-9) * nu)
    return np.where(cos >= min_cos, mag / nu, 0.0)


def color_mask(im: np.ndarray, rgb: Sequence[float], min_alpha: float = 0.45, min_cos: float = 0.99) -> np.ndarray:
    return color_alpha(im, rgb, min_cos) >= min_alpha


def saturation(im: np.ndarray) -> np.ndarray:
    return im.max(axis=2) - im.min(axis=2)


# --------------------------------------------------------------------------------------------------------------
# frames, ticks


@dataclass(frozen=True)
class Frame:
    """An axes rectangle: outer pixel extents of its spines, and the spine thickness."""

    top: int
    bottom: int
    left: int
    right: int
    spine: int

    @property
    def inner(self) -> tuple[int, int, int, int]:
        s = self.spine
        return self.top + s, self.bottom - s + 1, self.left + s, self.right - s + 1


def _long_runs(mask: np.ndarray, length: int, axis: int) -> np.ndarray:
    out = np.zeros_like(mask)
    lines = mask if axis == 1 else mask.T
    target = out if axis == 1 else out.T
    for i in range(lines.shape[0]):
        if lines[i].sum() < length:
            continue
        for s, e in _runs(lines[i]):
            if e - s >= length:
                target[i, s:e] = True
    return out


def find_frames(pic: Picture, min_size: int = 40, fill: float = 0.9) -> list[Frame]:
    """Axes frames: dark lines at least ``min_size`` long joined into rectangles, largest first.

    A frame's four sides are rows and columns at least ``fill`` set (a bar drawn over a spine hides some).
    """
    ink = pic.ink
    lines = _long_runs(ink, min_size, 1) | _long_runs(ink, min_size, 0)
    frames = []
    for c in components(lines, min_pixels=4 * min_size):
        if c.width < min_size or c.height < min_size:
            continue
        m = c.crop()
        # a frame has spines on all four sides: rows and columns that are almost all set (a tick mark
        # joined to a spine may stick out of the rectangle)
        rows = np.nonzero(m.mean(axis=1) >= fill)[0]
        if len(rows) < 2 or rows[-1] - rows[0] < min_size:
            continue
        # left and right: the ends of the top spine (y tick marks may stick out of the bottom one)
        lo, hi = max(_runs(m[rows[0]]), key=lambda run: run[1] - run[0])
        hi -= 1
        side = m[rows[0]:rows[-1] + 1]
        if hi - lo < min_size or max(side[:, lo].mean(), side[:, hi].mean()) < fill:
            continue
        spine = _runs(m[rows[0]:, (lo + hi) // 2])[0]
        frames.append(Frame(int(c.top + rows[0]), int(c.top + rows[-1]), int(c.left + lo), int(c.left + hi),
                            max(1, spine[1] - spine[0])))
    frames.sort(key=lambda f: -(f.bottom - f.top) * (f.right - f.left))
    return frames


def grid_order(frames: Sequence[Frame], tol: int = 20) -> list[list[Frame]]:
    """Frames as rows (top to bottom) of columns (left to right)."""
    rows: list[list[Frame]] = []
    for f in sorted(frames, key=lambda f: (f.top, f.left)):
        for r in rows:
            if abs(r[0].top - f.top) <= tol:
                r.append(f)
                break
        else:
            rows.append([f])
    return [sorted(r, key=lambda f: f.left) for r in rows]


@dataclass(frozen=True)
class Tick:
    pos: float  #: pixel coordinate along the axis (pixel centres at integers)
    length: int  #: how far the mark reaches out of the frame


def find_ticks(pic: Picture, frame: Frame, axis: str, max_len: int = 30) -> list[Tick]:
    """Tick marks outside the frame: short dark runs perpendicular to the ``axis`` ('x' bottom, 'y' left) spine."""
    ink = pic.ink
    if axis == "y":
        line = ink[frame.top:frame.bottom + 1, frame.left - 2]
        base = frame.top
    else:
        line = ink[frame.bottom + 2, frame.left:frame.right + 1]
        base = frame.left
    dark = pic.dark
    ticks = []
    for s, e in _runs(line):
        if e - s > 8:  # a label or a spine, not a tick mark
            continue
        # the darkness-weighted centre across the mark (antialiased edges included), averaged along it
        lo, hi = max(0, s - 1), e + 1
        if axis == "y":
            prof = dark[base + lo:base + hi, frame.left - 3:frame.left - 1].mean(axis=1)
        else:
            prof = dark[frame.bottom + 2:frame.bottom + 4, base + lo:base + hi].mean(axis=0)
        pos = base + lo + float(np.sum(np.arange(len(prof)) * prof) / max(np.sum(prof), 1e-9))
        p = int(round(pos))
        n = 0
        while n < max_len:
            v = ink[p, frame.left - 1 - n] if axis == "y" else ink[frame.bottom + 1 + n, p]
            if not v:
                break
            n += 1
        if 2 <= n < max_len:
            ticks.append(Tick(float(pos), n))
    return ticks


# --------------------------------------------------------------------------------------------------------------
# reading numbers: glyphs against DejaVu Sans digits rendered here

GLYPH_GRID = (20, 14)
DIGITS = "0123456789"


def _resize(a: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Bilinear resampling of a 2-D array to ``shape`` (pixel centres mapped onto pixel centres)."""
    a = np.asarray(a, dtype=float)
    h, w = a.shape
    H, W = shape
    ys = (np.arange(H) + 0.5) * h / H - 0.5
    xs = (np.arange(W) + 0.5) * w / W - 0.5
    rows = np.array([np.interp(xs, np.arange(w), r) for r in a])
    return np.array([np.interp(ys, np.arange(h), c) for c in rows.T]).T


@functools.lru_cache(maxsize=None)
def _rendered(text: str, family: str = "DejaVu Sans") -> np.ndarray:
    """``text`` rendered large (about 60 px cap height), black on white, cropped to its ink (bool)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(1.0, 0.6 * len(text)), 1.2), dpi=100)
    canvas = FigureCanvasAgg(fig)
    fig.text(0.5, 0.5, text, fontsize=60, family=family, ha="center", va="center")
    canvas.draw()
    ink = np.asarray(canvas.buffer_rgba())[..., :3].mean(axis=2) < 128
    ys, xs = np.nonzero(ink)
    return ink[ys.min():ys.max() + 1, xs.min():xs.max() + 1]


@functools.lru_cache(maxsize=None)
def _digit_templates() -> dict[str, tuple[np.ndarray, float]]:
    """digit -> (template on :data:`GLYPH_GRID`, width/height of its ink)."""
    full = _rendered("0")
    out = {}
    for d in DIGITS:
        g = _rendered(d)
        out[d] = (_resize(g, GLYPH_GRID), g.shape[1] / full.shape[0])
    return out


def classify_digit(glyph: np.ndarray, digit_height: float) -> tuple[str, float]:
    """(digit, distance) of the best DejaVu Sans digit for a glyph image (bool, cropped to its ink)."""
    g = _resize(glyph, GLYPH_GRID)
    aspect = glyph.shape[1] / digit_height
    best = ("?", math.inf)
    for d, (t, ta) in _digit_templates().items():
        dist = float(np.mean((g - t) ** 2)) + 0.5 * (aspect - ta) ** 2
        if dist < best[1]:
            best = (d, dist)
    return best


def read_glyphs(glyphs: Sequence[Component]) -> str:
    """The text of a row of glyph components (digits, '.', '-'), left to right."""
    glyphs = sorted(glyphs, key=lambda c: c.left)
    if not glyphs:
        return ""
    h = max(c.height for c in glyphs)
    top = min(c.top for c in glyphs)
    out = []
    for c in glyphs:
        if c.height < 0.4 * h and c.width < 0.5 * h and c.top > top + 0.55 * h:
            out.append(".")
        elif c.height < 0.3 * h and c.width >= c.height:
            out.append("-")
        else:
            out.append(classify_digit(c.crop(), h)[0])
    return "".join(out)


def parse_number(text: str) -> float | None:
    return float(text) if re.fullmatch(r"-?\d+(\.\d+)?", text) else None


def _text_rows(glyphs: list[Component], gap: float) -> list[list[Component]]:
    """Glyphs chained left to right while the horizontal gap is at most ``gap`` pixels."""
    rows: list[list[Component]] = []
    for c in sorted(glyphs, key=lambda c: c.left):
        if rows and c.left - max(g.right for g in rows[-1]) - 1 <= gap:
            rows[-1].append(c)
        else:
            rows.append([c])
    return rows


def _label_glyph(c: Component, digit_h: float) -> bool:
    """A digit-sized glyph, or a point or minus sign (not a glyph of a rotated axis label)."""
    return (0.8 * digit_h <= c.height <= 1.15 * digit_h and c.width <= 0.9 * digit_h) or c.height < 0.4 * digit_h


def tick_labels(pic: Picture, frame: Frame, axis: str, ticks: Sequence[Tick]) -> list[str]:
    """The text of each tick's label ('' where none is found next to it)."""
    if not ticks:
        return []
    ink = pic.text
    tl = max(t.length for t in ticks)
    H, W = ink.shape
    if axis == "y":
        y0, y1 = max(0, frame.top - 40), min(H, frame.bottom + 40)
        x0, x1 = max(0, frame.left - 260), frame.left - tl - 1
        glyphs = [c for c in components(ink[y0:y1, x0:x1]) if c.height <= 60]
        for c in glyphs:
            c.ys += y0
            c.xs += x0
        # the digit height: that of the glyph next to each tick (a label's last character is a digit)
        last = []
        for t in ticks:
            row = [c for c in glyphs if abs(c.cy - t.pos) <= 12 and c.height > 4]
            if row:
                last.append(max(row, key=lambda c: c.right).height)
        digit_h = float(np.median(last)) if last else 10.0
        out = []
        for t in ticks:
            near = [c for c in glyphs if c.top <= t.pos + 0.8 * digit_h and c.bottom >= t.pos - 0.8 * digit_h
                    and abs(c.cy - t.pos) <= 0.8 * digit_h and _label_glyph(c, digit_h)]
            rows = _text_rows(near, gap=0.35 * digit_h)
            out.append(read_glyphs(rows[-1]) if rows else "")  # the row nearest the tick
        return out
    # below the marks, including their grey antialiased ends
    while frame.bottom + tl + 1 < H and any(ink[frame.bottom + tl + 1, int(round(t.pos))] for t in ticks):
        tl += 1
    y0, y1 = frame.bottom + tl + 1, min(H, frame.bottom + tl + 120)
    x0, x1 = max(0, frame.left - 60), min(W, frame.right + 60)
    # a glyph cut by the band's top edge belongs to something above it (the lowest y tick label)
    glyphs = [c for c in components(ink[y0:y1, x0:x1]) if c.height <= 60 and c.top > 0]
    for c in glyphs:
        c.ys += y0
        c.xs += x0
    if not glyphs:
        return [""] * len(ticks)
    first = min(c.top for c in glyphs)
    digit_h = float(np.median([c.height for c in glyphs if c.top <= first + 3] or [10]))
    # the tick labels' row (points and minus signs included), not the axis label below it
    line = [c for c in glyphs if c.top <= first + 0.6 * digit_h or
            (c.height < 0.4 * digit_h and c.bottom <= first + 1.1 * digit_h)]
    pos = np.array([t.pos for t in ticks])
    owned: dict[int, list[Component]] = {}
    for c in line:
        i = int(np.argmin(np.abs(pos - c.cx)))
        if abs(pos[i] - c.cx) <= 2.5 * digit_h:
            owned.setdefault(i, []).append(c)
    return [read_glyphs(owned.get(i, [])) for i in range(len(ticks))]


@dataclass(frozen=True)
class Axis:
    """A linear axis: value = slope * pixel + intercept, from the ticks whose labels read as numbers."""

    slope: float
    intercept: float
    ticks: tuple[float, ...]  #: tick pixel positions
    labels: tuple[str, ...]  #: their labels as read
    residual: float  #: largest |fit - label| over the ticks, in label units

    def value(self, pixel: float) -> float:
        return self.slope * pixel + self.intercept

    def pixel(self, value: float) -> float:
        return (value - self.intercept) / self.slope

    @property
    def values(self) -> tuple[float | None, ...]:
        return tuple(parse_number(s) for s in self.labels)


def calibrate(ticks: Sequence[Tick], labels: Sequence[str], what: str) -> Axis:
    """Least-squares line through (tick pixel, label value); fewer than two numbers or a bad fit is an error."""
    pts = [(t.pos, parse_number(s)) for t, s in zip(ticks, labels)]
    pts = [(p, v) for p, v in pts if v is not None]
    if len(pts) < 2:
        raise SpecReproError(f"{what}: fewer than two tick labels read as numbers ({list(labels)})")
    p, v = np.array(pts).T
    slope, intercept = np.polyfit(p, v, 1)
    resid = float(np.max(np.abs(slope * p + intercept - v)))
    step = float(np.min(np.abs(np.diff(np.sort(v))))) if len(v) > 1 else 1.0
    if resid > 0.25 * step:
        raise SpecReproError(f"{what}: tick labels {list(labels)} do not lie on a line (off by {resid:.3g})")
    return Axis(float(slope), float(intercept), tuple(t.pos for t in ticks), tuple(labels), resid)


# --------------------------------------------------------------------------------------------------------------
# legends


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


# --------------------------------------------------------------------------------------------------------------
# markers: matplotlib's own marker paths rasterised here, matched on a series' colour mask

#: marker shapes a legend sample is compared with (matplotlib's codes)
MARKER_SHAPES = ("o", "s", "D", "d", "*", "^", "v", "<", ">", "P", "X", "p", "h")


@functools.lru_cache(maxsize=None)
def marker_mask(marker: str, size: float, oversample: int = 4) -> tuple[np.ndarray, tuple[int, int]]:
    """(bool raster, (row, col) of the data point) of a filled matplotlib marker ``size`` pixels across.

    A pixel is set when at least half of it lies inside the marker's outline (as an aliased renderer draws
    it); the data point sits at the centre of pixel (row, col).
    """
    from matplotlib.markers import MarkerStyle

    ms = MarkerStyle(marker)
    path = ms.get_path().transformed(ms.get_transform())
    verts = path.vertices * size
    half = int(math.ceil(np.abs(verts).max())) + 1
    n = 2 * half + 1
    sub = (np.arange(n * oversample) + 0.5) / oversample - 0.5 - half  # sub-sample centres, data point at 0
    xx, yy = np.meshgrid(sub, -sub)  # image rows grow downwards, path y upwards
    pts = np.column_stack([xx.ravel(), yy.ravel()])
    from matplotlib.path import Path as MplPath

    inside = np.zeros(len(pts), dtype=bool)
    for poly in path.to_polygons():
        inside |= MplPath(poly * size).contains_points(pts)
    cover = inside.reshape(n, oversample, n, oversample).mean(axis=(1, 3))
    m = cover >= 0.5
    ys, xs = np.nonzero(m)
    m = m[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    return m, (half - int(ys.min()), half - int(xs.min()))


def _dilate(m: np.ndarray, r: int) -> np.ndarray:
    out = np.pad(m, r)
    acc = np.zeros_like(out)
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            if dy * dy + dx * dx <= r * r + r:
                acc |= np.roll(np.roll(out, dy, 0), dx, 1)
    return acc


def _ring(m: np.ndarray, center: tuple[int, int], width: int = 2) -> tuple[np.ndarray, tuple[int, int]]:
    d = _dilate(m, width)
    inner = np.pad(m, width)
    return d & ~inner, (center[0] + width, center[1] + width)


def _fast_len(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n (FFT sizes numpy transforms quickly)."""
    best = 1 << (n - 1).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            q = p35
            while q < n:
                q *= 2
            best = min(best, q)
            p35 *= 3
        p5 *= 5
    return best


class Correlator:
    """Correlations of fixed images with many small templates, sharing the images' transforms.

    ``bank`` caches the templates' transforms across correlators of the same transform shape.
    """

    def __init__(self, images: dict[str, np.ndarray], shape: tuple[int, int], bank: dict | None = None):
        self.size = next(iter(images.values())).shape
        self.shape = shape
        self.bank = {} if bank is None else bank
        self.F = {k: np.fft.rfft2(v.astype(float), self.shape) for k, v in images.items()}

    def centered(self, name: str, t: np.ndarray, center: tuple[int, int], key) -> np.ndarray:
        """S[y, x] = sum of image ``name`` under template ``t`` when its point ``center`` sits at pixel (y, x)."""
        k = (key, self.shape)
        if k not in self.bank:
            self.bank[k] = np.conj(np.fft.rfft2(t.astype(float), self.shape))
        c = np.fft.irfft2(self.F[name] * self.bank[k], self.shape)
        H, W = self.size
        rows = (np.arange(H) - center[0]) % self.shape[0]
        cols = (np.arange(W) - center[1]) % self.shape[1]
        return c[np.ix_(rows, cols)]


@dataclass
class Detection:
    """A marker found in a panel: its data-point pixel and how well its template fits there."""

    y: float
    x: float
    coverage: float  #: share of the template (inside the frame) on the series' colour
    spill: float  #: share of the ring around the template on the series' colour
    visible: float  #: share of the template inside the frame
    size: float

    @property
    def score(self) -> float:
        return self.coverage - self.spill


def _peak_offset(s: np.ndarray, y: int, x: int, axis: int) -> float:
    """Sub-pixel offset of a maximum from a parabola through it and its two neighbours along ``axis``."""
    if axis == 0:
        if y == 0 or y == s.shape[0] - 1:
            return 0.0
        a, b, c = s[y - 1, x], s[y, x], s[y + 1, x]
    else:
        if x == 0 or x == s.shape[1] - 1:
            return 0.0
        a, b, c = s[y, x - 1], s[y, x], s[y, x + 1]
    if not (np.isfinite(a) and np.isfinite(c)):
        return 0.0
    den = a - 2 * b + c
    return float(np.clip(0.5 * (a - c) / den, -0.5, 0.5)) if den < 0 else 0.0


def _inside_counts(interior_rows: tuple[int, int], interior_cols: tuple[int, int], shape: tuple[int, int],
                   t: np.ndarray, center: tuple[int, int]) -> np.ndarray:
    """How many template pixels lie inside a rectangle when the template's point sits at each pixel."""
    H, W = shape
    h, w = t.shape
    P = np.zeros((h + 1, w + 1))
    P[1:, 1:] = np.cumsum(np.cumsum(t, axis=0), axis=1)
    oy = np.arange(H) - center[0]  # image row of the template's first row
    ox = np.arange(W) - center[1]
    r0 = np.clip(interior_rows[0] - oy, 0, h)
    r1 = np.clip(interior_rows[1] - oy, 0, h)
    c0 = np.clip(interior_cols[0] - ox, 0, w)
    c1 = np.clip(interior_cols[1] - ox, 0, w)
    return (P[r1[:, None], c1[None, :]] - P[r0[:, None], c1[None, :]] - P[r1[:, None], c0[None, :]]
            + P[r0[:, None], c0[None, :]])


def score_maps(corr: Correlator, marker: str, size: float, pad: int):
    """(coverage, spill, visible) maps of one marker shape and size.

    ``corr`` holds the series' colour mask ('mask', zero outside the frame), whose interior is the crop less
    ``pad`` pixels on every side.
    """
    t, c = marker_mask(marker, size)
    r, rc = _ring(t, c)
    H, W = corr.size
    inner = ((pad, H - pad), (pad, W - pad))
    key = (marker, size, H, W, pad)
    if key not in corr.bank:
        corr.bank[key] = (_inside_counts(*inner, (H, W), t, c), _inside_counts(*inner, (H, W), r, rc))
    vis, rvis = corr.bank[key]
    cov = corr.centered("mask", t, c, (marker, size, "t")) / np.maximum(vis, 1)
    spill = corr.centered("mask", r, rc, (marker, size, "r")) / np.maximum(rvis, 1)
    return cov, spill, vis / t.sum()


def markers_at(corr: Correlator, marker: str, size: float, columns: Sequence[float], pad: int = 16,
               min_coverage: float = 0.6) -> list[Detection | None]:
    """The best fit of the marker within half a marker of each of ``columns`` (None where nothing fits).

    ``corr`` holds the series' colour mask ('mask', zero outside the frame, which is the crop less ``pad``).
    """
    cov, spill, vis = score_maps(corr, marker, size, pad)
    score = np.where((cov >= min_coverage) & (vis >= 0.5), cov - spill, -np.inf)
    half = max(2, int(round(0.5 * size)))
    out: list[Detection | None] = []
    for col in columns:
        c0 = max(0, int(round(col)) - half)
        band = score[:, c0:int(round(col)) + half + 1]
        if band.size == 0 or not np.isfinite(band).any():
            out.append(None)
            continue
        y, dx = np.unravel_index(int(np.argmax(band)), band.shape)
        x = c0 + int(dx)
        out.append(Detection(y + _peak_offset(score, y, x, 0), x + _peak_offset(score, y, x, 1),
                             float(cov[y, x]), float(spill[y, x]), float(vis[y, x]), size))
    return out


# --------------------------------------------------------------------------------------------------------------
# figures of markers on lines


@dataclass(frozen=True)
class Layout:
    """What the image cannot say: which panel is which subject, which legend label which series, the key."""

    figure: str  #: "Fig. 10"
    file: str  #: image file name
    kind: str  #: "markers" or "bars"
    panels: tuple[tuple[dict, ...], ...]  #: rows of panels (left to right), each {"panel": "a", <key fields>}
    series: dict  #: legend label -> {<key fields>}
    key: str  #: metric key template over the panel's, the series' fields, {x} and {traceset}
    quantity: str = "speedup"


@dataclass
class _Panel:
    frame: Frame
    fields: dict
    xaxis: Axis
    yaxis: Axis
    box: tuple[int, int, int, int]  #: (top, bottom, left, right) of the crop read (frame interior + pad)
    interior: np.ndarray


PAD = 16


def _panel(pic: Picture, frame: Frame, fields: dict, figure: str) -> _Panel:
    what = f"{figure} panel ({fields.get('panel', '?')})"
    ty, tx = find_ticks(pic, frame, "y"), find_ticks(pic, frame, "x")
    yaxis = calibrate(ty, tick_labels(pic, frame, "y", ty), f"{what} y axis")
    xlabels = tick_labels(pic, frame, "x", tx)
    try:
        xaxis = calibrate(tx, xlabels, f"{what} x axis")
    except SpecReproError:  # categories: the tick positions themselves, labels as read
        xaxis = Axis(math.nan, math.nan, tuple(t.pos for t in tx), tuple(xlabels), math.nan)
    t0, b0, l0, r0 = frame.inner
    box = (t0 - PAD, b0 + PAD, l0 - PAD, r0 + PAD)
    interior = np.zeros((box[1] - box[0], box[3] - box[2]), dtype=bool)
    interior[PAD:-PAD, PAD:-PAD] = True
    return _Panel(frame, fields, xaxis, yaxis, box, interior)


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


# --------------------------------------------------------------------------------------------------------------
# bar charts (Fig. 3)

#: a bar is read when it is at least this many pixels tall (its top edge found to a pixel: <= 7 % off)
MIN_BAR_PX = 15


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


def _bars(pic: Picture, box: tuple[int, int, int, int], rgb, baseline: float, avoid=()) -> list[dict]:
    """Bars of one colour standing on ``baseline`` inside ``box``: centre column, top edge row, height."""
    t0, b0, l0, r0 = box
    m = color_mask(pic.rgb[t0:b0, l0:r0], rgb, min_alpha=0.8, min_cos=0.995) if max(rgb) - min(rgb) > 0.05 else \
        (np.abs(pic.rgb[t0:b0, l0:r0] - np.asarray(rgb)).max(axis=2) < 0.06)
    for (top, bottom, left, right) in avoid:
        m[max(0, top - t0):max(0, bottom - t0 + 1), max(0, left - l0):max(0, right - l0 + 1)] = False
    out = []
    for c in components(m, min_pixels=6):
        if c.width < 4 or abs(t0 + c.bottom - baseline) > 3:
            continue
        tops = []
        for x in range(c.left + c.width // 4, c.right - c.width // 4 + 1):
            col = c.ys[c.xs == x]
            if len(col) == 0:
                continue
            y = t0 + int(col.min())
            # a dark edge drawn round the bar sits on its fill: the bar's top is the edge's darkness-weighted
            # centre (antialiased edges included); without an edge, the fill's top
            fill_dark = float(pic.dark[y + 1, l0 + x]) if y + 1 < pic.dark.shape[0] else 0.0
            rows = np.arange(max(0, y - 5), y + 1)
            w = np.clip(pic.dark[rows, l0 + x] - fill_dark - 0.15, 0.0, None)
            tops.append(float(np.sum(rows * w) / np.sum(w)) if w.sum() > 0.3 else y - 0.5)
        if tops:
            out.append({"x": l0 + c.cx, "top": float(np.median(tops)), "width": c.width, "edge": True})
    return out


def read_bars(pic: Picture, layout: Layout, traceset: str = "") -> pd.DataFrame:
    """One row per bar (throughput as read) and per speculative bar its speedup over the "none" bar."""
    frames = find_frames(pic, min_size=25, fill=0.4)

    def inside(a: Frame, b: Frame) -> bool:
        return a is not b and a.top > b.top and a.bottom < b.bottom and a.left > b.left and a.right < b.right

    main = [f for f in frames if not any(inside(f, g) for g in frames)]
    grid = grid_order(main)
    shape = [len(r) for r in layout.panels]
    if [len(r) for r in grid] != shape:
        raise SpecReproError(f"{layout.file}: found axes frames in rows of {[len(r) for r in grid]}, expected {shape}")
    rows = []
    for fields, frame in [(f, fr) for r, g in zip(layout.panels, grid) for f, fr in zip(r, g)]:
        panel = _panel(pic, frame, fields, layout.figure)
        insets = [g for g in frames if inside(g, frame)]
        avoid = [(g.top - 2, g.bottom + 2, g.left - 2, g.right + 2) for g in insets]
        legend = read_patch_legend(pic, frame, [k for k in layout.series], avoid)
        lbox = [(c.top + frame.inner[0] - 3, c.bottom + frame.inner[0] + 3, c.left + frame.inner[2] - 3,
                 c.right + frame.inner[2] + 3) for _, c in legend]
        base = panel.yaxis.pixel(0.0)
        t0, b0, l0, r0 = frame.inner
        readings = []  # (axes, series, x label, value, height px, px per unit)
        for s, _ in legend:
            groups: dict[int, list[dict]] = {}
            for bar in _bars(pic, (t0, b0, l0, r0), s.rgb, b0 - 1, avoid + lbox):
                k = int(np.argmin([abs(bar["x"] - tp) for tp in panel.xaxis.ticks]))
                groups.setdefault(k, []).append(bar)
            for k, bars in sorted(groups.items()):
                # one bar per series and group; pieces of one bar (cut by a line drawn over it) share a top
                tops = [b["top"] for b in bars]
                top = float(np.median(tops)) if max(tops) - min(tops) <= 1.0 else math.nan
                readings.append(("main", s.label, panel.xaxis.labels[k], panel.yaxis.value(top),
                                 base - top, abs(1 / panel.yaxis.slope)))
        for g in insets:
            ty = find_ticks(pic, g, "y")
            try:
                ax = calibrate(ty, tick_labels(pic, g, "y", ty), f"{layout.figure} inset")
            except SpecReproError:
                continue
            it0, ib0, il0, ir0 = g.inner
            vals = {}
            for s, _ in legend:
                bs = _bars(pic, (it0, ib0, il0, ir0), s.rgb, ib0 - 1)
                if len(bs) == 1:
                    vals[s.label] = (ax.value(bs[0]["top"]), ax.pixel(0.0) - bs[0]["top"], abs(1 / ax.slope))
            # the inset magnifies the bar group whose main-axis values it repeats (to a main-axis pixel)
            best = None
            for xl in dict.fromkeys(r[2] for r in readings):
                main_vals = {r[1]: r[3] for r in readings if r[2] == xl and r[0] == "main"}
                common = [lab for lab in vals if lab in main_vals]
                if len(common) < 2:
                    continue
                err = max(abs(vals[lab][0] - main_vals[lab]) / abs(panel.yaxis.slope) for lab in common)
                if err <= 2.0 and (best is None or err < best[1]):
                    best = (xl, err)
            if best:
                for lab, (v, h, ppu) in vals.items():
                    readings.append(("inset", lab, best[0], v, h, ppu))
        for axes, lab, xl, v, h, ppu in readings:
            cfg = layout.series[lab]
            f = {**fields, **cfg, "x": xl, "traceset": traceset}
            ok = bool(h >= MIN_BAR_PX)
            why = "" if ok else ("pieces of different heights: not one bar" if h != h else f"bar under {MIN_BAR_PX} px")
            rows.append({"figure": layout.figure, "panel": fields.get("panel", ""), "series": lab, "x": xl,
                         "axes": axes, "quantity": "throughput",
                         "key": layout.key.format(**{**f, "quantity": "throughput"}),
                         "read": v, "bar_px": h, "px_per_unit": ppu, "readable": ok, "why": why})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    # speedups: each speculative bar over the "none" bar of its group, on the same axes
    base_label = next(lab for lab, cfg in layout.series.items() if cfg.get("config") == "none")
    extra = []
    for (panel, x, axes), g in df.groupby(["panel", "x", "axes"], sort=False):
        nb = g[g["series"] == base_label]
        if len(nb) != 1:
            continue
        nb = nb.iloc[0]
        for r in g[g["series"] != base_label].itertuples(index=False):
            row = r._asdict()
            cfg = layout.series[r.series]
            f = {**dict(next(p for rr in layout.panels for p in rr if p.get("panel") == panel)), **cfg, "x": x,
                 "traceset": traceset, "quantity": "speedup"}
            row.update(quantity="speedup", key=layout.key.format(**f), read=r.read / nb.read,
                       bar_px=min(r.bar_px, nb.bar_px), readable=bool(r.readable and nb.readable),
                       why="" if r.readable and nb.readable else f"a bar under {MIN_BAR_PX} px")
            extra.append(row)
    df = pd.concat([df, pd.DataFrame(extra)], ignore_index=True)
    # where the inset and the main axes show one bar, the finer scale is the reading
    df["preferred"] = df.groupby("key")["px_per_unit"].transform("max") == df["px_per_unit"]
    return df


# --------------------------------------------------------------------------------------------------------------
# the paper's figures, and the registry


def _grid(letters: str, rows: Sequence[Sequence[dict]]) -> tuple[tuple[dict, ...], ...]:
    it = iter(letters)
    return tuple(tuple({"panel": next(it), **p} for p in r) for r in rows)


_SIM_DATASETS = ("instructcoder", "sharegpt", "gsm8k", "cnn")
_ENGINE_DATASETS = ("gsm8k", "cnn", "sharegpt", "instructcoder")

#: the paper's figures this module reads: what each panel and legend label stands for
FIGURES: dict[str, Layout] = {
    "fig10": Layout(
        "Fig. 10", "paper-fig10.png", "markers",
        panels=_grid("abcdefgh", [[{"dataset": d, "proposer": p} for d in _SIM_DATASETS] for p in ("ngram", "eagle")]),
        series={"k=1": {"policy": "fixed-1"}, "k=3": {"policy": "fixed-3"}, "k=5": {"policy": "fixed-5"},
                "Oracle": {"policy": "oracle"}},
        key="sim.{traceset}.{dataset}.{proposer}.{policy}.b{x}"),
    "fig12": Layout(
        "Fig. 12", "paper-fig12.png", "markers",
        panels=_grid("abcd", [[{"dataset": d} for d in _SIM_DATASETS]]),
        series={**{f"k={k}_N-gram": {"proposer": "ngram", "policy": f"fixed-{k}"} for k in (1, 3, 5)},
                "Oracle_N-gram": {"proposer": "ngram", "policy": "oracle"},
                **{f"k={k}_Eagle": {"proposer": "eagle", "policy": f"fixed-{k}"} for k in (1, 3, 5)},
                "Oracle_Eagle": {"proposer": "eagle", "policy": "oracle"},
                "Oracle_Combine": {"proposer": "combined", "policy": "oracle"}},
        key="sim.{traceset}.{dataset}.{proposer}.{policy}.b{x}"),
    "fig1": Layout(
        "Fig. 1", "paper-fig1.png", "markers",
        panels=_grid("abcdefghijkl", [[{"exp": e, "dataset": d} for d in _ENGINE_DATASETS]
                                      for e in ("llama3.1-8b", "llama3-70b", "qwen3-8b")]),
        series={"N-gram-Fixed-3": {"config": "ngram-k3"}, "N-gram-Fixed-5": {"config": "ngram-k5"},
                "EAGLE": {"config": "eagle-k3"}, "EAGLE-3": {"config": "eagle3-k3"},
                "Draft Model": {"config": "draft_model-k3"}},
        key="engine.{exp}.{dataset}.{config}.speedup.b{x}"),
    "fig3": Layout(
        "Fig. 3", "paper-fig3.png", "bars",
        panels=_grid("abcdefgh", [[{"exp": "qwen3-8b-thinking", "dataset": d} for d in _ENGINE_DATASETS],
                                  [{"exp": "qwen3-8b-thinking", "dataset": "aime"},
                                   {"exp": "qwen3-8b-thinking", "dataset": "gpqa"},
                                   {"exp": "glm-4.5-air", "dataset": "aime"},
                                   {"exp": "glm-4.5-air", "dataset": "gpqa"}]]),
        series={"None": {"config": "none"}, "N-gram": {"config": "ngram-k3"}, "EAGLE-3": {"config": "eagle3-k3"},
                "MTP": {"config": "mtp-k3"}},
        key="engine.{exp}.{dataset}.{config}.{quantity}.b{x}", quantity="throughput"),
}

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

    from ...io import sha256_file

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
    from ...io import sha256_file

    for name, want in sha256.items():
        path = Path(figdir) / name
        if not path.exists():
            raise SpecReproError(f"{path}: figure image not found (paper_figures.dir in the config)")
        got = sha256_file(path)
        if got != want:
            raise SpecReproError(f"{path}: SHA-256 {got} differs from paper_figures.files[{name}] = {want}: "
                                 "use the paper's own figure image or correct the checksum")


def add_cli(sub) -> None:
    p = sub.add_parser("digitise", help="read the paper's figure images (markers, bars) independently")
    p.add_argument("--figures", required=True, help="folder with the paper's paper-fig<N>.png images")
    p.add_argument("--sha256", nargs="+", required=True, metavar="FILE=HEX",
                   help="images to read, each with its SHA-256 (only figures with a layout in FIGURES)")
    p.add_argument("--traceset", default="", help="trace set named in the simulator figures' metric keys")
    p.add_argument("-o", "--output", required=True, help="readings (CSV, one row per marker or bar)")

    def run(a):
        import sys

        from ...io import write_csv

        want = {}
        for item in a.sha256:
            name, sep, hexd = item.partition("=")
            if not sep or not re.fullmatch(r"[0-9a-f]{64}", hexd):
                raise SpecReproError(f"--sha256 {item!r}: expected FILE=<64 hex digits>")
            want[name] = hexd
        by_file = {lay.file: key for key, lay in FIGURES.items()}
        unknown = sorted(set(want) - set(by_file))
        if unknown:
            raise SpecReproError(f"no layout for {', '.join(unknown)} (known: {', '.join(sorted(by_file))})")
        verify_images(a.figures, want)
        names = [key for key, lay in FIGURES.items() if lay.file in want]
        df = digitise_figures(a.figures, names, a.traceset)
        write_csv(a.output, df, float_format="%.6g")
        for fig, g in df.groupby("figure", sort=False):
            print(f"{fig}: {int(g['read'].notna().sum())} markers/bars read, {int(g['readable'].sum())} readable",
                  file=sys.stderr)

    p.set_defaults(func=run)
