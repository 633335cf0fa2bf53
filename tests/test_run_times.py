"""benchmarks/run_times.py: a run's wall time, job time per rule and longest jobs, from a Snakemake 9 log."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

# Snakemake 9's log lines as it writes them (a CPU run's, shortened): two jobs at once, then one alone
LOG = """\
Building DAG of jobs...
Provided cores: 2
Select jobs to execute...
Execute 2 jobs...
[Mon Dec  7 08:46:06 2026]
localrule dataset_input:
    input: config/prompts/gsm8k.jsonl
    output: resources/datasets/gsm8k/manifest.json
    log: logs/dataset_input/gsm8k.log
    jobid: 129
    reason: Missing output files: resources/datasets/gsm8k/manifest.json
    resources: tmpdir=/tmp
[Mon Dec  7 08:46:06 2026]
localrule engine_bench:
    input: resources/models/m/manifest.json
    output: results/engine/e/bench/none.parquet, results/engine/e/bench/none.json
    log: logs/engine_bench/e/none.log
    jobid: 165
    wildcards: exp=e, config=none
[Mon Dec  7 08:46:16 2026]
Finished jobid: 129 (Rule: dataset_input)
1 of 4 steps (25%) done
[Mon Dec  7 08:46:16 2026]
rule engine_bench:
    log: logs/engine_bench/e/ngram-k3.log
    jobid: 166
[Mon Dec  7 08:47:46 2026]
Finished jobid: 165 (Rule: engine_bench)
2 of 4 steps (50%) done
[Mon Dec  7 08:48:06 2026]
Finished jobid: 166 (Rule: engine_bench)
3 of 4 steps (75%) done
[Mon Dec  7 08:48:06 2026]
localrule all:
    jobid: 0
[Mon Dec  7 08:48:06 2026]
Finished jobid: 0 (Rule: all)
4 of 4 steps (100%) done
"""


def test_run_times_reads_wall_and_job_time_per_rule(tmp_path):
    log = tmp_path / ".snakemake" / "log" / "2026-12-07T084604.snakemake.log"
    log.parent.mkdir(parents=True)
    log.write_text(LOG)
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run_times.py"), str(tmp_path), "--budget-min",
                           "1.5", "--top", "2"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # 08:46:06 -> 08:48:06; jobs 10 s + 100 s + 110 s (the "all" job is no work)
    assert "wall time 2 min 0 s (120 s), budget 1.5 min: over" in out
    assert "jobs finished 4, job time 220 s; job time / 2 cores = 1 min 50 s (92 % of the wall time)" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith(("engine_bench ",
                                                                                                 "dataset_input "))}
    assert rows["engine_bench"][:2] == ["2", "210"] and rows["engine_bench"][-1] == "110"
    assert rows["dataset_input"][:2] == ["1", "10"]
    longest = out.split("longest 2 jobs:")[1].strip().splitlines()
    assert longest[0].split()[:2] == ["110", "s"] and longest[0].endswith("logs/engine_bench/e/ngram-k3.log")
    assert longest[1].endswith("logs/engine_bench/e/none.log")


def test_run_times_names_a_directory_without_a_log(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run_times.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "no Snakemake log under" in proc.stderr and len(proc.stderr.splitlines()) == 1
