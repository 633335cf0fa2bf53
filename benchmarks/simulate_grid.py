#!/usr/bin/env python3
"""Time the simulator's paper grid and the n-gram trace recomputation on the released traces.

    PYTHONPATH=src python benchmarks/simulate_grid.py [--traces ../shared/traces/llama3.1-8B-H100] [--reference]

Paper grid: 4 datasets x (n-gram, EAGLE x fixed-1/3/5/oracle; Oracle Combine) x batch sizes 1..128
(216 speedups; target <= 20 s on 2 cores). Prints seconds per stage and the headline values.
With --reference, also times the per-copy reference simulator on one configuration (B = 1..8).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from specrepro.core.costmodel import load_cost_model
from specrepro.core.ngram import agreement, ngram_acc_lens
from specrepro.sim.simulator import NGRAM_MATCH_PROB, PAPER_POLICIES, SimSpec, Workload, simulate, simulate_reference
from specrepro.core.traces import read_trace

DATASETS = ("instructcoder", "sharegpt", "gsm8k", "cnn")
BATCH_SIZES = (1, 8, 16, 32, 64, 128)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[2] / "shared" / "traces" / "llama3.1-8B-H100"
    ap.add_argument("--traces", default=str(default))
    ap.add_argument("--reference", action="store_true")
    a = ap.parse_args()
    cost = load_cost_model("llama3.1-8b-h100")

    t0 = time.perf_counter()
    records = {d: read_trace(Path(a.traces) / f"combined_{d}.jsonl") for d in DATASETS}
    t_load = time.perf_counter() - t0

    t0 = time.perf_counter()
    recomputed = {d: ngram_acc_lens(r) for d, r in records.items()}
    t_ngram = time.perf_counter() - t0

    t0 = time.perf_counter()
    results = {}
    for d in DATASETS:
        w = Workload.from_records(records[d], d)
        specs = [SimSpec(p, pol, ngram_match_prob=NGRAM_MATCH_PROB[d]) for p in ("ngram", "eagle") for pol in PAPER_POLICIES]
        for spec in specs + [SimSpec("combined", "oracle")]:
            for row in simulate(w, spec, BATCH_SIZES, cost).summary.itertuples():
                results[(d, row.proposer, row.policy, row.batch_size)] = row.speedup
    t_grid = time.perf_counter() - t0

    print(f"load traces (4 files)            {t_load:6.2f} s")
    print(f"n-gram traces from tokens        {t_ngram:6.2f} s  (target <= 10 s)")
    for d in DATASETS:
        ag = agreement([r.acc_len["ngram"] for r in records[d]], recomputed[d])
        print(f"    {d:14s} agreement {100 * ag.on_fitting:8.4f}% where it fits, {100 * ag.overall:6.2f}% overall")
    print(f"paper grid ({len(results)} speedups)        {t_grid:6.2f} s  (target <= 20 s)")
    print(f"    Oracle Combine, InstructCoder, B=1   {results[('instructcoder', 'combined', 'oracle', 1)]:.4f}  (paper 4.9)")
    print(f"    n-gram oracle, InstructCoder, B=1    {results[('instructcoder', 'ngram', 'oracle', 1)]:.4f}  (paper 2.73)")
    print(f"    n-gram k=5, InstructCoder, B=1       {results[('instructcoder', 'ngram', 'fixed-5', 1)]:.4f}  (paper 2.10)")
    if a.reference:
        w = Workload.from_records(records["gsm8k"], "gsm8k")
        spec = SimSpec("ngram", "fixed-3", ngram_match_prob=NGRAM_MATCH_PROB["gsm8k"])
        t0 = time.perf_counter()
        ref = simulate_reference(w, spec, (1, 8), cost).summary["speedup"].tolist()
        t_ref = time.perf_counter() - t0
        t0 = time.perf_counter()
        fast = simulate(w, spec, (1, 8), cost).summary["speedup"].tolist()
        t_fast = time.perf_counter() - t0
        print(f"reference vs fast, GSM8K n-gram k=3, B=1,8: {t_ref:.2f} s vs {t_fast:.3f} s; "
              f"max relative difference {max(abs(x / y - 1) for x, y in zip(fast, ref)):.1e}")


if __name__ == "__main__":
    main()
