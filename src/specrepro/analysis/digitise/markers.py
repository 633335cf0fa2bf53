"""Markers: matplotlib's own marker paths rasterised here, matched on a series' colour mask (coverage of the
template minus the share of a ring around it on that colour), and the thresholds of a readable marker."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


#: a marker is readable when this share of its template lies on its colour
MIN_COVERAGE = 0.85

#: ... and at most this share of the ring around the template does
MAX_SPILL = 0.35

#: where markers of one colour overlap, the shape that fits must score this much better than the others
SHAPE_MARGIN = 0.1


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
