"""Reading back what a matplotlib figure plots, for tests that check figures against their data.

A figure module saves through :func:`specrepro.figures.style.save_pdf`; :func:`captured` wraps it so every
:class:`~matplotlib.figure.Figure` saved while it is active is kept (and still saved). The readers return
the data each artist was given, in data coordinates: lines and their markers, horizontal reference lines,
bars, scatter points, images, box plots, error bars and shaded bands (``fill_between``), and text.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
from matplotlib.collections import LineCollection, PathCollection, PolyCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.image import AxesImage
from matplotlib.patches import PathPatch


@contextlib.contextmanager
def captured(monkeypatch):
    """Collect the figures the modules save (``with captured(monkeypatch) as figs: ...``)."""
    from specrepro.figures import style

    figs = []
    original = style.save_pdf

    def save_and_keep(fig, output):
        figs.append(fig)
        original(fig, output)

    monkeypatch.setattr(style, "save_pdf", save_and_keep)
    yield figs
    monkeypatch.setattr(style, "save_pdf", original)


def visible_axes(fig) -> list:
    """The figure's data axes, without colour bars (in creation order)."""
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def _errorbar_artists(ax) -> set:
    out = set()
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer):
            data_line, caps, cols = c.lines
            out.update(caps)
            out.update(cols)
    return out


@dataclass
class Series:
    label: str
    x: np.ndarray
    y: np.ndarray
    color: str
    marker: str
    linestyle: str


def lines(ax) -> list[Series]:
    """Lines drawn in data coordinates (``plot``), not reference lines, error-bar caps or box-plot parts."""
    skip = _errorbar_artists(ax)
    out = []
    for ln in ax.get_lines():
        if ln in skip or ln.get_transform() != ax.transData or ln.get_gid() == "boxplot":
            continue
        x, y = np.asarray(ln.get_xdata(), dtype=float), np.asarray(ln.get_ydata(), dtype=float)
        if len(x) == 0:
            continue
        from matplotlib.colors import to_hex

        out.append(Series(ln.get_label(), x, y, to_hex(ln.get_color()), str(ln.get_marker()), ln.get_linestyle()))
    return out


def series_by_label(ax) -> dict[str, Series]:
    return {s.label: s for s in lines(ax) if not s.label.startswith("_")}


def hlines(ax) -> list[float]:
    """y of the horizontal reference lines across the axes (``axhline``)."""
    out = []
    for ln in ax.get_lines():
        if ln.get_transform() != ax.transData and np.allclose(ln.get_xdata(), [0, 1]):
            y = np.asarray(ln.get_ydata(), dtype=float)
            if np.allclose(y, y[0]):
                out.append(float(y[0]))
    return out


@dataclass
class Bar:
    label: str
    x: float  #: centre
    width: float
    bottom: float
    height: float
    color: tuple


def bars(ax) -> list[Bar]:
    """Every bar of every ``bar`` call, with its container's label."""
    out = []
    for c in ax.containers:
        if isinstance(c, BarContainer):
            for r in c.patches:
                out.append(Bar(c.get_label(), r.get_x() + r.get_width() / 2, r.get_width(), r.get_y(), r.get_height(),
                               tuple(r.get_facecolor())))
    return out


def scatter(ax) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(offsets (n x 2), face colours, edge colours) of each scatter collection in data coordinates."""
    out = []
    for c in ax.collections:
        if isinstance(c, PathCollection) and c.get_offset_transform() == ax.transData:
            out.append((np.asarray(c.get_offsets(), dtype=float), c.get_facecolors(), c.get_edgecolors()))
    return out


def images(ax) -> list[tuple[np.ma.MaskedArray, tuple]]:
    """(array as plotted, extent) of each image."""
    return [(np.ma.masked_invalid(np.ma.asarray(im.get_array(), dtype=float)), tuple(im.get_extent()))
            for im in ax.get_children() if isinstance(im, AxesImage)]


def texts(ax) -> list[tuple[float, float, str]]:
    """(x, y, text) of the texts placed in data coordinates."""
    return [(*t.get_position(), t.get_text()) for t in ax.texts if t.get_transform() == ax.transData]


def boxplot_stats(ax) -> list[dict]:
    """Per box (left to right): whisker ends, box edges and median, as drawn.

    Boxes are the ``PathPatch`` artists (``patch_artist=True``); whiskers the vertical lines at the box's
    centre; the median the horizontal line across it.
    """
    out = []
    patches = [p for p in ax.patches if isinstance(p, PathPatch)]
    vert = [ln for ln in ax.get_lines() if len(ln.get_xdata()) == 2 and np.isclose(*ln.get_xdata())]
    horiz = [ln for ln in ax.get_lines() if len(ln.get_ydata()) == 2 and np.isclose(*ln.get_ydata())]
    for p in patches:
        v = p.get_path().vertices
        x0, x1 = v[:, 0].min(), v[:, 0].max()
        xc = (x0 + x1) / 2
        ys = [y for ln in vert if np.isclose(ln.get_xdata()[0], xc) for y in ln.get_ydata()]
        med = [ln.get_ydata()[0] for ln in horiz
               if np.isclose(min(ln.get_xdata()), x0) and np.isclose(max(ln.get_xdata()), x1)]
        out.append({"x": xc, "low": min(ys), "q1": v[:, 1].min(), "median": med[0] if med else np.nan,
                    "q3": v[:, 1].max(), "high": max(ys)})
    return sorted(out, key=lambda b: b["x"])


@dataclass
class Interval:
    x: float
    low: float
    high: float
    label: str


def error_bars(ax) -> list[Interval]:
    """Vertical error bars as drawn: ``errorbar`` containers and bare vertical line collections (``vlines``)."""
    out = []
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer):
            data_line, caps, cols = c.lines
            for col in cols:
                for seg in col.get_segments():
                    (xa, ya), (xb, yb) = seg[0], seg[-1]
                    if np.isclose(xa, xb):
                        out.append(Interval(float(xa), float(min(ya, yb)), float(max(ya, yb)), c.get_label()))
    for col in ax.collections:
        if isinstance(col, LineCollection) and not any(col in c.lines[2] for c in ax.containers
                                                       if isinstance(c, ErrorbarContainer)):
            for seg in col.get_segments():
                if len(seg) == 2 and np.isclose(seg[0][0], seg[1][0]):
                    out.append(Interval(float(seg[0][0]), float(min(seg[0][1], seg[1][1])),
                                        float(max(seg[0][1], seg[1][1])), col.get_label()))
    return out


def bands(ax) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """(label, x, lower, upper) of each shaded band (``fill_between``), read from its outline."""
    out = []
    for col in ax.collections:
        if isinstance(col, PolyCollection) and not isinstance(col, PathCollection):
            for path in col.get_paths():
                v = path.vertices
                xs = np.unique(np.round(v[:, 0], 12))
                lo = np.array([v[np.isclose(v[:, 0], x), 1].min() for x in xs])
                hi = np.array([v[np.isclose(v[:, 0], x), 1].max() for x in xs])
                out.append((col.get_label(), xs, lo, hi))
    return out


def intervals(ax) -> list[Interval]:
    """Every interval a panel draws: error bars, and bands sampled at their x values."""
    out = list(error_bars(ax))
    for label, xs, lo, hi in bands(ax):
        out += [Interval(float(x), float(a), float(b), label) for x, a, b in zip(xs, lo, hi)]
    return out


def table_intervals(table, x, value: str, offset=None) -> list[tuple[float, float, float]]:
    """(x, low, high) of each row's interval of ``value`` (columns ``<value>_ci_low``/``_ci_high``, or ``ci_low``/
    ``ci_high``); [] when the table has none. ``x`` is a column name or a sequence of plotted positions;
    ``offset`` (per row) is added to both ends, for intervals drawn on top of a stacked bar."""
    for lo, hi in ((f"{value}_ci_low", f"{value}_ci_high"), ("ci_low", "ci_high")):
        if {lo, hi} <= set(table.columns):
            xs = table[x].to_numpy(dtype=float) if isinstance(x, str) else np.asarray(x, dtype=float)
            off = np.zeros(len(table)) if offset is None else np.asarray(offset, dtype=float)
            out = zip(xs, table[lo].to_numpy(dtype=float) + off, table[hi].to_numpy(dtype=float) + off)
            return [(a, b, c) for a, b, c in out if np.isfinite(b) and np.isfinite(c)]
    return []


def assert_intervals(ax, expected, tol: float = 1e-9, all_drawn: bool = False) -> int:
    """Every interval the panel draws (error bars, bands) is one of ``expected`` ((x, low, high), from the
    figure's table); with ``all_drawn``, each expected one is drawn too. Returns how many are drawn."""
    drawn = intervals(ax)
    exp = np.asarray(expected, dtype=float).reshape(-1, 3)
    for iv in drawn:
        hit = (np.isclose(exp[:, 0], iv.x) & np.isclose(exp[:, 1], iv.low, atol=tol)
               & np.isclose(exp[:, 2], iv.high, atol=tol))
        assert hit.any(), f"interval drawn at x={iv.x}: [{iv.low}, {iv.high}] is not the table's"
    if all_drawn:
        assert len(drawn) == len(exp), f"{len(exp)} intervals in the table, {len(drawn)} drawn"
    return len(drawn)
