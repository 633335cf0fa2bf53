"""Damaged result files: found before the run starts, moved aside, and so rebuilt, never plotted.

Outputs are written atomically (:mod:`specrepro.core.io`), so a killed job leaves no half-written file
under its final name; this catches the rest (a full disk, a bad copy, a file edited by hand). The
readers (:func:`specrepro.core.io.read_parquet`, :func:`~specrepro.core.io.read_json`) refuse such files too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

PARQUET_MAGIC = b"PAR1"


def problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not a complete Parquet or JSON file, or None when it is (other types: None)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if path.suffix == ".parquet":
            if size < 12:
                return "truncated (too short for Parquet)"
            with open(path, "rb") as fh:
                head = fh.read(4)
                fh.seek(-8, os.SEEK_END)
                tail = fh.read(8)
            if head != PARQUET_MAGIC or tail[4:] != PARQUET_MAGIC:
                return "truncated or not Parquet (no PAR1 marker at both ends)"
            footer = int.from_bytes(tail[:4], "little")
            if footer + 12 > size:
                return "truncated Parquet (footer longer than the file)"
            import pyarrow.parquet as pq

            pq.read_metadata(path)
        elif path.suffix == ".json":
            if size == 0:
                return "empty"
            json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return f"unreadable ({type(exc).__name__}: {str(exc).splitlines()[0][:100]})"
    except Exception as exc:  # noqa: BLE001 - pyarrow raises its own types for damaged footers
        return f"unreadable Parquet ({type(exc).__name__})"
    return None


def scan(roots: Iterable[str | os.PathLike]) -> list[tuple[Path, str]]:
    """Every damaged ``*.parquet`` / ``*.json`` under ``roots`` (temporary files of running writes excluded)."""
    found = []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("*")):
            if p.suffix in (".parquet", ".json") and not p.name.startswith(".") and p.is_file():
                why = problem(p)
                if why:
                    found.append((p, why))
    return found


def quarantine(found: Iterable[tuple[Path, str]]) -> list[str]:
    """Move each damaged file to ``<name>.damaged`` (kept for inspection); one line per file."""
    lines = []
    for p, why in found:
        dest = p.with_name(p.name + ".damaged")
        os.replace(p, dest)
        lines.append(f"damaged output {p}: {why}; moved to {dest.name}, it will be rebuilt")
    return lines
