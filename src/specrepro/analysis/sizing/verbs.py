"""The body of ``specrepro sizing-study``: the sizing rule checked on the released traces (its arguments are in
:mod:`specrepro.analysis.verbs`)."""

from __future__ import annotations

from ...core.errors import SpecReproError
from ...core.io import write_csv
from ..claims import load_claims
from .inputs import load_config, released_trace_files, trace_proxy
from .study import validation_study


def run_sizing_study(a) -> None:
    """Subsample the released traces at the sized request counts and write the study's table."""
    if a.replications < 10:
        raise SpecReproError(f"--replications must be at least 10, got {a.replications}")
    cfg = load_config(a.run_config)
    files = released_trace_files(cfg, a.traces)
    missing = sorted(set((cfg.get("released_traces") or {}).get("files", {})) - set(files))
    if missing:
        raise SpecReproError(f"no trace file of dataset {missing[0]!r} among --traces")
    proxy = trace_proxy(cfg, files)
    sized = load_config(a.sized_config) if a.sized_config else None
    table = validation_study(load_claims(a.claims), a.traceset, proxy, sized, a.replications, a.seed)
    write_csv(a.output, table, float_format="%.6g")
