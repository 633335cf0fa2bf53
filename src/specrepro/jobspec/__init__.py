"""What each engine job is and passes: its arguments (args), the run's engine jobs (jobs), images (images), draft
trees (trees), SGLang's keywords (sglang), k by batch size (schedule), the vLLM plugin's hook tables (hooks) and
vLLM's counters (counters). No vLLM, torch, sglang or pandas import, so the workflow, the config's checks and
``specrepro plan`` use it cheaply.

The configuration-level names are re-exported here.
"""

from .args import (
    METHOD_LABELS, PROFILED_K, SD_METHODS, BenchSpec, config_label, experiment_configs, profiled_datasets, profiled_requests,
)

__all__ = ["METHOD_LABELS", "PROFILED_K", "SD_METHODS", "BenchSpec", "config_label", "experiment_configs",
           "profiled_datasets", "profiled_requests"]
