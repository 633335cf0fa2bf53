"""What the image cannot say (:data:`FIGURES`): which panel of each paper figure is which model and dataset, which
legend label which method, how a metric key is formed; and a panel's calibrated axes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...core.io import SpecReproError
from .axes import Axis, Frame, calibrate, find_ticks, tick_labels
from .image import Picture


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
