"""Bar charts (Fig. 3): each series' bars read from the centre of their top edge, the magnified insets too, and each
speculative bar's speedup over its group's "none" bar."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...core.io import SpecReproError
from .axes import Frame, calibrate, find_frames, find_ticks, grid_order, tick_labels
from .image import Picture, color_mask, components
from .layouts import Layout, _panel
from .legend import read_patch_legend


#: a bar is read when it is at least this many pixels tall (its top edge found to a pixel: <= 7 % off)
MIN_BAR_PX = 15


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
