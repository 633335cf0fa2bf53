"""vLLM 0.11.1's CUDA-graph shape rule under speculative decoding, in the config check and the source check.

With full decode CUDA graphs (its default, FULL_AND_PIECEWISE, where the attention backend allows) 0.11.1's
``GPUModelRunner`` calls ``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode(k + 1, TP)``, which raises
"Can't determine cudagraph shapes ..." unless ``max(k + 1, TP)`` is a multiple of both. GLM-4.5-Air's k = 20 trace
jobs (21 and 4) hit it; its k = 3 jobs (4 and 4) do not.

The issue's made-up refused job "TP 2, k = 3 with full graphs" is in fact accepted by that code (k + 1 = 4 is a
multiple of 2); the made-up refused job here is TP 2, k = 2 (3 and 2), and TP 2, k = 3 is checked to pass.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from _infra import REPO
from specrepro.config import config_problems, validate_schema
from specrepro.engine.check.sourcecheck import check_job, check_records, pinned_vllm_facts
from specrepro.jobspec.images import SPEC_CUDAGRAPH_SHAPES, cudagraph_shape_problem
from specrepro.jobspec.jobs import engine_args

VERSIONS = ("0.10.1.1", "0.11.1", "0.34.0")
GLM_TRACES = ["results/engine/glm-4.5-air/traces/mtp.jsonl", "results/engine/glm-4.5-air/traces/ngram.jsonl"]


def _config(name: str = "paper.yaml") -> dict:
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    return cfg


def _unfixed(cfg: dict) -> dict:
    """``cfg`` with GLM-4.5-Air's trace jobs back on the default (full decode) CUDA graphs."""
    cfg = copy.deepcopy(cfg)
    for e in cfg["experiments"]:
        (e.get("engine_settings") or {}).pop("trace_compilation_config", None)
    return cfg


def test_the_rule_by_hand():
    assert cudagraph_shape_problem(20, 4) and "k + 1 = 21" in cudagraph_shape_problem(20, 4)
    assert cudagraph_shape_problem(3, 4) is None  # 4 and 4
    assert cudagraph_shape_problem(2, 2) is not None  # 3 and 2
    assert cudagraph_shape_problem(3, 2) is None  # 4 is a multiple of 2: the example starts
    assert cudagraph_shape_problem(7, 4) is None and cudagraph_shape_problem(1, 4) is None  # 8; max(2, 4) = 4
    assert cudagraph_shape_problem(20, 1) is None  # no TP, no second factor
    assert cudagraph_shape_problem(20, 4, "PIECEWISE") is None and cudagraph_shape_problem(20, 4, "FULL") is None
    assert cudagraph_shape_problem(20, 4, "FULL_DECODE_ONLY") is not None
    assert cudagraph_shape_problem(20, 4, enforce_eager=True) is None


def test_the_version_table_agrees_with_the_sdists():
    facts = {v: pinned_vllm_facts(v) for v in VERSIONS}
    assert {v: f.spec_cudagraph_shapes for v, f in facts.items()} == SPEC_CUDAGRAPH_SHAPES
    assert facts["0.11.1"].default_cudagraph_mode == "FULL_AND_PIECEWISE"


def test_the_config_check_refuses_the_unfixed_glm_trace_jobs():
    cfg = _config()
    assert config_problems(cfg) == []
    found = config_problems(_unfixed(cfg))
    assert all("k + 1 = 21" in p and "experiments[5].engine_settings.trace_compilation_config" in p for p in found)
    assert sorted(p.split("job ", 1)[1].split(" ")[0] for p in found) == GLM_TRACES
    assert config_problems(_config("paper-quick.yaml")) == []  # its GLM-4.5-Air records no traces


def test_the_source_check_refuses_the_unfixed_glm_trace_jobs_and_passes_the_fixed(tmp_path):
    cfg = _config()
    before, _ = check_records(engine_args(_unfixed(cfg), tmp_path))
    assert sorted(p.split(":", 1)[0] for p in before if "cudagraph" in p) == GLM_TRACES
    after, _ = check_records(engine_args(cfg, tmp_path))
    assert [p for p in after if "cudagraph" in p] == []
    fixed = [r for r in engine_args(cfg, tmp_path) if r["job"] in GLM_TRACES]
    assert [r["llm_kwargs"]["compilation_config"] for r in fixed] == [{"cudagraph_mode": "PIECEWISE"}] * 2
    bench = [r for r in engine_args(cfg, tmp_path) if r["experiment"] == "glm-4.5-air" and r["rule"] != "engine_trace"]
    assert bench and all("compilation_config" not in r["llm_kwargs"] for r in bench)  # timed jobs keep the default


def test_a_made_up_tp2_job_with_full_graphs(tmp_path):
    """TP 2, k = 2 with full decode graphs is refused on 0.11.1 only; TP 2, k = 3 and the PIECEWISE job pass."""
    cfg = _config()
    rec = next(r for r in engine_args(cfg, tmp_path) if r["job"].endswith("qwen3-8b/bench/eagle3-k3.parquet"))
    assert rec["vllm_version"] == "0.11.1" and check_job(rec, pinned_vllm_facts("0.11.1")) == []
    for k, tp, mode, refused in ((2, 2, None, True), (2, 2, "FULL_AND_PIECEWISE", True), (3, 2, None, False),
                                 (2, 2, "PIECEWISE", False)):
        r = copy.deepcopy(rec)
        r["llm_kwargs"]["tensor_parallel_size"] = tp
        r["llm_kwargs"]["speculative_config"]["num_speculative_tokens"] = k
        if mode:
            r["llm_kwargs"]["compilation_config"] = {"cudagraph_mode": mode}
        got = [p for p in check_job(r, pinned_vllm_facts("0.11.1")) if "cudagraph" in p]
        assert bool(got) == refused, (k, tp, mode, got)
        for v in ("0.10.1.1", "0.34.0"):  # no such rule there
            assert [p for p in check_job(r, pinned_vllm_facts(v)) if "cudagraph" in p] == []
