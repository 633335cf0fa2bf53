"""The simulator's verbs (``simulate``, ``sim-metrics``): arguments here, numpy and pandas only in their bodies."""

from __future__ import annotations

from .names import BATCHING, COMBINE_COSTS, PAIRING, PROPOSERS, policy_arg


def _simulate(sub) -> None:
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
        from ..core.costmodel import load_cost_model
        from ..core.io import write_csv
        from .simulator import simulate_trace_file

        cost = load_cost_model(a.cost_model)
        schedules = None
        if a.schedule:
            from ..jobspec.schedule import schedules_for

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

        from ..core.bleu import bucket_metrics
        from ..core.io import read_json, write_json
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


def add_cli(sub) -> None:
    """Register this module's verbs."""
    for add in (_simulate, _sim_metrics,):
        add(sub)
