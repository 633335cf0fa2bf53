"""The Snakemake workflow: the GPU DAG resolves, bad input stops before any job, one figure builds alone."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from conftest import REPO, SHARED_TRACES, run_snakemake

CPU = str(REPO / "config" / "cpu.yaml")
RELEASED = "h100-llama3.1-8b"


def planned_jobs(stdout: str) -> dict[str, int]:
    """Rule -> job count from a dry run's "Job stats" table."""
    jobs: dict[str, int] = {}
    block = stdout.split("Job stats:", 1)[1]
    for line in block.splitlines()[3:]:
        m = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not m:
            break
        if m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs


def cpu_config(tmp_path, **changes) -> str:
    cfg = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    for key, value in changes.items():
        cfg[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


def only_snakemake_state(workdir) -> bool:
    return all(p.name in {".snakemake", "config.yaml", "traces"} for p in workdir.iterdir())


def test_paper_dag_resolves(dry_run):
    proc = dry_run()
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = planned_jobs(proc.stdout)
    assert jobs["fetch_released_trace"] == 4
    # the released set's 4 datasets, then each experiment's engine trace set (the datasets of its no-SD run)
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    engine_sets = [e for e in cfg["experiments"] if {m["method"] for m in e["methods"]} & {"ngram", "eagle", "eagle3", "draft_model"}
                   and not (e.get("engine") == "sglang" or any(m.get("tree") for m in e["methods"]))  # Fig. 2's study: no traces
                   and e.get("acceptance_traces", True)]
    assert jobs["trace_tables"] == 4 + sum(len(e["datasets"]) for e in engine_sets) == 24
    for rule in ("fig05_acceptance_heatmap", "fig11_acceptance_diff", "fig07_request_span", "tab_acceptance_stats",
                 "claims", "report", "engine_bench", "engine_profile", "engine_trace", "fig01_speedup",
                 "fig04_breakdown", "tab_memory", "fig09_engine_bleu", "fig02_tree", "tab_tree"):
        assert jobs[rule] >= 1
    # 21 jobs of Figs. 1, 3, 4 + Fig. 2's 8 vLLM jobs (4 trees) + llama3.1-8b-today's 6 (4 profiled: k by batch size
    # is not, Fig. 4 is of k = 3) on vLLM; Fig. 2's 8 SGLang jobs
    assert jobs["engine_bench"] == 35 and jobs["engine_sglang_bench"] == 8 and jobs["engine_profile"] == 16


def test_lint_is_clean():
    proc = run_snakemake(["--lint"])
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_conda_envs_exist():
    for smk in [REPO / "Snakefile", *(REPO / "workflow" / "rules").glob("*.smk")]:
        for env in re.findall(r'conda:\s*\n\s*"([^"]+)"', smk.read_text()):
            assert (smk.parent / env).resolve().is_file(), f"{smk.name}: conda env {env} not found"


def test_cpu_dag_resolves(tmp_path):
    proc = run_snakemake(["-n", "--configfile", CPU, "--directory", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert planned_jobs(proc.stdout)["report"] == 1


def test_reasoning_only_run_has_no_fig01(tmp_path):
    """A run whose only experiment is a reasoning one (CI's SLURM run) has no Fig. 1 points: no fig01 job,
    Fig. 3 instead (a stand-in's: with report.standin_figures), and the report still planned."""
    cfg = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    small = tmp_path / "thinking.yaml"
    small.write_text(yaml.safe_dump({"experiments": [e for e in cfg["experiments"] if e["name"] == "standin-qwen3-8b-thinking"],
                                     "report": {"standin_figures": True}}))
    proc = run_snakemake(["-n", "--configfile", CPU, str(small), "--directory", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = planned_jobs(proc.stdout)
    assert jobs["report"] == 1 and jobs["fig03_reasoning"] == 1 and "fig01_speedup" not in jobs


def test_cpu_report_leaves_standin_figures_and_thin_per_request_figures_out(tmp_path):
    """Issue 16: a CPU run's report summarises the stand-ins in one table (their figures only with
    report.standin_figures: true) and shows no per-request figure of fewer than 8 requests per dataset."""
    proc = run_snakemake(["-n", "--configfile", CPU, "--directory", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = planned_jobs(proc.stdout)
    cfg = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    smol = next(e for e in cfg["experiments"] if e["name"] == "smollm2")
    traced = min(smol.get("trace_num_requests") or smol["num_requests"],
                 min(cfg["datasets"][d]["num_samples"] for d in smol["datasets"]))
    # the released traces' per-request figures, and the real model's when its traces hold >= 8 requests
    assert jobs["fig05_acceptance_heatmap"] == jobs["fig07_request_span"] == (2 if traced >= 8 else 1)
    assert jobs["tab_engine_exercise"] == 1 and "tab_lossless" not in jobs and "fig03_reasoning" not in jobs
    # every traced stand-in's trace engines still run (the table checks their counters): SmolLM2's 3, Qwen3 thinking's
    # and GLM's 2 each (the Llama-3.1 stand-in's ran the same code paths; acceptance_traces: false since 2026-12-07)
    traced_standins = [e["name"] for e in cfg["experiments"] if e.get("stands_in_for") and e.get("acceptance_traces", True)]
    assert traced_standins == ["standin-qwen3-8b-thinking", "standin-glm-4.5-air"], traced_standins
    assert jobs["engine_trace"] == 3 + 2 + 2
    every = tmp_path / "every.yaml"
    every.write_text(yaml.safe_dump({"report": {"standin_figures": True}}))
    proc = run_snakemake(["-n", "--configfile", CPU, str(every), "--directory", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = planned_jobs(proc.stdout)
    # each stand-in's engine trace set: its statistics table; its per-request figures not (2 requests per dataset)
    # (the released traces and SmolLM2, then the traced stand-ins: Qwen3 thinking, GLM-4.5-Air)
    assert jobs["tab_acceptance_stats"] == 2 + len(traced_standins) and jobs["fig05_acceptance_heatmap"] == 1 + (traced >= 8)
    assert jobs["tab_lossless"] == jobs["fig03_reasoning"] == jobs["tab_engine_exercise"] == 1


def _threads_by_rule(dry_run_stdout: str) -> dict[str, set[int]]:
    """{rule: the threads of its planned jobs} from ``snakemake -n`` (a job block without ``threads:`` has 1)."""
    out: dict[str, set[int]] = {}
    for block in dry_run_stdout.split("\n\n"):
        m = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if m:
            t = re.search(r"^\s+threads: (\d+)", block, re.M)
            out.setdefault(m.group(1), set()).add(int(t.group(1)) if t else 1)
    return out


def test_the_closed_loop_overlay_runs_smollm2_alone_at_8_requests(tmp_path):
    """config/cpu-closedloop.yaml over config/cpu.yaml, as its header runs it: the closed loop's targets plan
    SmolLM2's jobs only (its draft jobs included); a misspelt experiment in experiment_overrides stops the run
    with one line before any job."""
    targets = [f"results/simulator/engine-smollm2/{f}" for f in ("closed_loop.csv", "falsification.json", "drafted.json")]
    overlay = str(REPO / "config" / "cpu-closedloop.yaml")
    proc = run_snakemake(["-n", "-p", "--cores", "2", "--configfile", CPU, overlay, "--directory", str(tmp_path / "run"), "--",
                          *targets])
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = planned_jobs(proc.stdout)
    # both model drafters at k = 1, 3, 5, 8 and EAGLE at 20 (benchmarked and profiled): 11 benchmarks, 11 profiled
    # passes; controlled runs at k = 1, 3, 5, 8, 20 beside the three oracles and two hybrids
    assert jobs["engine_bench"] == jobs["engine_profile"] == 11 and jobs["engine_draft_bench"] == 10
    assert jobs["engine_trace"] == 3
    assert "results/engine/smollm2/" in proc.stdout and "results/engine/standin-" not in proc.stdout
    # exclusive_timing: its timed jobs (benchmarks, profiled passes, draft jobs) take both cores, nothing runs beside
    # them; the k = 20 traces (acceptance only) and the rest keep one
    threads = _threads_by_rule(proc.stdout)
    assert threads["engine_bench"] == threads["engine_draft_bench"] == threads["engine_profile"] == {2}
    assert threads["engine_trace"] == threads["closed_loop"] == {1}
    # ...and their engines still run one thread: Snakemake sets OMP_NUM_THREADS etc. to a job's threads
    timed = [ln for ln in proc.stdout.splitlines() if re.search(r"specrepro (bench|profile|draft-bench) --spec", ln)]
    assert len(timed) == jobs["engine_bench"] + jobs["engine_profile"] + jobs["engine_draft_bench"]
    assert all(re.search(r"OMP_NUM_THREADS=1 GOTO_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 "
                         r"VECLIB_MAXIMUM_THREADS=1 NUMEXPR_NUM_THREADS=1 +specrepro ", ln) for ln in timed)
    # paired_reference: every SD benchmark and draft job times its no-SD reference beside each point; the no-SD
    # benchmark and the profiled passes (the cost model's steps) do not
    paired = [ln for ln in timed if '"reference": true' in ln]
    assert len(paired) == jobs["engine_bench"] - 1 + jobs["engine_draft_bench"]
    assert not any(re.search(r'specrepro profile|"method": "none"', ln) for ln in paired)
    # the main CPU run's do not (its 25-minute budget): one thread each, two jobs at once
    proc = run_snakemake(["-n", "-p", "--cores", "2", "--configfile", CPU, "--directory", str(tmp_path / "main"), "--",
                          *targets[:1]])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set().union(*_threads_by_rule(proc.stdout).values()) == {1}
    assert "specrepro bench --spec" in proc.stdout and '"reference"' not in proc.stdout  # nor references
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"experiment_overrides": {"smollm3": {"num_requests": 8}}}))
    proc = run_snakemake(["--cores", "1", "--configfile", CPU, str(bad), "--directory", str(tmp_path / "bad")])
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("config error: experiment_overrides.smollm3: no experiment of that name")
    assert only_snakemake_state(tmp_path / "bad")


def test_bad_config_stops_before_any_job(tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg["experiments"][0]["batch_sizes"] = [0, 16]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = run_snakemake(["--cores", "1", "--configfile", str(path), "--directory", str(tmp_path)])
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-1] == "config error: experiments[0].batch_sizes[0] = 0: 0 is less than the minimum of 1"
    assert only_snakemake_state(tmp_path)


def test_missing_traces_file_stops_before_any_job(tmp_path, shared_traces):
    partial = tmp_path / "traces"
    partial.mkdir()
    for name in ("combined_gsm8k.jsonl", "combined_instructcoder.jsonl", "combined_sharegpt.jsonl"):
        (partial / name).symlink_to(shared_traces / name)
    cfg = cpu_config(tmp_path, traces_dir=str(partial))
    proc = run_snakemake(["--cores", "1", "--configfile", cfg, "--directory", str(tmp_path)])
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("input error: ") and "combined_cnn.jsonl: trace file not found in traces_dir" in lines[-1]
    assert only_snakemake_state(tmp_path)


def test_corrupted_trace_line_stops_with_one_line(tmp_path, shared_traces):
    copy = tmp_path / "traces"
    shutil.copytree(shared_traces, copy)
    path = copy / "combined_gsm8k.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[9] = lines[9].replace('"generated_token_ids"', '"generated_tokens"', 1)
    path.write_text("".join(lines))
    cfg = cpu_config(tmp_path, traces_dir=str(copy))
    target = f"results/traces/{RELEASED}/gsm8k.positions.parquet"
    proc = run_snakemake(["--cores", "1", "--configfile", cfg, "--directory", str(tmp_path), target])
    assert proc.returncode == 1
    err = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "specrepro fetch-trace: error:" in ln]
    assert len(err) == 1
    assert "combined_gsm8k.jsonl: SHA-256 mismatch" in err[0]
    assert "first problem: line:10: missing field 'generated_token_ids'" in err[0]
    assert not (tmp_path / "resources" / "traces" / RELEASED / "gsm8k.jsonl").exists()
    assert not (tmp_path / target).exists()


def test_one_figure_builds_alone(tmp_path, shared_traces):
    # one released dataset (GSM8K) keeps this in the fast loop: 4 jobs, not 10
    full = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())["released_traces"]
    cfg = cpu_config(tmp_path, released_traces=dict(full, files={"gsm8k": full["files"]["gsm8k"]}))
    target = f"figures/fig07_request_span-{RELEASED}.pdf"
    dry = run_snakemake(["-n", "--configfile", cfg, "--directory", str(tmp_path), target])
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert planned_jobs(dry.stdout) == {"fetch_released_trace": 1, "trace_tables": 1, "run_config": 1, "fig07_request_span": 1}
    proc = run_snakemake(["--cores", "2", "--configfile", cfg, "--directory", str(tmp_path), target])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / target).read_bytes().startswith(b"%PDF")
    assert not (tmp_path / "paper" / "report.pdf").exists()
    again = run_snakemake(["-n", "--configfile", cfg, "--directory", str(tmp_path), target])
    assert "Nothing to be done" in again.stdout + again.stderr


def test_download_path_in_the_workflow(tmp_path, shared_traces):
    cfg = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    cfg["traces_dir"] = None
    cfg["released_traces"]["url"] = (shared_traces / "combined_{dataset}.jsonl").as_uri().replace("%7B", "{").replace("%7D", "}")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    target = f"resources/traces/{RELEASED}/cnn.jsonl"
    proc = run_snakemake(["--cores", "1", "--configfile", str(path), "--directory", str(tmp_path), target])
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = yaml.safe_load((tmp_path / f"resources/traces/{RELEASED}/cnn.source.json").read_text())
    assert rec["source"] == "download"
    assert rec["sha256"] == "90637b8cb4c410b3de6cdf2898ef1104d41b0fc5bff5e8692a6bfc836101899b"
