"""The kick-the-tires GPU config (config/paper-smoke.yaml, issue 21 item 4): valid, every job passes the source
check of its engine, under one GPU-hour by ``specrepro plan`` on one GPU, and every one-GPU engine path on its image."""

from __future__ import annotations

import pytest
import yaml

from _infra import REPO
from specrepro.config import check_config, config_problems, validate_schema
from specrepro.engine.check.sourcecheck import check_records
from specrepro.jobspec.jobs import engine_args
from specrepro.plan import plan_jobs

SMOKE = REPO / "config" / "paper-smoke.yaml"


@pytest.fixture(scope="module")
def smoke():
    cfg = yaml.safe_load(SMOKE.read_text())
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    return cfg


@pytest.fixture(scope="module")
def records(smoke, tmp_path_factory):
    return list(engine_args(smoke, tmp_path_factory.mktemp("work")))


def test_the_smoke_config_is_valid(smoke):
    check_config(smoke)
    assert config_problems(smoke) == []
    assert smoke["run"]["kind"] == "gpu"


def test_every_smoke_job_passes_the_source_check_of_its_engine_on_each_of_the_four_images(records):
    problems, checked = check_records(records)
    assert problems == []
    # the paper image's 6 include the hybrid (a draft job: its hook table is checked against 0.10.1.1's source)
    assert checked == {"vLLM 0.10.1.1": 6, "vLLM 0.11.1": 3, "vLLM 0.34.0": 5, "SGLang 0.5.9": 3}
    assert [r["job"] for r in records if r["rule"] == "engine_draft_bench"] == [
        "results/engine/llama3.1-8b/drafts/hybrid-adaptive-eagle3-k20.parquet"]
    assert {r["image"] for r in records} == {"paper", "v0111", "latest", "sglang"}


def _paths(records):
    """{(image, rule, experiment, method, k, shape)} of the engine jobs."""
    out = set()
    for r in records:
        spec = (r["llm_kwargs"] or {}).get("speculative_config") or {}
        sg = r.get("sglang_kwargs") or {}
        shape = ("k-by-B" if "num_speculative_tokens_per_batch_size" in spec
                 else "tree" if "speculative_token_tree" in spec or (sg.get("speculative_eagle_topk") or 1) > 1
                 else "chain")
        out.add((r["image"], r["rule"], r["experiment"], r["method"], r["k"], shape))
    return out


def test_the_listed_engine_paths_are_there(records):
    paths = _paths(records)
    for method, k in (("none", None), ("ngram", 3), ("eagle", 3), ("eagle3", 3)):  # the paper image, Llama-3.1-8B
        assert ("paper", "engine_bench", "llama3.1-8b", method, k, "chain") in paths, method
    assert ("paper", "engine_profile", "llama3.1-8b", "none", None, "chain") in paths  # the one profiled pass
    assert ("v0111", "engine_bench", "qwen3-8b", "eagle3", 3, "chain") in paths
    assert ("v0111", "engine_trace", "qwen3-8b", "eagle3", 20, "chain") in paths  # the one keep-one trace job
    assert ("latest", "engine_bench", "qwen3-8b-draft", "draft_model", 3, "chain") in paths
    assert ("latest", "engine_bench", "llama3.1-8b-today", "eagle3", 10, "k-by-B") in paths
    assert ("latest", "engine_bench", "llama3.1-8b-today", "suffix", 3, "chain") in paths
    assert ("sglang", "engine_sglang_bench", "tree-qwen3-8b-sglang", "eagle3", 3, "chain") in paths
    assert ("sglang", "engine_sglang_bench", "tree-qwen3-8b-sglang", "eagle3", 6, "tree") in paths
    assert sum(r["rule"] == "engine_trace" for r in records) == 1
    assert sum(r["rule"] == "engine_profile" for r in records) == 1
    # every engine job (each runs its own baseline): a no-SD job on each image
    assert {r["image"] for r in records if r["method"] == "none"} == {"paper", "v0111", "latest", "sglang"}


def test_a_handful_of_requests_at_two_batch_sizes(smoke):
    for exp in smoke["experiments"]:
        assert exp["num_requests"] <= 5 and len(exp["batch_sizes"]) == 2, exp["name"]
    assert all(d["num_samples"] <= 5 for d in smoke["datasets"].values())
    assert len(smoke["profiling"]["batch_sizes"]) == 2


def test_the_plan_stays_under_one_gpu_hour_on_one_gpu_with_the_engine_start_charged(smoke):
    plan = plan_jobs(smoke)
    assert (plan["gpus"] == 1).all()
    assert len(plan) == 17  # 11 vLLM bench + 3 SGLang + 1 profile + 1 trace + 1 draft (hybrid) job
    assert plan["est_gpu_hours"].sum() <= 1.0
    # the stated engine start: 120 s a job, the bulk of so short a run
    assert smoke["run"]["engine_start_s"] == 120
    unstarted = plan_jobs({**smoke, "run": {**smoke["run"], "engine_start_s": 0}})
    assert plan["est_gpu_hours"].sum() - unstarted["est_gpu_hours"].sum() == pytest.approx(17 * 120 / 3600)
    assert unstarted["est_gpu_hours"].sum() > 0


def test_the_smoke_dag_builds_and_tests_every_image_it_uses(dag_jobs):
    jobs, _ = dag_jobs("config/paper-smoke.yaml", "all")
    built = sorted(j["input"][0].rsplit("/", 1)[1] for j in jobs if j["rule"] in ("container_image", "container_image_sglang"))
    assert built == ["sglang.def", "vllm-latest.def", "vllm-paper.def", "vllm-v0111.def"]
    tested = sorted(j["output"][0] for j in jobs if j["rule"] in ("container_test", "container_test_sglang"))
    assert tested == sorted(f"results/containers/{n}.test.txt" for n in ("vllm-paper", "vllm-v0111", "vllm-latest", "sglang"))
    rules = [j["rule"] for j in jobs]
    assert (rules.count("engine_bench"), rules.count("engine_sglang_bench"), rules.count("engine_profile"),
            rules.count("engine_trace"), rules.count("engine_draft_bench")) == (11, 3, 1, 1, 1)
    assert "report" in rules


def test_the_readme_table_carries_the_plans_numbers(smoke):
    """The README's smoke / quick / full table: GPU-hours and engine jobs as `specrepro plan` prints them, weights
    as the configs' size_gb (a config change that moves them must update the table)."""
    import re

    from specrepro.analysis.sizing import load_config

    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| (smoke|quick|full) \(`config/[\w.-]+`\) \|.*$",
                                                        (REPO / "README.md").read_text(), flags=re.MULTILINE)}
    assert set(rows) == {"smoke", "quick", "full"}
    for name, cfg_name, fmt in (("smoke", "paper-smoke", "{:.2f}"), ("quick", "paper-quick", "{:.1f}"),
                                ("full", "paper", "{:,.0f}")):
        plan = plan_jobs(load_config(REPO / "config" / f"{cfg_name}.yaml"))
        cells = [c.strip() for c in rows[name].split("|")[1:-1]]
        assert cells[2].startswith(f"{fmt.format(plan['est_gpu_hours'].sum())} ({len(plan)} engine jobs;"), (name, cells[2])
    weights = sum(m["source"]["hf"]["size_gb"] + sum(d["source"]["hf"]["size_gb"] for d in m["drafters"].values())
                  for m in smoke["models"].values())
    assert f"{weights:.0f} GB of weights" in rows["smoke"]


def test_a_functional_run_decides_no_engine_claim_and_every_other_one_as_a_gpu_run(smoke):
    """run.decides_engine_claims: false (the smoke config): every engine claim stays not measured even where the
    run measured it; the released traces' and the simulator's claims are decided exactly as on a full GPU run."""
    from specrepro.analysis.claims import NOT_MEASURED, evaluate, load_claims

    assert smoke["run"]["decides_engine_claims"] is False
    claims = load_claims(REPO / "paper" / "claims.yaml")
    # every claim measured at the paper's own value (both sides of an ordering)
    metrics = {}
    for c in claims:
        if c.measured_by and c.value is not None:
            metrics[c.measured_by] = float(c.value)
        if c.than and c.value_b is not None:
            metrics[c.than] = float(c.value_b)
    full = evaluate(claims, metrics, "gpu").set_index("id")
    smoke_run = evaluate(claims, metrics, "gpu", engine_claims=False).set_index("id")
    engine = full["evidence"] == "engine"
    assert (full.loc[engine, "status"] != NOT_MEASURED).sum() > 10  # the full run decides them
    assert (smoke_run.loc[engine, "status"] == NOT_MEASURED).all()
    assert (smoke_run.loc[~engine, "status"] == full.loc[~engine, "status"]).all()
    assert (full.loc[~engine, "status"] != NOT_MEASURED).sum() > 10


def test_the_report_of_a_functional_run_says_it_decides_no_engine_claim():
    from test_report import TEMPLATES, minimal

    from specrepro.report import render

    run_config, prov, claims = minimal("gpu")
    banner = r"\textbf{This is a functional GPU run,}"
    assert banner not in render(TEMPLATES, run_config, prov, claims, [], [])
    smoke = {**run_config, "run": {**run_config["run"], "decides_engine_claims": False}}
    tex = render(TEMPLATES, smoke, prov, claims, [], [])
    assert banner in tex and "This is a CPU run" not in tex
    assert "A functional (smoke) run decides no engine claim" in tex
