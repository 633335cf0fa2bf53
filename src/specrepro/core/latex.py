"""LaTeX helpers: escaping text for tables and the report, and whole numbers as their cells and sentences print them."""

from __future__ import annotations

_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    # pdflatex's T1 fonts lack these glyphs as text characters
    "±": r"$\pm$",
    "²": r"$^2$",
    "×": r"$\times$",
    "≤": r"$\le$",
    "≥": r"$\ge$",
    "≈": r"$\approx$",
    "→": r"$\rightarrow$",
    "−": r"$-$",
    "…": r"\ldots{}",
}


def whole(v: float, sign: bool = False) -> str:
    """``v`` rounded to a whole number, with its sign where ``sign`` (``+3``, ``-2``); one that rounds to nothing is
    ``0``, never ``-0`` or ``+0`` (a cell's sign must agree with the counts printed beside it)."""
    n = round(v)
    return f"{n:+d}" if sign and n else f"{n:d}"


def tex_escape(text: object) -> str:
    """Escape LaTeX special characters in plain text."""
    return "".join(_TEX.get(c, c) for c in str(text))


def tex_breakable(text: object) -> str:
    """Escaped text that may break after '-', '.', '_' and '/' (long identifiers in narrow columns)."""
    out = tex_escape(text)
    for sep in ("-", ".", "/", r"\_"):
        out = out.replace(sep, sep + r"\allowbreak{}")
    return out


def fit_width(tabular: list[str]) -> list[str]:
    """A tabular's lines, scaled down to the text width where it is wider (its columns come from the run's
    models, methods and datasets, so no fixed width fits every run); never scaled up. Not indented when scaled:
    a paragraph's indent would push the full-width box past the margin."""
    return [r"\ifdefined\fitwidthbox\else\newsavebox{\fitwidthbox}\fi",
            r"\sbox{\fitwidthbox}{%", *tabular, "}%",
            r"\ifdim\wd\fitwidthbox>\linewidth\noindent\resizebox{\linewidth}{!}{\usebox{\fitwidthbox}}"
            r"\else\usebox{\fitwidthbox}\fi"]


def tabular_per_group(head: list[str], groups) -> list[str]:
    """One tabular per group of body rows, each opened by ``head`` (its ``\\begin{tabular}``, ``\\toprule``, header
    row and ``\\midrule``) and closed, separated by ``\\medskip``: the report sets a file of several tabulars in the
    text's flow, breaking between them, where one tall tabular would be scaled to the page below 7 pt."""
    lines: list[str] = []
    for body in groups:
        if lines:
            lines += ["", r"\medskip"]
        lines += [*head, *body, r"\bottomrule", r"\end{tabular}"]
    return lines


def grouped_rows(rows, key: str, lines: list):
    """(group label, row) per row: the label only on a group's first row, ``\\addlinespace`` between groups."""
    prev = None
    for r in rows:
        g = getattr(r, key)
        if prev is not None and g != prev:
            lines.append(r"\addlinespace")
        yield (tex_breakable(g) if g != prev else ""), r
        prev = g
