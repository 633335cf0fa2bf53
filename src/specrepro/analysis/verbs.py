"""The verbs of the claims table and the run's plan (``claims``, ``plan``): arguments here, the analyses in their bodies."""

from __future__ import annotations

from pathlib import Path


def _claims(sub) -> None:
    p = sub.add_parser("claims", help="evaluate the paper's claims against this run's metrics")
    p.add_argument("--registry", required=True)
    p.add_argument("--metrics", nargs="*", default=[])
    p.add_argument("--run-config", required=True)
    p.add_argument("-o", "--output", required=True, help="claims table (CSV)")

    def run(a):
        from .claims import evaluate, load_claims, load_metrics
        from ..core.io import read_json, write_csv

        kind = read_json(a.run_config)["run"]["kind"]
        table = evaluate(load_claims(a.registry), load_metrics(a.metrics), kind)
        write_csv(a.output, table, float_format="%.6g")

    p.set_defaults(func=run)


def _plan(sub) -> None:
    p = sub.add_parser("plan", help="every engine job of the run with its estimated device time, the expected "
                                    "intervals of the claims it serves, and the totals")
    p.add_argument("--run-config", required=True, help="results/run_config.json, or a config YAML (config/*.yaml)")
    p.add_argument("--cost-model", default="llama3.1-8b-h100")
    p.add_argument("--csv", help="also write the plan as CSV")
    p.add_argument("--traces", nargs="*", default=[],
                   help="the released traces (files or folders; default: the config's traces_dir, else "
                        "resources/traces/<trace set>/): the per-request spread of each claim's quantity")
    p.add_argument("--pilot", nargs="*", default=[],
                   help="a previous GPU run's bench Parquets / profile breakdown CSVs: their spread replaces the traces'")
    p.add_argument("--claims", help="claims registry (default paper/claims.yaml)")
    p.add_argument("--full-config", help="the full grid to compare with (default config/paper.yaml)")
    p.add_argument("--all-claims", action="store_true", help="size every engine claim, not only the headline ones")
    p.add_argument("--sizing-csv", help="also write the claims' sizing as CSV")

    def run(a):
        from .claims import load_claims
        from ..core.io import write_csv
        from ..plan import plan_jobs
        from .sizing import FULL_CONFIG, REPO, Pilot, format_sized_plan, load_config, released_trace_files
        from .sizing import coverage_by_group, requests_table, size_claims, trace_proxy

        cfg = load_config(a.run_config)
        table = plan_jobs(cfg, a.cost_model)
        if a.csv:
            write_csv(a.csv, table)
        full = Path(a.full_config) if a.full_config else FULL_CONFIG
        full_total = float(plan_jobs(load_config(full), a.cost_model)["est_gpu_hours"].sum()) if full.exists() else None
        files = released_trace_files(cfg, a.traces)
        proxy = trace_proxy(cfg, files)
        pilot = Pilot.load(a.pilot) if a.pilot else None
        claims = load_claims(a.claims or REPO / "paper" / "claims.yaml")
        sizing = size_claims(claims, cfg, proxy, pilot, headline_only=not a.all_claims)
        if a.sizing_csv:
            write_csv(a.sizing_csv, sizing)
        note = ("a pilot run where it has the quantity, else " if pilot else "") + (
            f"{proxy.label} through the simulator" if proxy else "no released traces found (give --traces)")
        name = str(full.resolve().relative_to(REPO)) if full.resolve().is_relative_to(REPO) else str(full)
        print(format_sized_plan(table, sizing, full_total, name, note, requests_table(sizing, cfg),
                                coverage_by_group(claims, cfg)))

    p.set_defaults(func=run)


def add_cli(sub) -> None:
    """Register this module's verbs."""
    for add in (_claims, _plan,):
        add(sub)
