"""The verbs over engine results (``fit-cost-model``, ``fit-engine-cost-model``, ``engine-metrics``): arguments here,
what each drives imported in its body."""

from __future__ import annotations


def _add_fit_cost_model(sub) -> None:
    """``specrepro fit-cost-model STEPS.parquet [...] -o MODEL.yaml [--plot PDF] [--report JSON]``."""
    p = sub.add_parser("fit-cost-model", help="fit the simulator's step-time cost model to per-step timings (YAML)")
    p.add_argument("steps", nargs="+", help="per-step timing tables (Parquet or CSV; columns role, kv_tokens, "
                                            "batched_tokens, seconds[, overhead_s])")
    p.add_argument("-o", "--output", required=True, help="cost-model YAML to write")
    p.add_argument("--plot", help="residuals plot (PDF)")
    p.add_argument("--report", help="fit quality (JSON): R^2, points, coefficients per role")
    p.add_argument("--name", help="cost-model name (default: the output file's stem)")
    p.add_argument("--model", default="", help="model the timings are of (recorded in the YAML)")
    p.add_argument("--hardware", default="", help="hardware the timings are of (recorded in the YAML)")
    p.add_argument("--base", help="cost model (built-in name or file) supplying coefficients without data")
    p.set_defaults(func=_run_fit_cost_model)


def _run_fit_cost_model(a) -> None:
    from .costfit import run_fit_cost_model

    run_fit_cost_model(a)


def _add_fit_engine_cost_model(sub) -> None:
    """``specrepro fit-engine-cost-model``: one experiment's cost model from its profiled steps (or bench points)."""
    p = sub.add_parser("fit-engine-cost-model",
                       help="fit one experiment's step-time cost model to its own profiled steps (or benchmark points)")
    p.add_argument("--exp", required=True)
    p.add_argument("--model", default="", help="the experiment's model (recorded in the file)")
    p.add_argument("--hardware", default="", help="recorded in the file")
    p.add_argument("--timings", nargs="*", default=[], help="profiled passes' step tables (<config>.timings.parquet)")
    p.add_argument("--sweeps", nargs="*", default=[], help="cost-fit sweeps (<config>.steps.parquet)")
    p.add_argument("--records", nargs="*", default=[], help="the profiled passes' (or, with --points, the bench jobs') "
                                                               "records (<config>.json): image, engine version, status")
    p.add_argument("--breakdowns", nargs="*", default=[], help="the profiled passes' breakdowns (<config>.breakdown.csv): "
                                                                  "wall time outside the engine's steps")
    p.add_argument("--points", nargs="*", default=[], help="bench tables: used only without profiled steps")
    p.add_argument("-o", "--output", required=True, help="the cost model (YAML)")
    p.add_argument("--report", required=True, help="fit quality (JSON)")
    p.add_argument("--residuals", required=True, help="measured and fitted time of every row (CSV)")
    p.set_defaults(func=_run_fit_engine_cost_model)


def _run_fit_engine_cost_model(a) -> None:
    from .modelfit import run_fit_engine_cost_model

    run_fit_engine_cost_model(a)


def _add_engine_metrics(sub) -> None:
    """``specrepro engine-metrics``: engine points -> metrics JSON (+ speedup and lossless CSVs)."""
    p = sub.add_parser("engine-metrics", help="engine points -> metrics JSON for the claims table (+ CSV tables)")
    p.add_argument("--points", nargs="+", required=True, help="bench tables (results/engine/<exp>/bench/*.parquet)")
    p.add_argument("--run-config", required=True, help="results/run_config.json (its run.kind is recorded)")
    p.add_argument("-o", "--output", required=True, help="metrics JSON (results/metrics/engine.json)")
    p.add_argument("--speedup-csv", help="per exp x dataset x config x batch size: throughput, speedup, failures")
    p.add_argument("--lossless-csv", help="per exp x config: identical outputs, acceptance, failures")
    p.add_argument("--prompts", nargs="*", default=[], help="prompt tables (engine-prompts) for the Fig. 9 BLEU buckets")
    p.add_argument("--bleu-edges", nargs="*", type=float, default=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    p.add_argument("--bleu-csv", help="per request: prompt-output BLEU-4 and throughput of each configuration")
    p.set_defaults(func=_run_engine_metrics)


def _run_engine_metrics(a) -> None:
    from .metrics import run

    run(a)


def add_cli(sub) -> None:
    """Register this module's verbs."""
    for add in (_add_fit_cost_model, _add_fit_engine_cost_model, _add_engine_metrics):
        add(sub)
