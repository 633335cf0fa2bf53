"""Atomic, deterministic file output and checksums.

Every file the pipeline produces goes through :func:`atomic_path`: it is written
under a temporary name in the target directory and renamed into place only once
complete, so a killed job never leaves a truncated output that looks finished.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import pandas as pd

from .errors import SpecReproError  # noqa: F401 - re-exported: io.SpecReproError is the name most modules use


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory next to ``target``; on success it replaces the directory ``target``.

    On any exception the temporary directory is removed and ``target`` is left untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; rename it onto ``target`` on success.

    On any exception the temporary file is removed and ``target`` is left untouched.
    ``suffix`` defaults to the target's own suffix, so tools that infer the format
    from the file name (matplotlib, pyarrow) still work.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=suffix if suffix is not None else target.suffix + ".tmp",
        dir=target.parent,
    )
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp creates 0600; outputs get the usual mode
        os.replace(tmp_path, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(target: str | os.PathLike, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(target: str | os.PathLike, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def dumps_json(obj: Any) -> str:
    """JSON with sorted keys and a trailing newline: identical input, identical bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=_json_default) + "\n"


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(target: str | os.PathLike, obj: Any) -> None:
    write_text(target, dumps_json(obj))


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecReproError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise SpecReproError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


class JsonlTail:
    """The JSON lines appended to a file since the last :meth:`new` call (a last line still being written, with no
    newline yet, waits for the next call)."""

    def __init__(self, path: str | os.PathLike):
        self.path, self.offset = Path(path), 0

    def new(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [json.loads(line) for line in data[:end].splitlines() if line.strip()]


def write_parquet(target: str | os.PathLike, df: pd.DataFrame) -> None:
    """Parquet without the pandas index; same frame and library versions, same bytes."""
    with atomic_path(target) as tmp:
        df.to_parquet(tmp, index=False, engine="pyarrow", compression="zstd")


def read_parquet(path: str | os.PathLike) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise SpecReproError(f"{path}: file not found")
    import pandas as pd  # only here: io stays cheap to import (the CLI's start-up, the config's checks)

    try:
        return pd.read_parquet(path, engine="pyarrow")
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise SpecReproError(f"{path}: unreadable Parquet file ({exc}); delete it and rerun") from None


def write_csv(target: str | os.PathLike, df: pd.DataFrame, float_format: str = "%.6g") -> None:
    with atomic_path(target) as tmp:
        df.to_csv(tmp, index=False, float_format=float_format, lineterminator="\n")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
