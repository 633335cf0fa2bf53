"""Progress of a long engine job: one log line per finished point, a bar when stderr is a terminal.

A GPU sweep runs for hours with its stderr in ``logs/<rule>/...log``: each finished point adds

    llama3.1-8b eagle-k3: 1234/8000 points (cnn request 308 B=64), elapsed 2h03m, ETA 11h17m

The ETA is the points left times the mean time per point finished in this run (points resumed from a
checkpoint are counted as done but not timed). On a terminal the same text follows a bar, redrawn in place.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


def duration(seconds: float | None) -> str:
    """``42s``, ``3m07s``, ``2h03m``; ``?`` when unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class Progress:
    """Counts finished points of ``total`` (``done`` of them finished before this run) and reports each."""

    def __init__(self, label: str, total: int, done: int = 0, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, bar: bool | None = None, width: int = 24):
        self.label, self.total, self.done, self.resumed = label, int(total), int(done), int(done)
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        isatty = getattr(self.stream, "isatty", None)
        self.bar = bool(isatty and isatty()) if bar is None else bar
        self.width = width

    def line(self, what: str = "") -> str:
        elapsed = self.clock() - self.start
        timed = self.done - self.resumed
        eta = (self.total - self.done) * elapsed / timed if timed > 0 else None
        where = f" ({what})" if what else ""
        return (f"{self.label}: {self.done}/{self.total} points{where}, elapsed {duration(elapsed)}, "
                f"ETA {duration(eta)}")

    def step(self, what: str = "") -> str:
        """One more point finished: write its line (or redraw the bar) and return the line."""
        self.done += 1
        text = self.line(what)
        if self.bar:
            filled = int(self.width * self.done / self.total) if self.total else self.width
            end = "\n" if self.done >= self.total else ""
            self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {text}\033[K{end}")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        return text
