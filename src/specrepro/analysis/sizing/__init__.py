"""Sizing a run from per-request variance: how many requests decide each claim, and how wide its intervals will be.

**Spread.** Every engine and simulator quantity is a smooth statistic of per-request values: a mean, a ratio of
two means (a speedup: mean SD throughput / mean no-SD throughput, the same requests), a pooled ratio (a time
share: summed phase seconds / summed step seconds) or a function of several means (the speedup drop from B0 to
B). Over n requests its standard error is ``s / sqrt(n)``, where the *spread* ``s`` is the standard deviation of
its influence values (the statistic linearised around the estimate, one value per request):

* mean of x:                 ``x_i - mean(x)``
* ratio mean(x) / mean(y):   ``(x_i - R y_i) / mean(y)``         (also a pooled ratio sum(x) / sum(y))
* f(m_1, ..., m_j):          ``sum_j df/dm_j (x_ij - m_j)``      (gradient by central differences)

and the expected 95 % interval half-width is ``Z * s / sqrt(n)`` (:func:`expected_half_width`), which the
percentile bootstrap of :mod:`specrepro.core.uncertainty` comes close to at moderate n (the validation study below
compares the two on the released traces).

**What decides a claim** is :func:`specrepro.analysis.claims.decisive_half_width` ``d`` at the expected estimate (the
paper's value, or a pilot run's estimate): value claims +- their tolerance, orderings half the gap between the
two quantities, below-one / above-one the distance to 1.

**Margin.** A run is sized so that, if the expected estimate is the truth and the spread is as estimated, its
interval decides the claim with probability :data:`POWER` (0.9). The estimate lands within a normal error of
the truth, so the expected half-width may only take a fraction ``m`` of ``d`` (:func:`margin`):

* value (band on both sides):                 m = Z / (Z + z_0.95)          = 0.544
* upper, lower, below-one, above-one (one side): m = Z / (Z + z_0.90)        = 0.605
* ordering (two intervals, assumed independent): m = Z / (Z + z_0.90 / sqrt 2) = 0.684

so a claim needs ``n = ceil((Z s' / (m d))^2)`` requests (:func:`requests_needed`), and at least
:data:`MIN_REQUESTS` (20): the percentile bootstrap needs some requests to be calibrated (the validation study
measures its coverage down to that size). The spread is taken :data:`SPREAD_MARGIN` (10 %) larger than estimated,
``s' = 1.1 s``: a standard deviation estimated from the proxy's 300 requests has a standard error of about
``s / sqrt(2 * 299) = 4 %`` of itself, so the margin covers its own sampling error about 2.4 times over (not a
different model's spread: a pilot run measures that).

**Joint expectation.** The power is per claim: each sized claim is decided with probability at least
:data:`POWER` (at the inflated spread; :func:`decision_probability` gives it at the estimated one). Over the
sized headline claims the expected number left undecided is the sum of ``1 - p`` and, taking the claims as
independent, all are decided with probability ``prod p``; ``specrepro plan`` prints both, beside the headline
claims the config does not cover (never decided by it) and those it measures without sizing them.

**Where the spread comes from.** From a pilot run's own results when they are given (bench Parquets of a GPU
run; profile breakdown CSVs): the spread of exactly the quantity, at its own estimate. Otherwise from the
released traces through the simulator (:class:`TraceProxy`): every request of the authors' draw simulated on
its own (B copies, the H100 cost model) gives per-request SD and no-SD throughputs, and per-request phase
seconds from the same cost model. An engine method is proxied by the trace of its kind (n-gram by n-gram with
its k; EAGLE, EAGLE-3, a draft model and MTP by the learned drafter's trace with k = 3), a dataset without a
released trace (the reasoning sets AIME, GPQA) by :data:`PROXY_DATASETS` (GSM8K: math), a batch size by itself
(the simulator runs any B). The proxy's *relative* spread (s / its own estimate) is carried over to ratios
(speedups, shares, the draft-to-target forward ratio) at the claim's level; the speedup drop, a difference in
percent, keeps its absolute spread. The proxy is a different model on other outputs (column ``proxy`` names,
per claim, the trace that stood in and what it stands in for): a pilot run (e.g. the quick run itself) replaces
it, and ``specrepro plan --pilot`` then says whether more requests are needed.

**Claims a config leaves out.** A headline claim the config does not measure is *not covered*; the reason is the
config's ``run.dropped_claims`` entry for its id (or its figure group), and ``specrepro plan`` lists each with it,
and every figure whose engine claims the config measures none of (:func:`coverage_by_group`).


The package: ``power`` (the arithmetic), ``quantities`` (engine metric keys), ``variance`` (per-request spreads),
``claims`` (sizing a config's claims), ``study`` (the validation study), ``inputs`` (configs and released traces),
``format`` (the plan as text), ``verbs`` (``specrepro sizing-study``). Every name is re-exported here.
"""

from .power import (  # noqa: F401
    MIN_REQUESTS, ONE_SIDED, POWER, PROXY_DATASETS, SPREAD_MARGIN, Z, decision_probability, drop_pct,
    expected_half_width, margin, requests_needed, spread_function, spread_mean, spread_ratio,
)
from .quantities import (  # noqa: F401
    Quantity, job_points, parse_engine_key, requests_in, _exp_map,
)
from .variance import (  # noqa: F401
    Pilot, Spread, TraceProxy, baseline_share_spread, phase_seconds, proxy_policy, proxy_spread, quantity_spread,
)
from .claims import (  # noqa: F401
    ENVELOPE_PREFIX, EXACT, NOT_COVERED, NOT_SIZED, SIZED, SIZING_COLUMNS, claim_spread, coverage_by_group,
    dropped_reason, envelope_quantity, job_ids, proxy_text, requests_in_profile, requests_table, size_claim,
    size_claims, _any_profiled, _engine_sim_row, _engine_trace_row, _expected, _tree_row,
)
from .study import (  # noqa: F401
    ENGINE_PROXY, SIM_CLAIM, STUDY_COLUMNS, StudyQuantity, engine_proxy_rows, parse_sim_key, simulator_study_rows,
    subsample_study, validation_study, wilson_interval, _interval, _paired, _sim_arrays, _spread, _study_row,
    _value,
)
from .inputs import (  # noqa: F401
    FULL_CONFIG, REPO, load_config, released_trace_files, trace_proxy,
)
from .format import (  # noqa: F401
    claim_line, format_sized_plan, joint_expectation, _fmt,
)
from .verbs import run_sizing_study  # noqa: F401
