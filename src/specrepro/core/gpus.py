"""GPUs of local runs: each engine job gets its own (a lease with file locks), a job too large stops the run.

Snakemake counts a ``gpu`` resource but never says which GPUs a job may use, so several vLLM instances
would start on GPU 0. Every GPU rule runs its command through ``specrepro with-gpus N -- <command>``:

* on SLURM (``SLURM_JOB_ID`` set) the allocation has already set ``CUDA_VISIBLE_DEVICES``: nothing to do;
* otherwise it takes N GPUs of this machine (``CUDA_VISIBLE_DEVICES`` if set, else ``nvidia-smi``'s
  indices) that no other job holds, by taking an exclusive ``flock`` on ``<lease dir>/<host>/gpu<id>.lock``
  for each, all or none (no job holds some while waiting for more, so two jobs never wait on each
  other), sets ``CUDA_VISIBLE_DEVICES`` to them (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so CUDA numbers GPUs
  as nvidia-smi does) and execs the command, which keeps the locks until it and its children exit
  (killed ones too: the kernel drops their locks).

Before the first job of a local GPU run, the workflow's ``onstart`` handler calls
:func:`start_problem` (a job needing more GPUs than the machine has stops the run with one line) and
sets Snakemake's ``gpu`` limit to the machine's GPU count, unless ``--resources gpu=N`` was given.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

from .errors import SpecReproError

SMI_QUERY = ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader,nounits"]


def visible_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else every index nvidia-smi lists."""
    env = os.environ if env is None else env
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return [g.strip() for g in cvd.split(",") if g.strip() and g.strip() != "-1"]
    path = env.get("PATH")
    exe = shutil.which(SMI_QUERY[0], path=path)
    if not exe:
        return []
    try:
        out = subprocess.run([exe, *SMI_QUERY[1:]], capture_output=True, text=True, check=True, timeout=60,
                             env=dict(env)).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip().isdigit()]


def _try_lock(path: Path) -> int | None:
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return None
        raise
    return fd


def acquire(n: int, pool: Sequence[str], lease_dir: str | os.PathLike, *, poll_s: float = 5.0,
            timeout_s: float | None = None, log=sys.stderr, who: str = "") -> list[tuple[str, int]]:
    """Lock ``n`` GPUs of ``pool`` that no other job holds; [(gpu id, locked fd)], waiting while they are busy."""
    if n > len(pool):
        raise SpecReproError(f"this job needs {n} GPU(s) but {len(pool)} are visible ({', '.join(pool) or 'none'}): "
                             "run it on a machine with enough GPUs")
    folder = Path(lease_dir) / socket.gethostname()
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    said = False
    while True:
        held: list[tuple[str, int]] = []
        for g in pool:
            fd = _try_lock(folder / f"gpu{g}.lock")
            if fd is not None:
                held.append((g, fd))
                if len(held) == n:
                    for _, f in held:
                        os.ftruncate(f, 0)
                        os.write(f, f"{os.getpid()} {who}\n".encode())
                    return held
        for _, fd in held:  # all or none: never hold some GPUs while waiting for more
            os.close(fd)
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            raise SpecReproError(f"no {n} free GPU(s) of {len(pool)} within {timeout_s:.0f} s (leases in {folder})")
        if not said:
            print(f"with-gpus: waiting for {n} free GPU(s) of {len(pool)} (leases in {folder})", file=log, flush=True)
            said = True
        time.sleep(poll_s)


def lease_env(env: Mapping[str, str], gpus: Sequence[str]) -> dict[str, str]:
    """The command's environment: its GPUs, numbered as nvidia-smi numbers them."""
    out = dict(env)
    out["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    out.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return out


def run_with_gpus(n: int, command: Sequence[str], lease_dir: str | os.PathLike, *, env: Mapping[str, str] | None = None,
                  poll_s: float = 5.0, log=sys.stderr) -> None:
    """Exec ``command`` with ``n`` GPUs of its own (see the module docstring); never returns."""
    env = dict(os.environ if env is None else env)
    if not command:
        raise SpecReproError("with-gpus: no command given (usage: specrepro with-gpus N -- COMMAND ...)")
    if n > 0 and not env.get("SLURM_JOB_ID"):
        held = acquire(n, visible_gpus(env), lease_dir, poll_s=poll_s, log=log, who=" ".join(command)[:200])
        for _, fd in held:
            os.set_inheritable(fd, True)
        env = lease_env(env, [g for g, _ in held])
        print(f"with-gpus: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}", file=log, flush=True)
    os.execvpe(command[0], list(command), env)


def start_problem(jobs: Sequence[tuple[str, int]], have: int) -> str | None:
    """One line when a job (name, GPUs) needs more GPUs than the machine's ``have``, else None."""
    big = sorted((j for j in jobs if j[1] > have), key=lambda j: (-j[1], j[0]))
    if not big:
        return None
    name, need = big[0]
    more = f" (and {len(big) - 1} more job(s))" if len(big) > 1 else ""
    return (f"gpu error: {name} needs {need} GPU(s) but {have} {'is' if have == 1 else 'are'} visible on this machine "
            f"(CUDA_VISIBLE_DEVICES or nvidia-smi){more}: run on a machine with {need} GPUs, or leave its experiment "
            "out of the config")


def add_cli(sub) -> None:
    p = sub.add_parser("with-gpus", help="run a command on N GPUs no other job of this machine holds (local runs; "
                                         "on SLURM the allocation's)")
    p.add_argument("gpus", type=int, help="GPUs the command needs (0: run it as it is)")
    p.add_argument("--lease-dir", required=True, help="folder of the lock files (shared by every job of the machine)")
    p.add_argument("--poll", type=float, default=5.0, help="seconds between tries while the GPUs are busy")
    p.add_argument("command", nargs="+", help="the command, after --")

    def run(a):
        run_with_gpus(a.gpus, a.command, a.lease_dir, poll_s=a.poll)

    p.set_defaults(func=run)
