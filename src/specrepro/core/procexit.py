"""The ``specrepro`` command's exit: after a verb succeeded, leave without the interpreter's teardown.

With torch loaded, tearing the interpreter down took 1.2-1.4 s per job on the CPU run's 2-vCPU machine, and with an
in-process vLLM engine about 3 s (vLLM's ``EngineCore.shutdown`` finalizer runs a full garbage collection, then every
module is torn down): some 2 minutes of the CPU run's 25. Nothing needs it once a verb has returned: its outputs are
written and closed (atomically, :mod:`specrepro.core.io`). Where a child process is alive (vLLM's engine core or
tensor-parallel workers on a GPU, which its shutdown must stop) the normal exit runs; ``SPECREPRO_FULL_EXIT=1``
keeps it everywhere (e.g. under a profiler).
"""

from __future__ import annotations

import logging
import os
import sys

#: set (non-empty) to keep Python's normal exit
FULL_EXIT_ENV = "SPECREPRO_FULL_EXIT"


def live_children() -> list[int]:
    """PIDs of this process's live child processes (psutil where installed, else multiprocessing's own)."""
    try:
        import psutil
    except ImportError:
        import multiprocessing

        return [p.pid for p in multiprocessing.active_children()]
    try:
        return [c.pid for c in psutil.Process().children() if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    except psutil.Error:
        return [-1]  # unknown: keep the normal exit


def fast_exit(code: int = 0) -> None:
    """Flush and leave with ``code`` now (``os._exit``: no atexit handlers, finalizers or module teardown), unless
    a child process is alive or :data:`FULL_EXIT_ENV` is set; then return."""
    if os.environ.get(FULL_EXIT_ENV) or live_children():
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
