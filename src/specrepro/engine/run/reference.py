"""A same-window no-SD reference for a timed sweep (the experiment's ``paired_reference``).

A speedup divides an SD job's throughput by the no-SD job's, and the two jobs run minutes apart: on a shared
machine either may fall in a slow window (on the 2-vCPU CPU run, a whole job ran 9-20 % slow and a k = 20 job's
last three requests 12-29 % slow, both batch sizes; docs/ARTIFACT.md, "The closed loop at 8 requests"). With a
reference, the SD job also holds a no-SD engine of the same model and settings in a child process and times every
point twice, back to back: no SD, then SD (odd points the other way round, so a drift within the pair cancels over
the sweep). The point records ``reference_wall_s``, ``reference_throughput`` and ``reference_lossless`` (the SD
output equals the reference's); the closed loop divides by the reference where every point of a configuration has
one (:func:`specrepro.analysis.closedloop.baseline_throughputs`).

The two engines never run at once (the parent waits for the child's answer), so each keeps the cores it was given.
The child is a fresh interpreter (``spawn``): its vLLM is imported only there, with the job's engine environment and
without the draft hook's.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import sys
from typing import Any, Callable, Mapping

import pandas as pd

from ...core.errors import SpecReproError
from ...jobspec.args import BenchSpec, error_line
from ...jobspec.drafts import PLAN_ENV
from ...jobspec.hooks import DIR_ENV, MODE_ENV
from .bench import _warmup, run_point
from .llm import open_llm

#: what the child sends back of its point (the rest of a bench row is the SD point's)
REFERENCE_FIELDS = ("wall_s", "throughput", "output_token_ids", "output_tokens", "distinct_outputs")


def reference_spec(spec: BenchSpec) -> BenchSpec:
    """The no-SD configuration of ``spec``: same model, engine settings, datasets and batch sizes, no drafter."""
    return dataclasses.replace(spec, method="none", k=None, drafter={}, tree=None, k_by_batch_size=None,
                               reference=False)


def _serve(conn, blob: str, prompts: Mapping[str, pd.DataFrame], model_dir: str) -> None:
    """The child: open the no-SD engine, then answer ``(dataset, request, batch size)`` with the point's fields
    until ``None``."""
    for var in (MODE_ENV, DIR_ENV, PLAN_ENV):  # the draft hook is the SD engine's, not this one's
        os.environ.pop(var, None)
    spec = BenchSpec.from_json(blob)
    try:
        llm = open_llm(spec, model_dir, None, log=sys.stderr)
        if spec.engine.get("warmup", True):
            _warmup(llm, spec, prompts)
    except Exception as exc:  # noqa: BLE001 - the parent records it and goes on without a reference
        conn.send(("error", error_line(exc)))
        return
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        ds, r, b = msg
        try:
            out = run_point(llm, spec, prompts[ds], ds, r, b)
            conn.send(("ok", {k: out[k] for k in REFERENCE_FIELDS}))
        except Exception as exc:  # noqa: BLE001 - this point's reference failed, the sweep goes on
            conn.send(("error", error_line(exc)))


class ReferenceEngine:
    """The no-SD engine beside an SD sweep, in a child process (module docstring)."""

    def __init__(self, spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], model_dir: str, log=sys.stderr):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        blob = json.dumps(dataclasses.asdict(reference_spec(spec)))
        self._proc = ctx.Process(target=_serve, args=(child, blob, dict(prompts), model_dir), daemon=True)
        self._proc.start()
        child.close()
        status, err = self._recv()
        if status != "ready":
            self.close()
            raise SpecReproError(f"{spec.exp} {spec.label}: the no-SD reference engine did not start: {err}")
        print(f"{spec.exp} {spec.label}: no-SD reference engine ready (pid {self._proc.pid})", file=log, flush=True)

    def _recv(self) -> tuple[str, Any]:
        try:
            return self._conn.recv()
        except EOFError:
            return "error", f"the reference process ended (exit code {self._proc.exitcode})"

    def point(self, ds: str, r: int, b: int) -> dict:
        """The reference's wall time, throughput and output of one point; raises with the child's error line."""
        self._conn.send((ds, r, b))
        status, out = self._recv()
        if status != "ok":
            raise SpecReproError(str(out))
        return out

    def paired(self, sd_point: Callable[[], dict], index: int, ds: str, r: int, b: int) -> dict:
        """One point timed beside its reference: no SD then SD (``sd_point()``) at even ``index``, SD then no SD at
        odd ones; the SD point's fields plus ``reference_wall_s``, ``reference_throughput``, ``reference_lossless``
        (None, with ``reference_error``, where the reference failed)."""
        if index % 2 == 0:
            ref, err = self._try(ds, r, b)
            row = sd_point()
        else:
            row = sd_point()
            ref, err = self._try(ds, r, b)
        if ref is None:
            return {**row, "reference_wall_s": None, "reference_throughput": None, "reference_lossless": None,
                    "reference_error": err}
        same = (list(row.get("output_token_ids") or []) == list(ref["output_token_ids"])
                and ref["distinct_outputs"] == 1 and row.get("distinct_outputs") == 1)
        return {**row, "reference_wall_s": ref["wall_s"], "reference_throughput": ref["throughput"],
                "reference_lossless": bool(same), "reference_error": None}

    def _try(self, ds: str, r: int, b: int) -> tuple[dict | None, str | None]:
        try:
            return self.point(ds, r, b), None
        except SpecReproError as exc:
            return None, str(exc)

    def close(self) -> None:
        try:
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        self._proc.join(timeout=60)
        if self._proc.is_alive():
            self._proc.kill()
        self._conn.close()
