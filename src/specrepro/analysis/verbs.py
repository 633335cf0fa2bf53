"""The verbs of the analyses (``claims``, ``plan``, ``k-schedule``, ``engine-simulate``, ``closed-loop``, ``falsify``,
``sizing-study``): arguments here, the analyses in their bodies."""

from __future__ import annotations

from pathlib import Path

from ..sim.names import DEFAULT_K_CANDIDATES


def _claims(sub) -> None:
    p = sub.add_parser("claims", help="evaluate the paper's claims against this run's metrics")
    p.add_argument("--registry", required=True)
    p.add_argument("--metrics", nargs="*", default=[])
    p.add_argument("--run-config", required=True)
    p.add_argument("-o", "--output", required=True, help="claims table (CSV)")

    def run(a):
        from .claims import evaluate, load_claims, load_metrics
        from ..core.io import read_json, write_csv

        run = read_json(a.run_config)["run"]
        table = evaluate(load_claims(a.registry), load_metrics(a.metrics), run["kind"],
                         engine_claims=run.get("decides_engine_claims", True) is not False)
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
                                coverage_by_group(claims, cfg),
                                float((cfg.get("run") or {}).get("engine_start_s") or 0)))

    p.set_defaults(func=run)


def _add_k_schedule(sub) -> None:
    p = sub.add_parser("k-schedule", help="k by batch size (vLLM's num_speculative_tokens_per_batch_size) from fixed-k simulations")
    p.add_argument("--grids", nargs="+", required=True, help="simulator summaries with fixed-1..fixed-<k_max> (one per dataset)")
    p.add_argument("--proposers", nargs="+", default=["ngram", "eagle", "suffix"])
    p.add_argument("--cost-model", default="", help="recorded in the output")
    p.add_argument("-o", "--output", required=True, help="schedules (JSON)")
    p.set_defaults(func=_run_k_schedule)


def _run_k_schedule(a) -> None:
    from .today import run_k_schedule

    run_k_schedule(a)


def _closed_loop_inputs(p, points_help: str = "the experiment's bench tables",
                        methods_help: str = "the traced methods") -> None:
    """The inputs every closed-loop verb reads: one experiment's points, prompts, traces, cost model and schedule."""
    p.add_argument("--exp", required=True)
    p.add_argument("--points", nargs="+", required=True, help=points_help)
    p.add_argument("--prompts", nargs="+", required=True, help="its prompts files (request_index -> request_id)")
    p.add_argument("--traces", nargs="+", required=True, help="its trace set, one file per dataset")
    p.add_argument("--methods", nargs="+", required=True, help=methods_help)
    p.add_argument("--cost-model", required=True)
    p.add_argument("--schedule", required=True, help="engine-simulate's schedule file (its n-gram match probability)")
    p.add_argument("--seed", type=int, default=42)


def _add_closed_loop(sub) -> None:
    """``specrepro closed-loop``: simulated against measured speedups of one experiment."""
    p = sub.add_parser("closed-loop", help="simulated against measured speedup of every benchmarked and traced configuration")
    _closed_loop_inputs(p)
    p.add_argument("--fit-report", help="the cost model's fit report (diagnostics)")
    p.add_argument("--breakdowns", nargs="*", default=[], help="the profiled passes' breakdowns (the same points timed "
                                                              "twice: diagnostics)")
    p.add_argument("--run-kind", default="cpu")
    p.add_argument("--run-config", help="results/run_config.json: the datasets' labels, as the report names them")
    p.add_argument("-o", "--output", required=True, help="one row per compared point (CSV)")
    p.add_argument("--summary", required=True, help="the experiment's summary (JSON)")
    p.set_defaults(func=_run_closed_loop)


def _run_closed_loop(a) -> None:
    from .closedloop import run_closed_loop

    run_closed_loop(a)


def _add_falsify(sub) -> None:
    """``specrepro falsify``: the closed loop of one experiment next to the same comparison fed wrong inputs."""
    p = sub.add_parser("falsify", help="the closed loop's error with the real traces against wrong ones "
                                      "(specrepro.analysis.falsify)")
    _closed_loop_inputs(p)
    p.add_argument("-o", "--output", required=True, help="falsification.json")
    p.set_defaults(func=_run_falsify)


def _run_falsify(a) -> None:
    from .falsify import run_falsify

    run_falsify(a)


def _add_engine_drafted(sub) -> None:
    """``specrepro engine-drafted``: the draft hook's runs (controlled, oracle, hybrid) against the simulator."""
    p = sub.add_parser("engine-drafted", help="the oracle, controlled and hybrid runs of one experiment next to the "
                                              "simulator with the engine's accounting (calibration, bounds, hybrid)")
    _closed_loop_inputs(p, "the experiment's bench tables (no SD, fixed k) and draft jobs' points",
                        "the traced methods (the single methods)")
    p.add_argument("--run-config", required=True, help="results/run_config.json (the experiment's jobs and draft jobs)")
    p.add_argument("--calibration", required=True, help="controlled runs against the simulator (CSV)")
    p.add_argument("--bounds", required=True, help="measured oracles (and fixed k) against the simulator (CSV)")
    p.add_argument("--hybrid", required=True, help="per (dataset, B) and hybrid: measured, simulated, gap closed (CSV)")
    p.add_argument("--shares", required=True, help="per hybrid point: the share of steps each proposer was chosen (CSV)")
    p.add_argument("--summary", required=True, help="errors, the drafter's cost per step, the report's sentences (JSON)")
    p.set_defaults(func=_run_engine_drafted)


def _run_engine_drafted(a) -> None:
    from .drafted import run_drafted

    run_drafted(a)


def _add_engine_simulate(sub) -> None:
    """``specrepro engine-simulate``: Figs. 10/12-style simulations of one experiment's engine traces."""
    p = sub.add_parser("engine-simulate", help="the upper-bound simulations on one experiment's own traces and cost model")
    p.add_argument("--exp", required=True)
    p.add_argument("--traceset", required=True, help="the trace set's name (engine-<exp>): metric keys")
    p.add_argument("--traces", nargs="+", required=True, help="the trace set's files, one per dataset (<dataset>.jsonl)")
    p.add_argument("--methods", nargs="+", required=True, help="the traced methods, in display order")
    p.add_argument("--cost-model", required=True)
    p.add_argument("--batch-sizes", nargs="+", type=int, required=True)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--k-candidates", nargs="+", type=int, default=list(DEFAULT_K_CANDIDATES))
    p.add_argument("--ngram-trace", help="the n-gram trace job's own file (results/engine/<exp>/traces/ngram.jsonl)")
    p.add_argument("--ngram-check", help="its check record (undrafted positions)")
    p.add_argument("-o", "--output", required=True, help="summary CSV")
    p.add_argument("--schedule", required=True, help="k-by-batch-size schedules (JSON)")
    p.add_argument("--metrics", required=True, help="flat metrics (JSON)")
    p.set_defaults(func=_run_engine_simulate)


def _run_engine_simulate(a) -> None:
    from .enginesim import run_engine_simulate

    run_engine_simulate(a)


def _add_sizing_study(sub) -> None:
    """``specrepro sizing-study``: the sizing rule checked by subsampling the released traces."""
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
    p.set_defaults(func=_run_sizing_study)


def _run_sizing_study(a) -> None:
    from .sizing.verbs import run_sizing_study

    run_sizing_study(a)


def add_cli(sub) -> None:
    """Register this module's verbs."""
    for add in (_claims, _plan, _add_k_schedule, _add_closed_loop, _add_falsify, _add_engine_drafted, _add_engine_simulate,
                _add_sizing_study,):
        add(sub)
