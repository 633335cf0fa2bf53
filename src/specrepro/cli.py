"""``specrepro <verb>``: the small CLI the Snakemake rules call.

This module is the parser and one table, :data:`VERBS`: each verb's one-line help and the module that defines
it. ``specrepro --help`` imports no verb module; ``specrepro <verb> ...`` imports that verb's module only and
calls its ``add_cli(sub)``, which registers the module's verbs (each sub-parser ``set_defaults(func=run)``; what
the verb drives is imported inside ``run``). Errors the user can fix (:class:`~specrepro.core.errors.SpecReproError`)
print one line, ``specrepro <verb>: error: <message>``, and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .core.errors import SpecReproError
from .core.procexit import fast_exit

#: verb -> (one-line help, module whose ``add_cli(sub)`` registers it), in the order ``--help`` lists them
VERBS = {
    'write-json': ('write a JSON document given on the command line (atomically, sorted)',
                   'specrepro.core.verbs'),
    'fetch-trace': ('obtain a released trace file (local copy or download) and verify it',
                    'specrepro.core.verbs'),
    'trace-tables': ('validate a trace file and write its tidy tables (Parquet)',
                     'specrepro.core.verbs'),
    'ngram-trace': ("recompute acc_ngram from tokens with vLLM's n-gram proposer rule (JSONL in, JSONL out)",
                    'specrepro.core.verbs'),
    'simulate': ('simulated SD speedup from acceptance traces and a cost model (CSV)',
                 'specrepro.sim.verbs'),
    'sim-metrics': ('simulator outputs -> metrics JSON for the claims table',
                    'specrepro.sim.verbs'),
    'prompt-bleu': ("token-level BLEU-4 of every request's output against its prompt (CSV)",
                    'specrepro.core.verbs'),
    'figure': ('build one figure or table (see specrepro.figures)',
               'specrepro.figures.verbs'),
    'claims': ("evaluate the paper's claims against this run's metrics",
               'specrepro.analysis.verbs'),
    'report': ('render the LaTeX report and compile it with latexmk',
               'specrepro.report'),
    'check-config': ('validate config files the way the workflow does',
                     'specrepro.config'),
    'preflight': ('check GPUs, memory, disk, apptainer and token against the configured models',
                  'specrepro.preflight'),
    'fetch-model': ('download a model at its pinned revision and write its manifest',
                    'specrepro.core.verbs'),
    'fetch-dataset': ('obtain a dataset (Hub revision or prompts file) and write its manifest',
                      'specrepro.core.verbs'),
    'manifest': ('collect every input record into one manifest (results/manifest.json)',
                 'specrepro.core.verbs'),
    'image-record': ('provenance of an engine image: its definition, lock and .sif checksums',
                     'specrepro.core.verbs'),
    'engine-prompts': ("a dataset's prompts for one experiment (template, chat template, sample)",
                       'specrepro.engine.run.verbs'),
    'bench': ("run (or resume) one engine configuration's sweep on vLLM",
              'specrepro.engine.run.verbs'),
    'profile': ('profiled pass of one engine configuration: time breakdown (Fig. 4), cost-fit steps',
                'specrepro.engine.run.verbs'),
    'draft-bench': ("one draft job's sweep on vLLM: oracle, controlled or hybrid drafts",
                    'specrepro.engine.run.verbs'),
    'engine-outputs': ('the no-SD greedy outputs of an experiment, one row per request',
                       'specrepro.engine.run.verbs'),
    'merge-traces': ("one trace file with every method's acc_len (engine-trace outputs)",
                     'specrepro.engine.run.verbs'),
    'plan': ('every engine job of the run with its estimated device time, the expected intervals of the claims it serves, and the totals',
             'specrepro.analysis.verbs'),
    'build-model': ('build a tiny random-weight model (CPU run) and write its manifest',
                    'specrepro.engine.models.standins'),
    'engine-trace': ('per-position acceptance traces (k = 20) computed by vLLM with one token kept per step (JSONL, released format + dataset)',
                     'specrepro.engine.run.verbs'),
    'fit-cost-model': ("fit the simulator's step-time cost model to per-step timings (YAML)",
                       'specrepro.engine.results.verbs'),
    'fit-engine-cost-model': ("fit one experiment's step-time cost model to its own profiled steps (or benchmark points)",
                              'specrepro.engine.results.verbs'),
    'engine-simulate': ("the upper-bound simulations on one experiment's own traces and cost model",
                        'specrepro.analysis.verbs'),
    'closed-loop': ('simulated against measured speedup of every benchmarked and traced configuration',
                    'specrepro.analysis.verbs'),
    'falsify': ("the closed loop's error with the real traces against wrong ones (specrepro.analysis.falsify)",
                'specrepro.analysis.verbs'),
    'engine-drafted': ('the oracle, controlled and hybrid runs of one experiment next to the simulator with the engine\'s accounting (calibration, bounds, hybrid)',
                       'specrepro.analysis.verbs'),
    'engine-metrics': ('engine points -> metrics JSON for the claims table (+ CSV tables)',
                       'specrepro.engine.results.verbs'),
    'engine-args': ('every engine job with its image, vLLM version and the keywords it passes to vllm.LLM and SamplingParams (one JSON object per line)',
                    'specrepro.jobspec.jobs'),
    'source-check': ("check every engine job's vLLM (SGLang) arguments against the source of the engine it runs on (pinned sdists; no GPU)",
                     'specrepro.engine.check.sourcecheck'),
    'with-gpus': ("run a command on N GPUs no other job of this machine holds (local runs; on SLURM the allocation's)",
                  'specrepro.core.gpus'),
    'digitise': ("read the paper's figure images (markers, bars) independently",
                 'specrepro.analysis.digitise.verbs'),
    'sglang-bench': ("run (or resume) one engine configuration's sweep on SGLang",
                     'specrepro.engine.run.verbs'),
    'tree-args': ("Fig. 2's engine jobs (SGLang and vLLM trees) as engine-args prints them, one JSON line each",
                  'specrepro.engine.check.sourcecheck_sglang'),
    'sizing-study': ("check the sizing rule on the released traces: subsamples of the sized sizes, their intervals' coverage and decisions (CSV)",
                     'specrepro.analysis.verbs'),
    'suffix-trace': ('add acc_suffix (suffix decoding, recomputed from tokens) to a trace file',
                     'specrepro.core.verbs'),
    'k-schedule': ("k by batch size (vLLM's num_speculative_tokens_per_batch_size) from fixed-k simulations",
                   'specrepro.analysis.verbs'),
    'check-hooks': ('check the vLLM internals the instrumentation plugin hooks against engine sources (pinned sdists, or a tree)',
                    'specrepro.engine.check.hookcheck'),
    'convert-gguf': ('turn a packaged Llama GGUF into a model directory vLLM loads (manifest)',
                     'specrepro.engine.models.from_gguf'),
    'train-generate': ("the target's greedy outputs on the drafters' training prompts (vLLM)",
                       'specrepro.engine.models.drafters'),
    'train-states': ("the target's final normed hidden state at every position (torch, engine dtype)",
                     'specrepro.engine.models.drafters'),
    'train-drafter': ('train an EAGLE-1 head or distil a shallow draft model on CPU (manifest)',
                      'specrepro.engine.models.drafters'),
}


def parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of ``argv``: every verb with its help only, and the full sub-parser of the verb ``argv`` names
    (its module imported; the other verbs' modules are not)."""
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="specrepro", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    verb = argv[0] if argv else None
    if verb in VERBS:
        add = importlib.import_module(VERBS[verb][1]).add_cli
        if add.__code__.co_argcount > 1:  # a verb with sub-commands of its own (figure) gets the words after it
            add(sub, argv[1:])
        else:
            add(sub)
        return p
    for name, (help_, _) in VERBS.items():
        sub.add_parser(name, help=help_)
    return p


def run() -> None:
    """The ``specrepro`` command: :func:`main`, then, after a verb that succeeded, an exit without the
    interpreter's teardown (:func:`specrepro.core.procexit.fast_exit`: seconds per engine job)."""
    code = main()
    if code == 0:
        fast_exit(0)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser(argv).parse_args(argv)
    try:
        args.func(args)
    except SpecReproError as exc:
        print(f"specrepro {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    run()
