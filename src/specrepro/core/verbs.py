"""The verbs over inputs and files (``fetch-trace``, ``trace-tables``, ``ngram-trace``, ``prompt-bleu``, ``write-json``,
``fetch-model``, ``fetch-dataset``, ``manifest``, ``image-record``): arguments here, what each drives imported in its body."""

from __future__ import annotations

import sys
from pathlib import Path


def _write_json(sub) -> None:
    p = sub.add_parser("write-json", help="write a JSON document given on the command line (atomically, sorted)")
    p.add_argument("--json", required=True)
    p.add_argument("-o", "--output", required=True)

    def run(a):
        import json

        from .io import write_json

        write_json(a.output, json.loads(a.json))

    p.set_defaults(func=run)


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
        from .traces import first_trace_problem

        src = fetch_verified(
            a.url, a.sha256, a.output, a.local_dir, a.filename, a.offline, a.provenance, diagnose=first_trace_problem
        )
        print(f"{a.output}: {src.kind} ({src.location}), SHA-256 verified", file=sys.stderr)

    p.set_defaults(func=run)


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

        from .hub import fetch_model, hf_token

        if a.offline:
            os.environ["HF_HUB_OFFLINE"] = "1"  # nothing below may touch the network
        hf = {"repo": a.repo, "revision": a.revision, "gated": a.gated}
        m = fetch_model(a.name, hf, a.cache_dir, a.output, offline=a.offline,
                        token=hf_token(a.token_file or os.environ.get("HF_TOKEN_PATH")))
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

        from .hub import fetch_dataset, hf_token

        if a.offline:
            os.environ["HF_HUB_OFFLINE"] = "1"
        m = fetch_dataset(a.name, json.loads(a.source), a.cache_dir, a.output, offline=a.offline,
                          token=hf_token(a.token_file or os.environ.get("HF_TOKEN_PATH")), repo_root=a.repo,
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


def _add_suffix_trace(sub) -> None:
    """``specrepro suffix-trace``: the input records with ``acc_suffix.acc_len`` added (JSONL)."""
    p = sub.add_parser("suffix-trace", help="add acc_suffix (suffix decoding, recomputed from tokens) to a trace file")
    p.add_argument("input", help="trace file (released format)")
    p.add_argument("-o", "--output", required=True, help="the input records with acc_suffix.acc_len added")
    p.add_argument("--max-depth", type=int, default=24, help="longest suffix matched (default 24, vLLM's)")
    p.add_argument("--k", type=int, default=20, help="tokens proposed at most (default 20, as in the traces)")
    p.add_argument("--dataset", default="", help="name recorded in --stats")
    p.add_argument("--stats", help="mean acceptance lengths (JSON)")
    p.set_defaults(func=_run_suffix_trace)


def _run_suffix_trace(a) -> None:
    from .suffix import run_suffix_trace

    run_suffix_trace(a)


def add_cli(sub) -> None:
    """Register this module's verbs."""
    for add in (
        _write_json,
        _fetch_trace,
        _trace_tables,
        _ngram_trace,
        _prompt_bleu,
        _fetch_model,
        _fetch_dataset,
        _manifest,
        _image_record,
        _add_suffix_trace,
    ):
        add(sub)
