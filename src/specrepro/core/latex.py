"""LaTeX helpers: escaping text for tables and the report."""

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


def tex_escape(text: object) -> str:
    """Escape LaTeX special characters in plain text."""
    return "".join(_TEX.get(c, c) for c in str(text))


def tex_breakable(text: object) -> str:
    """Escaped text that may break after '-', '.', '_' and '/' (long identifiers in narrow columns)."""
    out = tex_escape(text)
    for sep in ("-", ".", "/", r"\_"):
        out = out.replace(sep, sep + r"\allowbreak{}")
    return out


def grouped_rows(rows, key: str, lines: list):
    """(group label, row) per row: the label only on a group's first row, ``\\addlinespace`` between groups."""
    prev = None
    for r in rows:
        g = getattr(r, key)
        if prev is not None and g != prev:
            lines.append(r"\addlinespace")
        yield (tex_breakable(g) if g != prev else ""), r
        prev = g
