"""Image primitives: a figure image as RGB in [0, 1], its ink and text masks, connected components and colour
masks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ...core.io import SpecReproError


#: a pixel is "ink" (spines, ticks) when its brightest channel is below this
INK = 0.45

#: ... and part of a glyph when below this (thin antialiased strokes are grey)
TEXT_INK = 0.7


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
