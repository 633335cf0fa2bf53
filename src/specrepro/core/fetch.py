"""Obtain inputs by URL + SHA-256, or from a verified local copy.

A local copy is preferred when it exists (offline machines, CI); otherwise the
file is downloaded. Either way the bytes must match the pinned SHA-256 before
the output appears, so a damaged copy or a changed upstream file stops the run.
"""

from __future__ import annotations

import shutil
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .io import SpecReproError, atomic_path, sha256_file, write_json


@dataclass(frozen=True)
class Source:
    """Where an input comes from: ``kind`` is ``local`` or ``download``."""

    kind: str
    location: str


def resolve_source(url: str, local_dir: str | Path | None, filename: str, offline: bool) -> Source:
    """Decide where a file comes from, or raise a one-line error naming the fix.

    * ``local_dir`` exists and holds ``filename``: that copy;
    * ``local_dir`` exists without ``filename``: error (an incomplete copy is not silently mixed with downloads);
    * no usable ``local_dir``: the URL, unless ``offline``.
    """
    if local_dir:
        d = Path(local_dir)
        if d.is_dir():
            f = d / filename
            if f.is_file():
                return Source("local", str(f))
            raise SpecReproError(
                f"{f}: trace file not found in traces_dir {d} (copy it there, or set traces_dir: null to download it)"
            )
        if offline:
            raise SpecReproError(
                f"traces_dir {d} does not exist and offline mode forbids downloading {filename} "
                "(point traces_dir at a copy of the released traces, or set offline: false)"
            )
    elif offline:
        raise SpecReproError(
            f"{filename}: no traces_dir is set and offline mode forbids downloading it "
            "(set traces_dir to a local copy, or offline: false)"
        )
    return Source("download", url)


def download(url: str, target: Path, timeout: float = 60.0) -> None:
    """Stream ``url`` to ``target`` (caller makes ``target`` a temporary path)."""
    req = urllib.request.Request(url, headers={"User-Agent": "specrepro"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp, open(target, "wb") as out:
            shutil.copyfileobj(resp, out, length=1 << 20)
    except urllib.error.HTTPError as exc:
        raise SpecReproError(f"download of {url} failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SpecReproError(
            f"download of {url} failed ({reason}); check the network, or set traces_dir to a local copy"
        ) from None


def fetch_verified(
    url: str,
    sha256: str,
    output: str | Path,
    local_dir: str | Path | None = None,
    filename: str | None = None,
    offline: bool = False,
    provenance: str | Path | None = None,
    diagnose: Callable[[Path], str | None] | None = None,
) -> Source:
    """Write the file with SHA-256 ``sha256`` to ``output``; record where it came from in ``provenance``.

    On a checksum mismatch ``diagnose(path)`` may name what is wrong inside the file
    (e.g. the first malformed trace line); nothing is written to ``output``.
    """
    output = Path(output)
    filename = filename or url.rsplit("/", 1)[-1]
    src = resolve_source(url, local_dir, filename, offline)
    if src.kind == "download":
        print(f"downloading {url}", file=sys.stderr)
    with atomic_path(output) as tmp:
        if src.kind == "local":
            shutil.copyfile(src.location, tmp)
        else:
            download(url, tmp)
        got = sha256_file(tmp)
        if got != sha256:
            detail = diagnose(tmp) if diagnose else None
            detail = f"; {detail}" if detail else ""
            raise SpecReproError(
                f"{src.location}: SHA-256 mismatch (expected {sha256}, got {got}){detail}; the file is damaged "
                "or not the pinned version: restore or re-download it"
            )
    if provenance:
        write_json(
            provenance,
            {"file": filename, "source": src.kind, "location": src.location, "url": url, "sha256": sha256},
        )
    return src
