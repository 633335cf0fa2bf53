"""Engine runs on real vLLM: job arguments, benchmark sweeps, counters, profiled passes, acceptance
traces, memory, cost-model fit and the stand-in models of the CPU run.

Only the configuration-level names are re-exported here (no vLLM, torch or pandas import), so the
workflow and ``specrepro plan`` can use them cheaply.
"""

from .args import (
    METHOD_LABELS, PROFILED_K, SD_METHODS, BenchSpec, config_label, experiment_configs, profiled_datasets, profiled_requests,
)

__all__ = ["METHOD_LABELS", "PROFILED_K", "SD_METHODS", "BenchSpec", "config_label", "experiment_configs",
           "profiled_datasets", "profiled_requests"]
