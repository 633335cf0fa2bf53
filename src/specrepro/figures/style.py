"""One look for every figure: fixed fonts, sizes, colours; deterministic vector PDFs."""

from __future__ import annotations

import os
from pathlib import Path

from ..jobspec import METHOD_LABELS as _ENGINE_METHOD_LABELS

import matplotlib

matplotlib.use("Agg")  # no display; identical output everywhere

import matplotlib.pyplot as plt  # noqa: E402

from ..core.io import SpecReproError, atomic_path  # noqa: E402
from ..core.layout import text_overlaps  # noqa: E402

#: width of a full-width figure in the report (inches)
FULL_WIDTH = 7.0

RC = {
    "font.family": "DejaVu Sans",  # ships with matplotlib: same glyphs on every machine
    "font.size": 7,
    "axes.titlesize": 7.5,
    "axes.labelsize": 7,
    "xtick.labelsize": 6.5,
    "ytick.labelsize": 6.5,
    "legend.fontsize": 6.5,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.2,
    "pdf.fonttype": 42,  # embed TrueType: text stays text in the PDF
    "ps.fonttype": 42,
    "savefig.dpi": 300,
    "image.interpolation": "nearest",
    "svg.hashsalt": "specrepro",
    "path.simplify": False,
}

#: method colours, the paper's assignment (Fig. 7): EAGLE orange, EAGLE-3 green, n-gram blue, draft purple
METHOD_COLORS = {
    "ngram": "#4C8DC4",
    "eagle": "#F5A05A",
    "eagle3": "#66B565",
    "draft_model": "#A98BCF",
    "mtp": "#D9676B",
    "combined": "#C0392B",
    "none": "#7F7F7F",
    "suffix": "#8C564B",
}

METHOD_LABELS = {**_ENGINE_METHOD_LABELS, "combined": "Oracle Combine"}


def method_color(key: str) -> str:
    return METHOD_COLORS.get(key, "#555555")


def dataset_row(n: int, height: float):
    """A full-width figure with one panel per dataset: ``(fig, axes)`` with ``axes`` a list of ``n``."""
    fig, axes = plt.subplots(1, n, figsize=(FULL_WIDTH, height), squeeze=False, constrained_layout=True)
    return fig, list(axes[0])


def figure_note(fig, text: str, y: float = -0.01, size: float = 6) -> None:
    """A note under the axes, wrapped to the figure's width: one long line would widen the saved (tight) PDF and so
    shrink the whole figure, its text with it, when the report sets it at the text width."""
    import textwrap

    chars = max(40, int(fig.get_figwidth() * 72 / (0.5 * size)))
    fig.text(0.0, y, "\n".join(textwrap.fill(line, chars, break_on_hyphens=False) for line in str(text).split("\n")),
             ha="left", va="top", fontsize=size, color="#444444")


def panel_title(ax, text: str, **kw) -> None:
    """``ax.set_title`` with each line wrapped to the panel's width, so titles of neighbouring panels never run
    into each other (long dataset or model labels in narrow panels)."""
    import textwrap

    size = plt.rcParams["axes.titlesize"]
    chars = _panel_chars(ax, size if isinstance(size, (int, float)) else plt.rcParams["font.size"])
    ax.set_title("\n".join(textwrap.fill(line, chars, break_on_hyphens=False) for line in str(text).split("\n")), **kw)


def _panel_chars(ax, size: float, parts: int = 1) -> int:
    """Characters of a ``size``-point text that fit in 1/``parts`` of the panel's width."""
    fig = ax.get_figure()
    spec = ax.get_subplotspec()
    # the panel's share of the figure's width (its columns of the grid), less the gaps between panels
    share = ((spec.colspan.stop - spec.colspan.start) / spec.get_gridspec().ncols) if spec else ax.get_position().width
    width_pt = 0.9 * share * fig.get_figwidth() * 72 / parts
    return max(6, int(width_pt / (0.55 * size)))  # DejaVu Sans: about 0.55 em a character


def wrap_labels(ax, labels, size: float | None = None) -> list[str]:
    """Tick labels wrapped so that ``len(labels)`` of them fit side by side in the panel's width."""
    import textwrap

    size = size or plt.rcParams["xtick.labelsize"]
    chars = _panel_chars(ax, size if isinstance(size, (int, float)) else plt.rcParams["font.size"], len(labels) or 1)
    return [textwrap.fill(str(x), chars, break_on_hyphens=False) for x in labels]


def apply() -> None:
    """Set the shared rcParams (idempotent)."""
    plt.rcParams.update(RC)


def save_pdf(fig, output: str | os.PathLike) -> None:
    """Save a vector PDF atomically with no timestamps, so identical data give identical bytes; refuse a figure
    whose texts are drawn over each other (:func:`specrepro.core.layout.text_overlaps`)."""
    output = Path(output)
    clash = text_overlaps(fig)
    if clash:
        plt.close(fig)
        a, b = clash[0]
        raise SpecReproError(f"{output.name}: texts drawn over each other: {a!r} and {b!r} ({len(clash)} pair(s));"
                             " shorten them or give the figure more room in its module (specrepro.figures)")
    with atomic_path(output) as tmp:
        fig.savefig(tmp, format="pdf", metadata={"CreationDate": None, "ModDate": None, "Producer": None,
                                                  "Creator": "specrepro"}, bbox_inches="tight", pad_inches=0.02)
    plt.close(fig)
