"""Every engine job of the paper config against the source of the vLLM it runs on (pinned sdists, no GPU).

The sdists are downloaded into ``$SPECREPRO_CACHE/sdists`` when the cache lacks them (SHA-256 checked).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml

from _infra import REPO, env_with
from specrepro.config import validate_schema
from specrepro.engine.images import IMAGE_NAMES, METHOD_SUPPORT, OPTIONS, image_packages, image_vllm_version
from specrepro.engine.jobs import engine_args
from specrepro.engine.sourcecheck import check_job, check_records, counter_problems, method_problem, pinned_vllm_facts

VERSIONS = ("0.10.1.1", "0.11.1", "0.34.0")


@pytest.fixture(scope="module")
def paper():
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    return cfg


@pytest.fixture(scope="module")
def records(paper, tmp_path_factory):
    return list(engine_args(paper, tmp_path_factory.mktemp("work")))


def test_every_paper_job_passes_the_source_check_of_its_engine(records):
    problems, checked = check_records(records)
    assert problems == []
    vllm_jobs = [r for r in records if r["runner"] == "vllm"]
    sglang_jobs = [r for r in records if r["runner"] == "sglang"]
    # 35 bench (8 of them Fig. 2's vLLM trees, 6 llama3.1-8b-today's) + 16 profile jobs (4 today's) + 13 trace
    # jobs (k = 20) pass keywords to vLLM, 8 bench jobs to SGLang (Fig. 2); each is checked on its own engine's source
    assert len(vllm_jobs) == 64 and len(sglang_jobs) == 8 and sum(checked.values()) == 72
    assert sum(r["rule"] == "engine_trace" for r in vllm_jobs) == 13
    assert checked == {**{f"vLLM {v}": sum(r["vllm_version"] == v for r in vllm_jobs) for v in VERSIONS},
                       "SGLang 0.5.9": 8}
    trees = [r for r in vllm_jobs if "speculative_token_tree" in (r["llm_kwargs"].get("speculative_config") or {})]
    assert len(trees) == 4 and {r["vllm_version"] for r in trees} == {"0.10.1.1", "0.11.1"}
    assert all(r["env"]["VLLM_ATTENTION_BACKEND"] == "TREE_ATTN" for r in trees)


def test_sglang_jobs_are_checked_against_sglang_and_a_wrong_argument_is_named(records):
    rec = _one(records, "results/engine/tree-qwen3-8b-sglang/bench/eagle3-k6-tree-d3b2.parquet")
    assert (rec["image"], rec["engine"], rec["engine_version"], rec["llm_kwargs"]) == ("sglang", "sglang", "0.5.9", None)
    assert check_records([rec]) == ([], {"SGLang 0.5.9": 1})
    rec["sglang_kwargs"]["speculative_topk"] = 2  # the real field is speculative_eagle_topk
    rec["sampling_params"]["gsm8k"]["max_tokens"] = 8  # SGLang's is max_new_tokens
    problems, _ = check_records([rec])
    assert problems == [
        f"{rec['job']}: speculative_topk: not a field of SGLang 0.5.9's ServerArgs (srt/server_args.py)",
        f"{rec['job']}: sampling parameter max_tokens: not a parameter of SGLang 0.5.9's SamplingParams"]


def test_a_vllm_tree_on_an_image_without_the_tree_path_is_caught(records):
    rec = _one(records, "results/engine/tree-qwen3-8b-vllm/bench/eagle3-k21-tree-d3b4.parquet")
    assert check_job(rec, pinned_vllm_facts("0.11.1")) == []
    rec["vllm_version"] = "0.34.0"
    problems, _ = check_records([rec])
    assert problems == [
        f"{rec['job']}: speculative_config.speculative_token_tree is not a field of SpeculativeConfig "
        "(vllm/config/speculative.py) (vLLM 0.34.0)",
        f"{rec['job']}: VLLM_ATTENTION_BACKEND = 'TREE_ATTN': not a backend of vLLM 0.34.0"]


def _one(records, job):
    return copy.deepcopy(next(r for r in records if r["job"] == job))


def test_a_wrong_key_is_caught_and_named(records):
    rec = _one(records, "results/engine/llama3.1-8b/bench/eagle3-k3.parquet")
    rec["llm_kwargs"]["enable_prefix_cache"] = False  # the real field is enable_prefix_caching
    rec["llm_kwargs"]["speculative_config"]["num_spec_tokens"] = 3
    rec["sampling_params"]["cnn"]["max_new_tokens"] = 8
    found = check_job(rec, pinned_vllm_facts("0.10.1.1"))
    job = "results/engine/llama3.1-8b/bench/eagle3-k3.parquet"
    assert found == [
        f"{job}: llm_kwargs.enable_prefix_cache is not a field of EngineArgs (vllm/engine/arg_utils.py) nor a "
        "parameter of LLM.__init__ (vLLM 0.10.1.1)",
        f"{job}: speculative_config.num_spec_tokens is not a field of SpeculativeConfig (vllm/config/__init__.py) "
        "(vLLM 0.10.1.1)",
        f"{job}: sampling_params[cnn].max_new_tokens is not a field of SamplingParams (vllm/sampling_params.py) "
        "(vLLM 0.10.1.1)",
    ]


def test_an_unsupported_method_is_caught(records):
    """Defects 2 and 3 at the source: draft models raise NotImplementedError on 0.10.1.1 and 0.11.1; GLM's MTP
    without a model is filled in by 0.11.1 but not by 0.10.1.1; an unknown method is not in the literal."""
    draft = _one(records, "results/engine/llama3-70b/bench/draft_model-k3.parquet")
    assert draft["image"] == "latest" and check_job(draft, pinned_vllm_facts("0.34.0")) == []
    for v in ("0.10.1.1", "0.11.1"):
        assert check_job(draft, pinned_vllm_facts(v)) == [
            f"{draft['job']}: speculative_config.method: vLLM {v} raises NotImplementedError for method 'draft_model' "
            f"(vLLM {v})"]
    mtp = _one(records, "results/engine/glm-4.5-air/bench/mtp-k3.parquet")
    assert mtp["image"] == "v0111" and mtp["llm_kwargs"]["speculative_config"] == {"method": "deepseek_mtp",
                                                                                   "num_speculative_tokens": 3}
    assert check_job(mtp, pinned_vllm_facts("0.11.1")) == []
    mtp["target_model_type"] = "glm4_moe"
    (line,) = check_job(mtp, pinned_vllm_facts("0.10.1.1"))
    assert "fills the speculative model in (no 'model' given) only for methods" in line and "deepseek_v3, mimo" in line
    mtp["target_model_type"] = "deepseek_v3"
    assert check_job(mtp, pinned_vllm_facts("0.10.1.1")) == []
    mtp["llm_kwargs"]["speculative_config"]["method"] = "eagle4"
    (line,) = check_job(mtp, pinned_vllm_facts("0.34.0"))
    assert "method 'eagle4' is not a SpeculativeMethod of vLLM 0.34.0" in line


def test_the_old_single_image_fails_the_check(paper, tmp_path):
    """Every job on the paper image (the code before the per-job choice): the draft-model and GLM MTP jobs fail
    (their k = 20 trace jobs too)."""
    cfg = copy.deepcopy(paper)
    for e in cfg["experiments"]:
        e.pop("container", None)
        for m in e["methods"]:
            m.pop("container", None)
    problems, _ = check_records(engine_args(cfg, tmp_path))
    bad = sorted({p.split(":", 1)[0] for p in problems})
    assert bad == ["results/engine/glm-4.5-air/bench/mtp-k3.parquet",
                   "results/engine/glm-4.5-air/traces/mtp.jsonl",
                   "results/engine/llama3-70b/bench/draft_model-k3.parquet",
                   "results/engine/llama3-70b/profile/draft_model-k3.timings.parquet",
                   "results/engine/llama3-70b/traces/draft_model.jsonl",
                   "results/engine/llama3.1-8b-today/bench/eagle3-k10-bs.parquet",
                   "results/engine/llama3.1-8b-today/bench/suffix-k19-bs.parquet",
                   "results/engine/llama3.1-8b-today/bench/suffix-k3.parquet",
                   "results/engine/llama3.1-8b-today/profile/suffix-k3.timings.parquet",
                   "results/engine/qwen3-8b/bench/draft_model-k3.parquet",
                   "results/engine/qwen3-8b/profile/draft_model-k3.timings.parquet",
                   "results/engine/qwen3-8b/traces/draft_model.jsonl"]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_support_table_agrees_with_the_source(version):
    """specrepro.engine.images.METHOD_SUPPORT (the config-time check) says what each version's source says, with
    the packages of the image that installs that version; k_by_batch_size: whether SpeculativeConfig has the field."""
    facts = pinned_vllm_facts(version)
    (image,) = [n for n in IMAGE_NAMES if image_vllm_version(n) == version]
    as_passed = {"ngram": ("ngram", False), "eagle": ("eagle", True), "eagle3": ("eagle3", True),
                 "draft_model": ("draft_model", True), "mtp": ("deepseek_mtp", False), "suffix": ("suffix", False)}
    assert set(METHOD_SUPPORT[version]) == {"none", *as_passed, *OPTIONS}
    for method, why in METHOD_SUPPORT[version].items():
        if method == "none":
            continue
        if method == "k_by_batch_size":
            refused = None if "num_speculative_tokens_per_batch_size" in facts.spec_fields else "no field"
        else:
            name, has_model = as_passed[method]
            refused = method_problem(facts, name, has_model, target_model_type="glm4_moe",
                                     packages=image_packages(image), image=image)
        assert (refused is None) == (why is None), (version, method, refused, why)


def test_a_method_needing_a_package_its_image_lacks_is_caught(records):
    """vLLM 0.11.1 has suffix decoding but raises ImportError without arctic-inference, which its image lacks."""
    facts = pinned_vllm_facts("0.11.1")
    assert facts.method_packages == {"suffix": "arctic-inference==0.1.1"}
    assert pinned_vllm_facts("0.34.0").method_packages == {}  # a built-in speculator there
    rec = _one(records, "results/engine/llama3.1-8b-today/bench/suffix-k3.parquet")
    assert rec["image"] == "latest" and rec["llm_kwargs"]["speculative_config"] == {
        "method": "suffix", "num_speculative_tokens": 3, "suffix_decoding_max_cached_requests": 0}
    assert check_job(rec, pinned_vllm_facts("0.34.0"), image_packages("latest")) == []
    rec["image"] = "v0111"
    assert check_job(rec, facts, image_packages("v0111")) == [
        f"{rec['job']}: speculative_config.method: vLLM 0.11.1 needs arctic-inference==0.1.1 for method 'suffix' "
        "(ImportError without it), which image v0111 (containers/vllm-v0111.lock) does not install (vLLM 0.11.1)"]
    assert check_job(rec, facts, image_packages("v0111") | {"arctic_inference"}) == []


def test_suffix_jobs_turn_the_cross_request_corpus_off(records):
    """Item 12: vLLM 0.34.0's suffix decoding matches against earlier requests' outputs unless
    suffix_decoding_max_cached_requests is 0 (the value its speculator gates the corpus on); a job leaving the
    default (10000) is caught, naming the value and the line; 0.11.1's source shows no such value."""
    from specrepro.engine.sourcecheck import pinned_suffix_corpus_facts, suffix_corpus_problem

    assert pinned_suffix_corpus_facts("0.34.0") == (10000, 0, "vllm/v1/worker/gpu/spec_decode/suffix/speculator.py:538")
    jobs = [r for r in records if (r["llm_kwargs"] or {}).get("speculative_config", {}).get("method") == "suffix"]
    assert {r["config"] for r in jobs} == {"suffix-k3", "suffix-k19-bs"} and all(r["vllm_version"] == "0.34.0" for r in jobs)
    for rec in map(copy.deepcopy, jobs):
        assert rec["llm_kwargs"]["speculative_config"]["suffix_decoding_max_cached_requests"] == 0
        assert suffix_corpus_problem(rec) is None and check_records([rec])[0] == []
        del rec["llm_kwargs"]["speculative_config"]["suffix_decoding_max_cached_requests"]
        assert check_records([rec])[0] == [
            f"{rec['job']}: speculative_config.suffix_decoding_max_cached_requests = 10000 (default 10000) keeps suffix "
            "decoding's cross-request corpus: repeated prompts accept earlier requests' outputs; set 0 "
            "(vllm/v1/worker/gpu/spec_decode/suffix/speculator.py:538) (vLLM 0.34.0)"]
        rec["vllm_version"] = "0.11.1"
        assert "shows no value of suffix_decoding_max_cached_requests" in suffix_corpus_problem(rec)
    other = _one(records, "results/engine/llama3.1-8b/bench/eagle3-k3.parquet")
    assert suffix_corpus_problem(other) is None


def test_k_by_batch_size_is_checked_on_the_jobs_own_engine(records):
    """num_speculative_tokens_per_batch_size: a SpeculativeConfig field of 0.34.0 only."""
    rec = _one(records, "results/engine/llama3.1-8b-today/bench/eagle3-k10-bs.parquet")
    sc = rec["llm_kwargs"]["speculative_config"]
    assert rec["image"] == "latest" and sc["num_speculative_tokens"] == 10
    assert sc["num_speculative_tokens_per_batch_size"] == [[1, 7, 10], [8, 15, 7], [16, 31, 6], [32, 63, 4],
                                                          [64, 127, 3], [128, 128, 2]]
    assert check_job(rec, pinned_vllm_facts("0.34.0")) == []
    for v, where in (("0.10.1.1", "vllm/config/__init__.py"), ("0.11.1", "vllm/config/speculative.py")):
        assert check_job(rec, pinned_vllm_facts(v)) == [
            f"{rec['job']}: speculative_config.num_speculative_tokens_per_batch_size is not a field of "
            f"SpeculativeConfig ({where}) (vLLM {v})"]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_counters_the_project_reads_exist(version):
    facts = pinned_vllm_facts(version)
    assert counter_problems(facts) == []
    facts = copy.copy(facts)
    facts.metric_strings = facts.metric_strings - {"vllm:spec_decode_num_accepted_tokens_per_pos"}
    facts.has_get_metrics = False
    assert counter_problems(facts) == [
        f"vLLM {version}: counter 'vllm:spec_decode_num_accepted_tokens_per_pos' not found in "
        "vllm/v1/spec_decode/metrics.py or vllm/v1/metrics/reader.py",
        f"vLLM {version}: LLM.get_metrics does not exist (vllm/entrypoints/llm.py)"]


def test_source_check_verb(paper, tmp_path):
    cfg = tmp_path / "run_config.json"
    cfg.write_text(json.dumps(paper))
    proc = subprocess.run([sys.executable, "-m", "specrepro", "source-check", "--run-config", str(cfg),
                           "--workdir", str(tmp_path)], capture_output=True, text=True, env=env_with(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "source-check: ok (72 jobs; checked: 8 on SGLang 0.5.9, 30 on vLLM 0.10.1.1, 18 on vLLM 0.11.1, "
        "16 on vLLM 0.34.0)")
