"""Axes: the frames (long dark lines joined into rectangles) in the figure's grid, their tick marks (short dark
lines outside the frame, centred by their darkness), the tick labels read glyph by glyph against DejaVu Sans digits
rendered here (matplotlib's default font, the paper's), and the calibration pixel <-> value."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...core.io import SpecReproError
from .image import Component, Picture, _runs, components


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
