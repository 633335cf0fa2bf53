"""Layout checks of the report and its figures: what a reader would see as cut, blank or overprinted.

- :func:`overfull_boxes`: LaTeX's ``Overfull \\hbox`` warnings (a line or table wider than the text block).
- :func:`page_fill` / :func:`sparse_pages`: how much of each PDF page's text block holds text or a figure.
- :func:`small_text`: text of the report's own pages (tables, captions; not the figures drawn inside them) set
  below :data:`MIN_TEXT_PT`, e.g. a wide table scaled down to the text width.
- :func:`text_overlaps`: pairs of texts (titles, labels, tick labels, legends) of one matplotlib figure that
  are drawn over each other.
- :data:`MIN_REQUESTS`: a per-request figure (:data:`PER_REQUEST`) of fewer requests per dataset is left out of the
  report (the workflow's ``report_figures``; the report says so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .uncertainty import MIN_INTERVAL_REQUESTS

#: LaTeX warns of every box wider than its line by any amount; a reader sees more than a point or so
OVERFULL_LIMIT_PT = 1.0
#: a page whose text block holds less than this share of content (and no figure) is a page a reader skips
MIN_PAGE_FILL = 0.1
#: a page is a figure page when it shows a figure at least this share of its text block high
FIGURE_PAGE_SHARE = 0.2

#: smallest text a reader reads in a table: LaTeX's \\scriptsize of a 10 pt document (6.97 pt); \\tiny (5 pt) or a
#: table scaled down to fit falls below it
MIN_TEXT_PT = 6.8
#: texts of at most this many characters are left out of the check: super- and subscripts (R², x_k) are smaller
SHORT_TEXT = 2

#: the per-request figures: one row or box per request of a dataset
PER_REQUEST = ("fig05_acceptance_heatmap", "fig11_acceptance_diff", "fig07_request_span")
#: fewest requests per dataset a per-request figure in the report shows (with fewer it shows nothing); also the
#: fewest an interval printed as a 95 % interval rests on (specrepro.core.uncertainty.MIN_INTERVAL_REQUESTS)
MIN_REQUESTS = MIN_INTERVAL_REQUESTS

_OVERFULL = re.compile(r"^Overfull \\hbox \(([0-9.]+)pt too wide\)(.*)$")


def overfull_boxes(log_text: str, limit_pt: float = OVERFULL_LIMIT_PT) -> list[tuple[float, str]]:
    """``(points too wide, where)`` of every ``Overfull \\hbox`` in a LaTeX log wider than ``limit_pt``."""
    out = []
    for line in log_text.splitlines():
        m = _OVERFULL.match(line.strip())
        if m and float(m.group(1)) > limit_pt:
            out.append((float(m.group(1)), m.group(2).strip()))
    return out


def label_page(aux_text: str, label: str) -> int | None:
    """The page LaTeX put ``\\label{label}`` on, from the ``.aux`` file (hyperref's or plain ``\\newlabel``)."""
    m = re.search(r"\\newlabel\{" + re.escape(label) + r"\}\{\{[^{}]*\}\{(\d+)\}", aux_text)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class PageFill:
    """Content of one PDF page: characters of text, the share of the text block's height that text or
    figures span, and the tallest figure's share of that height."""

    page: int  #: 1-based
    chars: int
    fill: float
    figure: float

    @property
    def figure_page(self) -> bool:
        return self.figure >= FIGURE_PAGE_SHARE


def _text_block(page, margin_pt: float) -> tuple[float, float]:
    """(bottom, top) of the text block: the page less its top and bottom margins (header, page number)."""
    box = page.mediabox
    return float(box.bottom) + margin_pt, float(box.top) - margin_pt


def page_fill(pdf: str | Path, margin_pt: float = 56.9) -> list[PageFill]:
    """Per page, how much of its text block (the page less ``margin_pt``, default 2 cm, top and bottom, where
    only the page number sits) holds text or included figures: the vertical span of content, as a share of
    the text block's height, and of the tallest figure (a form or image XObject) alone."""
    import logging

    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # it warns of image streams it does not decode for text
    out = []
    reader = PdfReader(str(pdf))
    for i, page in enumerate(reader.pages, 1):
        low, high = _text_block(page, margin_pt)
        spans: list[tuple[float, float]] = []
        figures: list[float] = []
        chars = 0

        def on_text(text, cm, tm, font, size):
            nonlocal chars
            if not text.strip():
                return
            # baseline in page space: the text matrix, then the current transformation matrix
            x, y = tm[4], tm[5]
            y = cm[1] * x + cm[3] * y + cm[5]
            scale = abs(cm[3] * tm[3]) or 1.0
            height = (size or 10) * scale
            if low - 1 <= y <= high + 1:
                chars += len(text.strip())
                spans.append((y - 0.25 * height, y + 0.75 * height))

        def on_op(op, args, cm, tm):
            if op != b"Do" or not args:
                return
            # an XObject drawn through the CTM: a form's BBox, an image's unit square
            xo = page["/Resources"]["/XObject"][args[0]].get_object()
            if xo.get("/Subtype") == "/Form":
                x0, y0, x1, y1 = (float(v) for v in xo["/BBox"])
            else:
                x0, y0, x1, y1 = 0.0, 0.0, 1.0, 1.0
            ys = [cm[1] * x + cm[3] * y + cm[5] for x in (x0, x1) for y in (y0, y1)]
            bottom, top = max(min(ys), low), min(max(ys), high)
            if top > bottom:
                spans.append((bottom, top))
                figures.append((top - bottom) / (high - low))

        page.extract_text(visitor_text=on_text, visitor_operand_before=on_op)
        out.append(PageFill(i, chars, _covered(spans, low, high) / (high - low), max(figures, default=0.0)))
    return out


def small_text(pdf: str | Path, min_pt: float = MIN_TEXT_PT) -> list[tuple[int, float, str]]:
    """``(page, size in pt, text)`` of every piece of text on the PDF's pages set smaller than ``min_pt``: its font
    size times the text and transformation matrices' vertical scale (a table shrunk by ``\\resizebox`` counts at
    its printed size). Text inside a form XObject (an included figure) is left out: figures have their own checks;
    so are texts of at most SHORT_TEXT characters (super- and subscripts)."""
    import logging

    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    out: list[tuple[int, float, str]] = []
    for i, page in enumerate(PdfReader(str(pdf)).pages, 1):
        depth = [0]

        def before(op, args, cm, tm):
            if op == b"Do":
                depth[0] += 1

        def after(op, args, cm, tm):
            if op == b"Do":
                depth[0] -= 1

        def on_text(text, cm, tm, font, size, page_no=i):
            pt = (size or 0) * abs(cm[3] * tm[3])
            if len(text.strip()) > SHORT_TEXT and not depth[0] and 0 < pt < min_pt:
                out.append((page_no, round(pt, 2), text.strip()))

        page.extract_text(visitor_text=on_text, visitor_operand_before=before, visitor_operand_after=after)
    return out


def _covered(spans: list[tuple[float, float]], low: float, high: float) -> float:
    """Length of the union of ``spans`` clipped to [low, high]."""
    total, end = 0.0, low
    for a, b in sorted((max(a, low), min(b, high)) for a, b in spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def sparse_pages(pdf: str | Path, min_fill: float = MIN_PAGE_FILL) -> list[PageFill]:
    """Pages whose text block holds less than ``min_fill`` of content and no figure (blank or near-blank)."""
    return [p for p in page_fill(pdf) if p.fill < min_fill and not p.figure_page]


def _drawn_tick_labels(fig) -> tuple[set[int], set[int]]:
    """(ids of every tick label, ids of those drawn): matplotlib keeps labels of ticks outside the view."""
    every, drawn = set(), set()
    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                every.update((id(tick.label1), id(tick.label2)))
            for tick in axis._update_ticks():  # the ticks draw() draws (inside the view limits)
                drawn.update(id(t) for t in (tick.label1, tick.label2) if t.get_visible())
    return every, drawn


def _outline(t, renderer):
    """The four corners (display units) of a text's box as drawn: for a rotated text, its unrotated box turned by
    its angle and placed where matplotlib puts it (its axis-aligned extent is that of the turned box)."""
    import numpy as np

    ext = t.get_window_extent(renderer)
    angle = t.get_rotation() % 360
    if angle % 90 == 0:
        return np.array([(ext.x0, ext.y0), (ext.x1, ext.y0), (ext.x1, ext.y1), (ext.x0, ext.y1)])
    t.set_rotation(0)
    flat = t.get_window_extent(renderer)
    t.set_rotation(angle)
    a = np.deg2rad(angle)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    corners = np.array([(0, 0), (flat.width, 0), (flat.width, flat.height), (0, flat.height)]) @ rot.T
    return corners - corners.min(axis=0) + (ext.x0, ext.y0)


def _overlap(p, q) -> float:
    """How deep two convex polygons overlap (0 when apart): the least overlap of their projections on the
    edge normals of both (separating axis theorem)."""
    import numpy as np

    depth = np.inf
    for poly in (p, q):
        for i in range(len(poly)):
            edge = poly[(i + 1) % len(poly)] - poly[i]
            n = np.array([-edge[1], edge[0]]) / (np.hypot(*edge) or 1.0)
            a, b = p @ n, q @ n
            depth = min(depth, min(a.max(), b.max()) - max(a.min(), b.min()))
            if depth <= 0:
                return 0.0
    return float(depth)


def text_overlaps(fig, tolerance_pt: float = 0.5) -> list[tuple[str, str]]:
    """Pairs of visible texts of a drawn matplotlib figure whose boxes (rotated texts: turned boxes) overlap by
    more than ``tolerance_pt`` (titles printed over each other, crowded tick labels or annotations)."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()
    every, drawn = _drawn_tick_labels(fig)
    tol = tolerance_pt * fig.dpi / 72.0
    boxes = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip() or (id(t) in every and id(t) not in drawn):
            continue
        if id(t) not in every and not _drawn_inside_clip(t, renderer):
            continue
        boxes.append((t.get_text(), t.get_window_extent(renderer), _outline(t, renderer)))
    out = []
    for i, (ta, a, pa) in enumerate(boxes):
        for tb, b, pb in boxes[i + 1:]:
            if min(a.x1, b.x1) - max(a.x0, b.x0) > tol and min(a.y1, b.y1) - max(a.y0, b.y0) > tol \
                    and _overlap(pa, pb) > tol:
                out.append((ta, tb))
    return out


def _drawn_inside_clip(t, renderer) -> bool:
    """Whether a text is (partly) inside its clip box, if it has one (text placed outside an axes' data area
    with clipping on is not drawn)."""
    box = t.get_clip_box() if t.get_clip_on() else None
    return box is None or t.get_window_extent(renderer).overlaps(box)
