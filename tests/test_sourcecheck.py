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
from specrepro.jobspec.images import IMAGE_NAMES, METHOD_SUPPORT, OPTIONS, image_packages, image_vllm_version
from specrepro.jobspec.jobs import engine_args
from specrepro.engine.check.sourcecheck import check_job, check_records, counter_problems, method_problem, pinned_vllm_facts

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
    # jobs (k = 20) + 12 draft jobs (the oracle, the hybrid) pass keywords to vLLM, 8 bench jobs to SGLang (Fig. 2);
    # each is checked on its own engine's source
    assert len(vllm_jobs) == 76 and len(sglang_jobs) == 8 and sum(checked.values()) == 84
    assert sum(r["rule"] == "engine_trace" for r in vllm_jobs) == 13
    drafts = [r for r in vllm_jobs if r["rule"] == "engine_draft_bench"]
    assert len(drafts) == 12 and {r["vllm_version"] for r in drafts} == {"0.10.1.1", "0.11.1"}
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
    (their k = 20 trace jobs too), every job of the Qwen3-8B EAGLE-3 head (its class is not registered in 0.10.1.1)
    and today's EAGLE-3 jobs (their head's 2048 positions, uncapped on an engine that does not raise them)."""
    cfg = copy.deepcopy(paper)
    cfg["models"]["llama3.1-8b"]["drafters"]["eagle3"].pop("raise_max_position_embeddings", None)  # before issue 21
    cfg["experiments"][0]["engine_settings"] = {"max_model_len": 2048}  # and its experiment capped at them
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
                   "results/engine/llama3.1-8b-today/bench/eagle3-k3.parquet",
                   "results/engine/llama3.1-8b-today/bench/suffix-k19-bs.parquet",
                   "results/engine/llama3.1-8b-today/bench/suffix-k3.parquet",
                   "results/engine/llama3.1-8b-today/profile/eagle3-k3.timings.parquet",
                   "results/engine/llama3.1-8b-today/profile/suffix-k3.timings.parquet",
                   "results/engine/qwen3-8b-thinking/bench/eagle3-k3.parquet",
                   "results/engine/qwen3-8b-thinking/traces/eagle3.jsonl",
                   "results/engine/qwen3-8b/bench/draft_model-k3.parquet",
                   "results/engine/qwen3-8b/bench/eagle3-k3.parquet",
                   "results/engine/qwen3-8b/drafts/oracle-combine-k20.parquet",
                   "results/engine/qwen3-8b/drafts/oracle-eagle3-k20.parquet",
                   "results/engine/qwen3-8b/profile/draft_model-k3.timings.parquet",
                   "results/engine/qwen3-8b/profile/eagle3-k3.timings.parquet",
                   "results/engine/qwen3-8b/traces/draft_model.jsonl",
                   "results/engine/qwen3-8b/traces/eagle3.jsonl",
                   "results/engine/tree-qwen3-8b-vllm/bench/eagle3-k21-tree-d3b4.parquet",
                   "results/engine/tree-qwen3-8b-vllm/bench/eagle3-k3.parquet",
                   "results/engine/tree-qwen3-8b-vllm/bench/eagle3-k6-tree-d3b2.parquet"]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_support_table_agrees_with_the_source(version):
    """specrepro.jobspec.images.METHOD_SUPPORT (the config-time check) says what each version's source says, with
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
    from specrepro.engine.check.sourcecheck import pinned_suffix_corpus_facts, suffix_corpus_problem

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
        assert check_job(rec, pinned_vllm_facts(v))[0] == (
            f"{rec['job']}: speculative_config.num_speculative_tokens_per_batch_size is not a field of "
            f"SpeculativeConfig ({where}) (vLLM {v})")


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
        "source-check: ok (84 jobs; checked: 8 on SGLang 0.5.9, 34 on vLLM 0.10.1.1, 26 on vLLM 0.11.1, "
        "16 on vLLM 0.34.0)")


# --- models, scheduling, environment (issue 15 items 1, 2, 3, 5) ---------------------------------


def _todays(paper):
    """config/paper.yaml as it was before these checks: Qwen3-8B thinking on the default image (vLLM 0.10.1.1),
    llama3.1-8b at the target's context."""
    cfg = copy.deepcopy(paper)
    cfg["models"]["llama3.1-8b"]["drafters"]["eagle3"].pop("raise_max_position_embeddings", None)
    for e in cfg["experiments"]:
        if e["name"] == "qwen3-8b-thinking":
            for key in ("container", "engine_reason"):
                e.pop(key)
        if e["name"] == "llama3.1-8b":
            e.pop("engine_settings", None)
    return cfg


def test_the_qwen3_eagle3_head_is_checked_against_each_model_registry(paper, records, tmp_path):
    """Item 1: AngelSlim/Qwen3-8B_eagle3 declares LlamaForCausalLMEagle3, commented out of 0.10.1.1's registry:
    the check fails the thinking experiment on today's config and passes it on 0.11.1."""
    before, _ = check_records(engine_args(_todays(paper), tmp_path))
    arch = [p for p in before if "LlamaForCausalLMEagle3" in p]
    assert sorted(p.split(":", 1)[0] for p in arch) == ["results/engine/qwen3-8b-thinking/bench/eagle3-k3.parquet",
                                                        "results/engine/qwen3-8b-thinking/traces/eagle3.jsonl"]
    assert arch[0].endswith("drafter architecture LlamaForCausalLMEagle3 (AngelSlim/Qwen3-8B_eagle3) is not in its "
                            "model registry (vllm/model_executor/models/registry.py): the drafter does not load here; "
                            "run the experiment on an image whose vLLM registers it (vLLM 0.10.1.1)")
    thinking = [r for r in records if r["experiment"] == "qwen3-8b-thinking"]
    assert {r["vllm_version"] for r in thinking} == {"0.11.1"}
    assert check_records(thinking)[0] == []
    # Llama-3.1's EAGLE-3 head declares LlamaForCausalLM: vLLM renames it Eagle3LlamaForCausalLM, registered in all
    rec = _one(records, "results/engine/llama3.1-8b/bench/eagle3-k3.parquet")
    assert (rec["drafter_architecture"], rec["target_architecture"]) == ("LlamaForCausalLM", "LlamaForCausalLM")
    assert check_job(rec, pinned_vllm_facts("0.10.1.1")) == []
    for v in VERSIONS:
        assert [p for p in check_job(rec, pinned_vllm_facts(v)) if "architecture" in p] == []
    rec["drafter_architecture"] = "LlamaForCausalLMEagle3"
    (line,) = check_job(rec, pinned_vllm_facts("0.10.1.1"))
    assert "drafter architecture LlamaForCausalLMEagle3 (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) is not in" in line


def test_registry_facts_are_read_from_the_sdists():
    """What the architecture check relies on, in each version's own files: the registry entry, EAGLEConfig's rename,
    and 0.10.1.1's own e2e test running the Llama-3.1 EAGLE-3 head (that of Qwen3-8B commented out)."""
    from specrepro.engine.check.sourcecheck import loaded_architecture
    from specrepro.engine.check.sources import source_tree

    has = {v: pinned_vllm_facts(v).architectures for v in VERSIONS}
    assert ["LlamaForCausalLMEagle3" in has[v] for v in VERSIONS] == [False, True, True]
    assert all({"Eagle3LlamaForCausalLM", "EagleLlamaForCausalLM", "LlamaForCausalLM", "Qwen3ForCausalLM",
                "Glm4MoeForCausalLM"} <= has[v] for v in VERSIONS)
    reg = (source_tree("vllm", "0.10.1.1") / "vllm/model_executor/models/registry.py").read_text()
    assert '# "LlamaForCausalLMEagle3": ("llama_eagle3", "Eagle3LlamaForCausalLM"),' in reg
    for v in VERSIONS:
        f = pinned_vllm_facts(v)
        assert loaded_architecture(f, "eagle3", "LlamaForCausalLM") == "Eagle3LlamaForCausalLM"
        assert loaded_architecture(f, "eagle3", "LlamaForCausalLMEagle3") == "LlamaForCausalLMEagle3"
        assert loaded_architecture(f, "eagle", "LlamaForCausalLM") == "EagleLlamaForCausalLM"
        assert loaded_architecture(f, "draft_model", "Qwen3ForCausalLM") == "Qwen3ForCausalLM"
    e2e = (source_tree("vllm", "0.10.1.1") / "tests/v1/e2e/test_spec_decode.py").read_text().splitlines()
    live = [ln for ln in e2e if not ln.strip().startswith("#")]
    assert any('"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"' in ln for ln in live)
    assert not any("AngelSlim/Qwen3-8B_eagle3" in ln for ln in live)
    assert any("AngelSlim/Qwen3-8B_eagle3" in ln for ln in e2e)


def test_a_declared_architecture_is_checked_against_the_downloaded_config(paper, tmp_path):
    """Where a manifest exists, the config's architecture (and a head's max_position_embeddings) must be its
    config.json's: source-check says which key to fix, and the job stops before vLLM."""
    from specrepro.jobspec.args import BenchSpec, declared_model_problems
    from specrepro.jobspec.jobs import bench_spec, job_record, EngineJob

    head = tmp_path / "hub" / "head"
    head.mkdir(parents=True)
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"],
                                                  "max_position_embeddings": 4096}))
    man = tmp_path / "resources/models/llama3.1-8b/drafters/eagle3/manifest.json"
    man.parent.mkdir(parents=True)
    man.write_text(json.dumps({"path": str(head)}))
    job = EngineJob("engine_bench", "llama3.1-8b", "eagle3-k3", "eagle3", 3,
                    "results/engine/llama3.1-8b/bench/eagle3-k3.parquet", "logs/x.log")
    rec = job_record(paper, job, tmp_path)
    assert (rec["drafter_architecture_found"], rec["drafter_max_position_embeddings_found"]) == (
        "LlamaForCausalLMEagle3", 4096)
    problems = check_job(rec, pinned_vllm_facts("0.10.1.1"))
    assert problems == [
        f"{rec['job']}: models.llama3.1-8b.drafters.eagle3.architecture = LlamaForCausalLM but the downloaded "
        "config.json declares LlamaForCausalLMEagle3: set it to LlamaForCausalLMEagle3 (vLLM 0.10.1.1)",
        f"{rec['job']}: drafter architecture LlamaForCausalLMEagle3 (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) is not in "
        "its model registry (vllm/model_executor/models/registry.py): the drafter does not load here; run the "
        "experiment on an image whose vLLM registers it (vLLM 0.10.1.1)",
        f"{rec['job']}: models.llama3.1-8b.drafters.eagle3.max_position_embeddings = 2048 but the downloaded "
        "config.json says 4096: set it to 4096 (vLLM 0.10.1.1)"]
    spec = BenchSpec.from_json(bench_spec(paper, "llama3.1-8b", "eagle3-k3"))
    assert declared_model_problems(spec, str(tmp_path / "nowhere"), str(head)) == [
        f"models.llama3.1-8b.drafters.eagle3.architecture = LlamaForCausalLM but {head}/config.json says "
        "LlamaForCausalLMEagle3: set it to LlamaForCausalLMEagle3",
        f"models.llama3.1-8b.drafters.eagle3.max_position_embeddings = 2048 but {head}/config.json says 4096: "
        "set it to 4096"]


def test_trace_and_profile_jobs_set_the_scheduling_they_assume(records):
    """Item 2: vLLM 0.34.0 schedules asynchronously by default (read from its sdist); every trace and profile job
    passes async_scheduling=False, and the check catches a trace job on 0.34 that does not."""
    from specrepro.jobspec.images import ASYNC_SCHEDULING_DEFAULT

    assert {v: pinned_vllm_facts(v).async_default for v in VERSIONS} == ASYNC_SCHEDULING_DEFAULT == {
        "0.10.1.1": False, "0.11.1": False, "0.34.0": True}
    for r in records:
        if r["runner"] == "vllm":
            assert r["llm_kwargs"].get("async_scheduling") == (
                False if r["rule"] in ("engine_trace", "engine_profile", "engine_draft_bench") else None), r["job"]
    trace = _one(records, "results/engine/llama3-70b/traces/draft_model.jsonl")
    assert trace["vllm_version"] == "0.34.0" and check_job(trace, pinned_vllm_facts("0.34.0")) == []
    del trace["llm_kwargs"]["async_scheduling"]
    assert check_job(trace, pinned_vllm_facts("0.34.0")) == [
        f"{trace['job']}: a k = 20 trace job assumes one batch in flight, but this vLLM schedules asynchronously by "
        "default (EngineArgs.async_scheduling, resolved in VllmConfig): pass async_scheduling=False (vLLM 0.34.0)"]
    assert check_job(trace, pinned_vllm_facts("0.11.1")) == [] or all(
        "async" not in p for p in check_job(trace, pinned_vllm_facts("0.11.1")))
    prof = _one(records, "results/engine/llama3.1-8b-today/profile/none.timings.parquet")
    prof["llm_kwargs"]["async_scheduling"] = True
    (line,) = check_job(prof, pinned_vllm_facts("0.34.0"))
    assert "a profiled pass assumes one batch in flight" in line


def test_vllm_use_v1_goes_only_to_the_vllm_that_reads_it(records):
    """Item 5: VLLM_USE_V1 is read by 0.10.1.1 only (0.11.1 and 0.34.0's envs.py have no such variable)."""
    from specrepro.jobspec.images import VLLM_ENV_READ

    for var, versions in VLLM_ENV_READ.items():
        assert tuple(v for v in VERSIONS if var in pinned_vllm_facts(v).env_vars) == versions
    for r in records:
        if r["runner"] == "vllm":
            assert ("VLLM_USE_V1" in r["env"]) == (r["vllm_version"] == "0.10.1.1"), r["job"]
            assert r["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    rec = _one(records, "results/engine/llama3.1-8b-today/bench/none.parquet")
    rec["env"]["VLLM_USE_V1"] = "1"  # what every job passed before
    assert check_job(rec, pinned_vllm_facts("0.34.0")) == [
        f"{rec['job']}: env VLLM_USE_V1 is not a variable this vLLM reads (vllm/envs.py): leave it out "
        "(specrepro.jobspec.images.VLLM_ENV_READ) (vLLM 0.34.0)"]


def test_an_eagle_head_past_its_positions_is_caught(paper, records, tmp_path):
    """Item 3: the Llama-3.1 EAGLE-3 head serves 2048 positions; 0.10.1.1 and 0.11.1 do not raise them (0.34.0
    does, read from each sdist), so its jobs there must run at max_model_len <= 2048."""
    from specrepro.jobspec.images import EXTENDS_DRAFT_POSITIONS

    assert {v: pinned_vllm_facts(v).extends_draft_positions for v in VERSIONS} == EXTENDS_DRAFT_POSITIONS
    before, _ = check_records(engine_args(_todays(paper), tmp_path))
    pos = sorted(p.split(":", 1)[0] for p in before if "max_position_embeddings 2048" in p)
    assert pos == ["results/engine/llama3.1-8b/bench/eagle3-k3.parquet",
                   "results/engine/llama3.1-8b/drafts/hybrid-adaptive-eagle3-k20.parquet",
                   "results/engine/llama3.1-8b/drafts/hybrid-ngram-first-eagle3-k5.parquet",
                   "results/engine/llama3.1-8b/drafts/oracle-combine-k20.parquet",
                   "results/engine/llama3.1-8b/drafts/oracle-eagle3-k20.parquet",
                   "results/engine/llama3.1-8b/profile/eagle3-k3.timings.parquet",
                   "results/engine/llama3.1-8b/traces/eagle3.jsonl"]
    for r in records:  # issue 21 item 3: uncapped, the head served with raised positions (accepted)
        if r["experiment"] == "llama3.1-8b":
            assert "max_model_len" not in r["llm_kwargs"], r["job"]
            assert r["drafter_raise_max_position_embeddings"] == (r["method"] == "eagle3"), r["job"]
    assert [p for p in check_records(records)[0] if "max_position_embeddings" in p] == []
    today = _one(records, "results/engine/llama3.1-8b-today/bench/eagle3-k3.parquet")
    assert "max_model_len" not in today["llm_kwargs"] and check_job(today, pinned_vllm_facts("0.34.0")) == []


def test_profiled_passes_share_max_num_batched_tokens(records):
    """Item 5: Fig. 4's no-SD pass needs 128 x 1024 tokens in one step for its cost-fit sweep; every SD pass takes
    the same value, so all methods chunk their prefill alike (before: no SD 131072, SD vLLM's default 16384)."""
    prof = [r for r in records if r["rule"] == "engine_profile"]
    assert len(prof) == 16
    assert {r["llm_kwargs"]["max_num_batched_tokens"] for r in prof} == {131072}
    assert all("max_num_batched_tokens" not in r["llm_kwargs"] for r in records
               if r["runner"] == "vllm" and r["rule"] != "engine_profile")


# --- draft jobs: the oracle, controlled profiles, the hybrid (issues 22 and 23) -------------------------


def test_draft_jobs_are_checked_with_their_hook_table(records):
    """A draft job runs only on a vLLM where the plugin substitutes drafts, with synchronous scheduling: the paper's
    (0.10.1.1, 0.11.1) pass and their draft hook tables fit their sdists; moved to 0.34.0 (the table is source-checked
    only there, and the engine schedules asynchronously by default) the same job is refused with both reasons."""
    rec = _one(records, "results/engine/llama3.1-8b/drafts/hybrid-adaptive-eagle3-k20.parquet")
    assert rec["draft"] == {"mode": "hybrid", "of": None, "policy": "adaptive", "drafter": "eagle3"}
    assert (rec["vllm_version"], rec["llm_kwargs"]["async_scheduling"]) == ("0.10.1.1", False)
    assert rec["llm_kwargs"]["speculative_config"]["num_speculative_tokens"] == 20
    assert check_records([rec]) == ([], {"vLLM 0.10.1.1": 1})
    assert [pinned_vllm_facts(v).draft_hook_problems for v in VERSIONS] == [[], [], []]
    moved = copy.deepcopy(rec)
    moved.update(vllm_version="0.34.0", engine_version="0.34.0", image="latest")
    del moved["llm_kwargs"]["async_scheduling"]
    problems, _ = check_records([moved])
    job = rec["job"]
    assert [p for p in problems if "draft" in p.split(": ", 1)[1]] == [
        f"{job}: a draft job (the plugin replaces each step's drafts per request) assumes one batch in flight, but this "
        "vLLM schedules asynchronously by default (EngineArgs.async_scheduling, resolved in VllmConfig): pass "
        "async_scheduling=False (vLLM 0.34.0)",
        f"{job}: hybrid: the plugin's draft hook for this vLLM is source-checked only and does not substitute drafts "
        "(specrepro.jobspec.hooks.DRAFT_TABLES; it does on 0.10.x, 0.11.x, 0.32.x): run the experiment "
        "on such an image (vLLM 0.34.0)"]


def test_a_draft_hook_that_no_longer_fits_refuses_the_draft_jobs(records, tmp_path):
    """The draft hook table is read against the engine's source: with 0.11.1's take_draft_token_ids renamed, every
    draft job on 0.11.1 gets one line naming the hook; a bench job is not affected."""
    import dataclasses
    import shutil

    from specrepro.engine.check.hookcheck import check_draft_table, module_file
    from specrepro.engine.check.sourcecheck import draft_problems
    from specrepro.engine.check.sources import source_tree
    from specrepro.jobspec.hooks import draft_table_for

    root, table = source_tree("vllm", "0.11.1"), draft_table_for("0.11.1")
    for mod in {h.module for h in table.hooks} | {r.module for r in table.reads}:
        src = module_file(root, mod)
        (tmp_path / src.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, tmp_path / src.relative_to(root))
    assert check_draft_table(tmp_path, "0.11.1") == []
    runner = tmp_path / "vllm" / "v1" / "worker" / "gpu_model_runner.py"
    runner.write_text(runner.read_text().replace("def take_draft_token_ids(", "def take_drafts("))
    broken = dataclasses.replace(pinned_vllm_facts("0.11.1"), draft_hook_problems=check_draft_table(tmp_path, "0.11.1"))
    rec = _one(records, "results/engine/qwen3-8b/drafts/oracle-eagle3-k20.parquet")
    assert rec["vllm_version"] == "0.11.1" and draft_problems(rec, pinned_vllm_facts("0.11.1")) == []
    assert draft_problems(rec, broken) == [
        "oracle: draft hook: vLLM 0.11.1: vllm.v1.worker.gpu_model_runner.GPUModelRunner.take_draft_token_ids (hook "
        "family vllm-0.10/0.11 draft, draft_ids): GPUModelRunner has no method take_draft_token_ids"]
    assert draft_problems(_one(records, "results/engine/qwen3-8b/bench/eagle3-k3.parquet"), broken) == []
