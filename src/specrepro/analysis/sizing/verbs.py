"""``specrepro sizing-study``: the sizing rule checked on the released traces (arguments here, the study in its
body)."""

from __future__ import annotations

from ...core.errors import SpecReproError
from ...core.io import write_csv
from ..claims import load_claims
from .inputs import load_config, released_trace_files, trace_proxy
from .study import validation_study


# --- the CLI verb ------------------------------------------------------------------------------------------


def add_cli(sub) -> None:
    """``specrepro sizing-study``: the sizing rule checked by subsampling the released traces."""
    p = sub.add_parser("sizing-study", help="check the sizing rule on the released traces: subsamples of the sized "
                                            "sizes, their intervals' coverage and decisions (CSV)")
    p.add_argument("--run-config", required=True, help="results/run_config.json (simulator cost model, match probabilities)")
    p.add_argument("--traceset", required=True, help="the released trace set (its simulator claims are studied)")
    p.add_argument("--traces", nargs="+", required=True, help="its trace files (<dataset>.jsonl), SHA-256 checked")
    p.add_argument("--claims", required=True, help="the claims registry")
    p.add_argument("--sized-config", help="a config whose engine claims' stand-ins are studied at its request counts "
                                          "(config/paper-quick.yaml)")
    p.add_argument("--replications", type=int, default=1000, help="subsamples per quantity")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=_run_study)


def _run_study(a) -> None:
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
