#!/usr/bin/env python3
"""Read the plotted values of the paper's Figs. 10 and 12 from their images (provenance of paper/claims.yaml).

    python tools/digitise_sim_figures.py --figures ../shared/reference/figures \
        --summaries results/simulator/h100-llama3.1-8b/paper/*.csv -o paper/digitised/sim_figures.csv

The released simulator writes speedups rounded to two decimals and plots those, so every
marker sits on a 0.01 grid. For each marker this script finds its centre in the image and
maps it to a value with a straight-line fit through the y-axis tick marks:

* oracle stars (dotted lines, so the star is a separate blob): the centroid of the star's
  pixels within one star radius; a star cut by the top of the axes is placed from its
  bottom tips (0.809 radii below the centre);
* fixed-k markers (circle, square, diamond on a thick solid line): the mean of the marker's
  lower edge left of the centre and its upper edge right of it, edges a falling line does
  not reach.

A reading is *readable* when the marker is not hidden by another series (its size is at
least 85% of the series' median) and it lies within 0.35 grid steps of a 0.01 value; it is
*confident* when in addition 0.01 spans at least 1.5 pixels. The simulated values only
centre the search window (+-14 px around the expected pixel); the value read is the
marker's own position.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd

BATCH_SIZES = [1, 8, 16, 32, 64, 128]
DATASETS = ["instructcoder", "sharegpt", "gsm8k", "cnn"]

# Panel geometry of the images (axes frames found from the spines, in pixels) and the y tick values
# (first tick, step) read off the tick labels.
FIG10 = {
    "file": "paper-fig10.png",
    "left": [[216, 658, 1128, 1570], [216, 658, 1114, 1570]],
    "right": [539, 995, 1450, 1906],
    "top": [97, 662],
    "bottom": [500, 1066],
    "ticks": [[(1.0, 0.25), (1.0, 0.1), (0.9, 0.05), (1.0, 0.1)], [(1.2, 0.2)] * 4],
    "rows": ["ngram", "eagle"],
    "series": {"fixed-1": "#1f77b4", "fixed-3": "#ff7f0e", "fixed-5": "#2ca02c", "oracle": "#d62728"},
    "star_radius": 10.8,
}
FIG12 = {
    "file": "paper-fig12.png",
    "left": [[75, 551, 1007, 1463]],
    "right": [433, 889, 1345, 1801],
    "top": [124],
    "bottom": [529],
    "ticks": [[(1.0, 0.5), (1.0, 0.5), (1.0, 0.25), (1.0, 0.25)]],
    "rows": ["combined"],
    "series": {"oracle": "#d62728"},
    "star_radius": 10.2,
}


def runs(idx):
    out = []
    for i in idx:
        if out and i - out[-1][-1] <= 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def rgb(hexc):
    return np.array([int(hexc[i:i + 2], 16) / 255 for i in (1, 3, 5)])


def series_mask(im, color, min_alpha=0.45, min_cos=0.993):
    """Pixels of one series: (1 - pixel) points the way (1 - colour) does, whatever the alpha."""
    v, u = 1.0 - im, 1.0 - color
    mag = np.linalg.norm(v, axis=2)
    cos = (v @ u) / (np.maximum(mag, 1e-9) * np.linalg.norm(u))
    return (cos > min_cos) & (mag > min_alpha * np.linalg.norm(u))


def ticks(gray, line, lo, hi, axis):
    """Centres of the tick marks along a row (x ticks) or a column (y ticks) just outside the frame."""
    prof = gray[lo:hi, line] if axis == "y" else gray[line, lo:hi]
    return [lo + float(np.mean(r)) for r in runs(list(np.nonzero(prof < 0.9)[0]))]


def component(m, y0, x0, rad):
    ys, xs = np.nonzero(m[y0 - rad:y0 + rad + 1, x0 - rad:x0 + rad + 1])
    if ys.size == 0:
        return None
    ys, xs = ys + y0 - rad, xs + x0 - rad
    k = int(np.argmin((ys - y0) ** 2 + (xs - x0) ** 2))
    pts = set(zip(ys.tolist(), xs.tolist()))
    seen, stack = {(ys[k], xs[k])}, [(ys[k], xs[k])]
    while stack:
        y, x = stack.pop()
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                q = (y + dy, x + dx)
                if q in pts and q not in seen:
                    seen.add(q)
                    stack.append(q)
    return np.array(sorted(seen), dtype=float)


def read_star(m, x0, y0, radius, top_row, rad=16):
    comp = component(m, int(round(y0)), int(round(x0)), rad)
    if comp is None:
        return None, 0
    cy, cx = comp[:, 0].mean(), comp[:, 1].mean()
    for _ in range(5):  # drop dots of the dotted line that touch the star
        keep = comp[np.hypot(comp[:, 0] - cy, comp[:, 1] - cx) <= radius + 0.75]
        cy, cx = keep[:, 0].mean(), keep[:, 1].mean()
    if keep[:, 0].min() <= top_row + 1:  # cut by the top of the axes
        cy = keep[:, 0].max() + 0.5 - 0.809 * radius
    return float(cy), float(len(keep))


def read_marker(m, x0, y0, ds=(3, 4, 5), rad=14):
    x0, y0 = int(round(x0)), int(round(y0))
    lows, ups = [], []
    for d in ds:
        for side, store in ((-1, lows), (1, ups)):
            idx = np.nonzero(m[y0 - rad:y0 + rad + 1, x0 + side * d])[0]
            if idx.size == 0:
                continue
            r = min(runs(list(idx)), key=lambda r: 0 if r[0] <= rad <= r[-1] else min(abs(r[0] - rad), abs(r[-1] - rad)))
            store.append(y0 - rad + (r[-1] + 0.5 if side < 0 else r[0] - 0.5))
    if not lows or not ups:
        return None, 0.0
    return (np.mean(lows) + np.mean(ups)) / 2, float(np.mean(lows) - np.mean(ups))


def digitise(fig: dict, figdir: Path, sim: pd.DataFrame, name: str) -> list[dict]:
    im = mpimg.imread(figdir / fig["file"])[..., :3]
    gray = im.mean(axis=2)
    out = []
    for ri, prop in enumerate(fig["rows"]):
        for pi, ds in enumerate(DATASETS):
            l, r, t, b = fig["left"][ri][pi], fig["right"][pi], fig["top"][ri], fig["bottom"][ri]
            ty = sorted(ticks(gray, l - 4, t - 5, b + 6, "y"), reverse=True)
            tx = ticks(gray, b + 4, l - 5, r + 6, "x")
            first, step = fig["ticks"][ri][pi]
            a = np.polyfit(ty, first + step * np.arange(len(ty)), 1)  # value = a0 * y + a1
            assert len(tx) == len(BATCH_SIZES), (name, ds, tx)
            for pol, hexc in fig["series"].items():
                m = series_mask(im, rgb(hexc))
                m[:, :l + 2] = m[:, r - 1:] = False
                m[:t + 2] = m[b - 1:] = False
                s = sim[(sim.dataset == ds) & (sim.proposer == prop) & (sim.policy == pol)].sort_values("batch_size")
                for x, (bs, guess) in zip(tx, zip(s.batch_size, s.speedup)):
                    gy = (guess - a[1]) / a[0]
                    if pol == "oracle":
                        y, size = read_star(m, x, gy, fig["star_radius"], t + 2)
                    else:
                        y, size = read_marker(m, x, gy)
                    out.append({
                        "figure": name, "panel": "abcdefgh"[ri * 4 + pi], "dataset": ds, "proposer": prop,
                        "policy": pol, "batch_size": int(bs), "read": float(np.polyval(a, y)) if y is not None else np.nan,
                        "px_per_0.01": -0.01 / a[0], "marker_size": size,
                    })
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", required=True, help="folder with paper-fig10.png and paper-fig12.png")
    ap.add_argument("--summaries", nargs="+", required=True, help="paper-mode simulator summaries (search centres)")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    sim = pd.concat([pd.read_csv(p) for p in a.summaries], ignore_index=True)
    sim = sim[(sim.batching == "replicate") & (sim.pairing == "index") & (sim.combine_cost == "ngram")]
    df = pd.DataFrame(digitise(FIG10, Path(a.figures), sim, "Fig. 10") + digitise(FIG12, Path(a.figures), sim, "Fig. 12"))
    df["plotted"] = df["read"].round(2)
    df["off_grid_px"] = (df["read"] - df["plotted"]).abs() * df["px_per_0.01"] * 100
    med = df.groupby(["figure", "policy"])["marker_size"].transform("median")
    df["readable"] = (df["marker_size"] >= 0.85 * med) & df["read"].notna() & (df["off_grid_px"] <= 0.35 * df["px_per_0.01"])
    df["confident"] = df["readable"] & (df["px_per_0.01"] >= 1.5)
    Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.output, index=False, float_format="%.5g")
    print(df.groupby(["figure", "readable", "confident"]).size().to_string())


if __name__ == "__main__":
    main()
