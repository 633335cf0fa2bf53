"""``specrepro <verb>``: the small CLI the Snakemake rules call.

Each verb parses its arguments here and calls one function of the package.
Errors the user can fix (:class:`~specrepro.io.SpecReproError`) print one line,
``specrepro <verb>: error: <message>``, and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .io import SpecReproError


# --- verbs -------------------------------------------------------------------------------


def _fetch_trace(sub) -> None:
    p = sub.add_parser("fetch-trace", help="obtain a released trace file (local copy or download) and verify it")
    p.add_argument("--url", required=True)
    p.add_argument("--sha256", required=True)
    p.add_argument("--filename", help="file name inside --local-dir (default: the URL's last part)")
    p.add_argument("--local-dir", help="use this copy when it exists (traces_dir)")
    p.add_argument("--offline", action="store_true", help="never download")
    p.add_argument("--provenance", help="write where the file came from (JSON)")
    p.add_argument("-o", "--output", required=True)

    def run(a):
        from .fetch import fetch_verified

        src = fetch_verified(
            a.url, a.sha256, a.output, a.local_dir, a.filename, a.offline, a.provenance, diagnose=_first_trace_problem
        )
        print(f"{a.output}: {src.kind} ({src.location}), SHA-256 verified", file=sys.stderr)

    p.set_defaults(func=run)


def _first_trace_problem(path) -> str | None:
    """The first malformed line of a trace file, for a checksum-mismatch message (line-relative)."""
    from .traces import TraceFormatError, read_trace

    try:
        read_trace(path, aligned=())
    except TraceFormatError as exc:
        text = str(exc)
        return "first problem: line" + text.split(str(path), 1)[1] if str(path) in text else text
    return None


def _trace_tables(sub) -> None:
    p = sub.add_parser("trace-tables", help="validate a trace file and write its tidy tables (Parquet)")
    p.add_argument("trace")
    p.add_argument("--dataset", required=True)
    p.add_argument("--aligned", nargs="*", default=["ngram"], help="proposers whose trace must match the output length")
    p.add_argument("--positions", required=True, help="output: one row per request x proposer x position")
    p.add_argument("--requests", required=True, help="output: one row per request")

    def run(a):
        from .io import write_parquet
        from .traces import load_tables

        requests, positions = load_tables(a.trace, a.dataset, tuple(a.aligned))
        write_parquet(a.requests, requests)
        write_parquet(a.positions, positions)

    p.set_defaults(func=run)


def _figure(sub) -> None:
    from . import figures

    p = sub.add_parser("figure", help="build one figure or table (see specrepro.figures)")
    fsub = p.add_subparsers(dest="figure", required=True, metavar="NAME")
    for mod_name in figures.MODULES:
        mod = figures.module(mod_name)
        fp = fsub.add_parser(mod.SPEC.name, help=f"{mod.SPEC.paper_ref}: {mod.SPEC.title}")
        fp.add_argument("--run-config", required=True, help="results/run_config.json")
        fp.add_argument("--subject", required=True, help="trace set or experiment the figure is about")
        fp.add_argument("-o", "--output", required=True)
        mod.add_arguments(fp)
        fp.set_defaults(func=_figure_runner(mod))


def _figure_runner(mod):
    def run(a):
        from .figures import trace_context
        from .io import read_json

        ctx = trace_context(read_json(a.run_config), a.subject)
        mod.build(a, ctx)

    return run


def _claims(sub) -> None:
    p = sub.add_parser("claims", help="evaluate the paper's claims against this run's metrics")
    p.add_argument("--registry", required=True)
    p.add_argument("--metrics", nargs="*", default=[])
    p.add_argument("--run-config", required=True)
    p.add_argument("-o", "--output", required=True, help="claims table (CSV)")

    def run(a):
        from .claims import evaluate, load_claims, load_metrics
        from .io import read_json, write_csv

        kind = read_json(a.run_config)["run"]["kind"]
        table = evaluate(load_claims(a.registry), load_metrics(a.metrics), kind)
        write_csv(a.output, table, float_format="%.6g")

    p.set_defaults(func=run)


def _report(sub) -> None:
    p = sub.add_parser("report", help="render the LaTeX report and compile it with latexmk")
    p.add_argument("--run-config", required=True)
    p.add_argument("--claims", required=True)
    p.add_argument("--figures", nargs="*", default=[])
    p.add_argument("--inputs", nargs="*", default=[], help="input provenance records (JSON)")
    p.add_argument("--templates", required=True)
    p.add_argument("--tex", required=True)
    p.add_argument("--pdf", required=True)
    p.add_argument("--repo", default=".")

    def run(a):
        from .report import build_report

        build_report(a.run_config, a.claims, a.figures, a.inputs, a.templates, a.tex, a.pdf, a.repo)

    p.set_defaults(func=run)


def _check_config(sub) -> None:
    p = sub.add_parser("check-config", help="validate config files the way the workflow does")
    p.add_argument("configs", nargs="+")
    p.add_argument("--schema", default=str(Path(__file__).resolve().parents[2] / "workflow/schemas/config.schema.yaml"))

    def run(a):
        import yaml

        from .config import check_config, validate_schema

        for path in a.configs:
            cfg = yaml.safe_load(Path(path).read_text())
            validate_schema(cfg, a.schema)
            check_config(cfg)
            print(f"{path}: ok")

    p.set_defaults(func=run)


def _write_json(sub) -> None:
    p = sub.add_parser("write-json", help="write a JSON document given on the command line (atomically, sorted)")
    p.add_argument("--json", required=True)
    p.add_argument("-o", "--output", required=True)

    def run(a):
        import json

        from .io import write_json

        write_json(a.output, json.loads(a.json))

    p.set_defaults(func=run)


VERBS = (_write_json, _fetch_trace, _trace_tables, _figure, _claims, _report, _check_config)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specrepro", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for add in VERBS:
        add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except SpecReproError as exc:
        print(f"specrepro {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
