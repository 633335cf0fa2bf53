"""Cluster resources of engine jobs: what Snakemake's SLURM executor turns into sbatch options.

``gpu`` -> ``--gpus=N`` (``gpu_model`` + ``gpu`` -> ``--gpus=<model>:N``), ``runtime`` (minutes) -> ``-t``,
``mem_mb`` -> ``--mem``, ``cpus_per_gpu`` -> ``--cpus-per-gpu``. Locally, ``gpu`` only limits how many
GPU jobs run at once (``--resources gpu=N``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping


def engine_resources(model: Mapping[str, Any], cluster: Mapping[str, Any], estimate_min: float | None = None) -> dict:
    """Resources of one engine job on ``model`` (a ``models`` entry of the config).

    GPUs = the model's tensor_parallel_size (1 for 8B models, 4 for 70B and GLM-4.5-Air in the paper's
    config). Runtime = the plan's estimate x ``runtime_factor`` (a margin: a job killed at its time
    limit redoes its unfinished points), or ``runtime_min`` without an estimate.
    """
    gpus = int(model.get("tensor_parallel_size", 1))
    if estimate_min is not None:
        runtime = max(int(math.ceil(estimate_min * float(cluster.get("runtime_factor", 1.5)))), 10)
        runtime = min(runtime, int(cluster.get("runtime_max_min", 2880)))
    else:
        runtime = int(cluster.get("runtime_min", 240))
    out = {
        "gpu": gpus,
        "runtime": runtime,
        "mem_mb": gpus * int(cluster.get("mem_mb_per_gpu", 64000)),
        "cpus_per_gpu": int(cluster.get("cpus_per_gpu", 8)),
    }
    if cluster.get("gpu_model"):
        out["gpu_model"] = cluster["gpu_model"]
    return out
