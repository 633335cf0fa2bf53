"""Speedup simulator driven by per-position acceptance traces and a step-time cost model.

Paper mode (the default) follows the authors' released simulator
(SpecDecode-Bench/simulator), reimplemented from its model:

* requests: the records with a non-empty trace, in file order; ``num_requests`` of
  them drawn with ``random.Random(seed).sample``; a batch is ``B`` identical copies
  of one drawn request;
* output length ``L`` = length of the proposer's ``acc_len`` (combined: the shorter);
* target step ``T(kv, n)``; per-step overhead on every copy;
* baseline: one prefill over all prompt tokens, then one token per copy per step;
* speculative: each copy verifies ``input_len`` tokens (fixed-k: k+1; oracle:
  ``acc_len`` at position ``generated - 1``) and produces ``min(acc_len, input_len)``;
  n-gram with fixed k finds no match at a position with ``acc_len == 1`` with
  probability ``1 - p(dataset)`` (then ``input_len = 1``, no drafting cost);
  combined = per-position max of the two traces, oracle policy, n-gram drafting cost;
* speedup = mean over batches of SD throughput / mean of baseline throughput.

Intervals (not in the authors' simulator; the point values are untouched): in replicate batching every
drawn request is one batch, so the speedup's 95 % interval is the paired bootstrap over the drawn requests
of mean(SD throughput) / mean(baseline throughput) (:func:`specrepro.core.uncertainty.bootstrap_ratio_ci`),
columns ``ci_low`` and ``ci_high`` of the summary (``requests`` = n). Continuous batching measures one
throughput of the whole schedule, not a mean over requests: its rows have no interval (a bootstrap would
re-simulate the schedule thousands of times).

Why the fast version is exact: a step's tokens do not depend on the n-gram match
draw (at ``acc_len == 1`` a copy produces one token either way), so the ``B``
copies of a request move in lockstep along one path of positions that does not
depend on ``B``. Paths are found for all requests at once by pointer doubling; the
cost of every batch size is then a handful of array operations, and the random
draws of each step are a contiguous block of ``B`` values of the Mersenne Twister
stream that follows the sample (numpy's ``RandomState`` continues Python's state).

Beyond the paper: ``combine_cost`` (``winner``: the winning proposer's drafting
cost, ``both``: both proposers draft every step), ``batching="continuous"`` (B
different requests in flight, a finished one replaced by the next; throughput while
all B slots are busy), ``pairing="equal-length"`` (only requests whose two traces
have the output's length) and the online ``adaptive`` policy (see
:class:`AdaptiveParams`; it prices steps at the batch size, so its path is walked
once per batch size).

Today's engines (none of it changes paper mode): any ``fixed-<k>``; proposer ``suffix`` (the
``acc_suffix`` traces of :mod:`specrepro.core.suffix`): its lookup is charged as n-gram's drafting cost at
every step and a fixed k always verifies ``k + 1`` tokens, as vLLM 0.34's GPU suffix speculator fills
missing draft slots (no no-match draw); ``combined3``: Oracle Combine of n-gram, EAGLE and suffix (the
paper's accounting: n-gram's drafting cost); policy ``batch-schedule``: vLLM's
``num_speculative_tokens_per_batch_size`` (:func:`schedule_k`), i.e. at batch size B the fixed k the
schedule gives B (k = 0: no speculation, speedup 1).

:func:`simulate_reference` is a plain per-copy, per-step simulation of the same
model, kept as the test oracle for :func:`simulate`.


The package: ``workload`` (inputs and the specification), ``steps`` (decode steps under a policy), ``batching``
(replicate and continuous), ``simulate`` (the driver), ``reference`` (the test oracle), ``entry`` (trace files,
specs from a command line, metric keys); the names (:mod:`specrepro.sim.names`) and k by batch size
(:mod:`specrepro.jobspec.schedule`) are re-exported here with every name of the parts.
"""

from ...jobspec.schedule import check_schedule, schedule_k  # noqa: F401
from ..names import (  # noqa: F401
    BATCHING, COMBINE_COSTS, NGRAM_MATCH_PROB, PAIRING, PAPER_DRAW, PAPER_POLICIES, POLICIES, PROPOSERS,
    SCHEDULED_PROPOSERS, is_policy, policy_arg,
)

from .workload import (  # noqa: F401
    SUMMARY_COLUMNS, AdaptiveParams, SimSpec, Workload, adaptive_choice, draw_requests, ngram_match_prob,
    request_traces, _numpy_stream,
)
from .steps import (  # noqa: F401
    Steps, decode_steps, walk, _adaptive_steps, _exclusive_cumsum_by, _fixed_or_oracle_steps, _flat, _observe,
)
from .batching import (  # noqa: F401
    baseline_latency, continuous_matches, _baseline_steps, _continuous_throughput, _replicate, _schedule,
)
from .simulate import (  # noqa: F401
    SimResult, simulate, _check_batch_sizes, _per_batch_size, _summary_row,
)
from .reference import (  # noqa: F401
    simulate_reference, _reference_baseline, _reference_choice, _reference_continuous, _reference_observe,
    _reference_sd_batch, _reference_step_rows,
)
from .entry import (  # noqa: F401
    build_specs, metric_key, metrics_from_summaries, simulate_trace_file,
)
