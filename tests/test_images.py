"""Engine choice per job: images, their labels, the method check before any job, deviations; progress lines."""

from __future__ import annotations

import copy
import io
import subprocess
import sys

import pytest
import yaml

from _infra import REPO, env_with
from specrepro.config import config_problems, validate_schema
from specrepro.jobspec.images import (
    IMAGE_NAMES, definition_path, deviation, engine_table, image_engine, image_vllm_version, job_image, min_driver,
    used_images,
)
from specrepro.engine.run.progress import Progress, duration


@pytest.fixture(scope="module")
def paper():
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    return cfg


def test_images_and_their_labels():
    assert [image_vllm_version(n) for n in IMAGE_NAMES] == ["0.10.1.1", "0.11.1", "0.34.0"]
    assert [min_driver(n) for n in IMAGE_NAMES] == [(570, 26), (570, 26), (580, 65)]
    # Fig. 2's SGLang image: its own definition and labels (CUDA 12.8 needs driver 570.26)
    assert definition_path("sglang") == REPO / "containers" / "sglang.def"
    assert image_engine("sglang") == ("sglang", "0.5.9") and image_engine("v0111") == ("vllm", "0.11.1")
    assert min_driver("sglang") == (570, 26)


def test_paper_config_chooses_the_papers_engines(paper):
    exps = {e["name"]: e for e in paper["experiments"]}
    assert job_image(paper, exps["llama3.1-8b"], "eagle3", 3) == "paper"
    assert job_image(paper, exps["llama3-70b"], "draft_model", 3) == "latest"
    assert job_image(paper, exps["llama3-70b"], "none") == "paper"
    assert job_image(paper, exps["qwen3-8b"], "eagle3", 3) == "v0111"
    assert job_image(paper, exps["qwen3-8b"], "draft_model", 3) == "latest"
    # its EAGLE-3 head's class is not in 0.10.1.1's registry: the thinking runs are on 0.11.1 (tests/test_sourcecheck.py)
    assert job_image(paper, exps["qwen3-8b-thinking"], "eagle3", 3) == "v0111"
    assert job_image(paper, exps["qwen3-8b-thinking"], "none") == "v0111"
    assert job_image(paper, exps["glm-4.5-air"], "mtp", 3) == "v0111"
    # today's methods (suffix decoding, k by batch size) and their experiment's baselines: vLLM 0.34.0
    for method, k, bs in (("none", None, None), ("eagle3", 3, False), ("eagle3", 10, True), ("suffix", 16, True)):
        assert job_image(paper, exps["llama3.1-8b-today"], method, k, by_batch_size=bs) == "latest"
    # Fig. 2: SGLang's experiments in the sglang image; vLLM's tree path on each model's Fig. 1 engine
    assert job_image(paper, exps["tree-qwen3-8b-sglang"], "eagle3", 21, {"depth": 3, "branching": 4}) == "sglang"
    assert job_image(paper, exps["tree-llama3-70b-sglang"], "none") == "sglang"
    assert job_image(paper, exps["tree-qwen3-8b-vllm"], "eagle3", 6, {"depth": 3, "branching": 2}) == "v0111"
    assert job_image(paper, exps["tree-llama3-70b-vllm"], "eagle", 21, {"depth": 3, "branching": 4}) == "paper"
    assert used_images(paper) == ["paper", "v0111", "latest", "sglang"]
    cpu = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    assert job_image(cpu, cpu["experiments"][0], "eagle", 3) is None and used_images(cpu) == []
    devs = {(r["exp"], r["config"]): r["deviation"] for r in engine_table(paper)}
    assert devs[("qwen3-8b", "none")] == "vLLM 0.11.1rc1 -> vLLM 0.11.1"
    assert devs[("llama3-70b", "draft_model-k3")] == "a later vLLM snapshot -> vLLM 0.34.0"
    assert devs[("llama3.1-8b", "eagle-k3")] is None
    assert devs[("qwen3-8b-thinking", "eagle3-k3")] == devs[("qwen3-8b-thinking", "none")] == (
        "vLLM 0.10.1.1 -> vLLM 0.11.1: AngelSlim/Qwen3-8B_eagle3 declares LlamaForCausalLMEagle3, which vLLM 0.10.1.1 "
        "does not register (0.11.1 does)")
    assert devs[("llama3.1-8b-today", "eagle3-k10-bs")] == "none (beyond the paper) -> vLLM 0.34.0"
    assert devs[("tree-qwen3-8b-sglang", "eagle3-k21-tree-d3b4")] is None  # SGLang 0.5.9, as the paper
    assert devs[("tree-qwen3-8b-vllm", "eagle3-k6-tree-d3b2")] == "SGLang 0.5.9 -> vLLM 0.11.1"
    assert devs[("tree-llama3-70b-vllm", "none")] == "SGLang 0.5.9 -> vLLM 0.10.1.1"
    rows = {(r["exp"], r["config"]): r for r in engine_table(paper)}
    sg = rows[("tree-llama3-70b-sglang", "eagle-k3")]
    assert (sg["image"], sg["engine"], sg["engine_version"], sg["vllm_version"]) == ("sglang", "sglang", "0.5.9", None)
    assert deviation("vLLM 0.10.1.1", "0.10.1.1") is None and deviation(None, "0.34.0") is None


def _single_image(paper, name):
    cfg = copy.deepcopy(paper)
    cfg["engine"]["container"] = name
    # as before issue 21: the Llama-3.1 EAGLE-3 head served with its own 2048 positions
    cfg["models"]["llama3.1-8b"]["drafters"]["eagle3"].pop("raise_max_position_embeddings", None)
    cfg["experiments"][0]["engine_settings"] = {"max_model_len": 2048}  # and its experiment capped at them
    for e in cfg["experiments"]:
        e.pop("container", None)
        for m in e["methods"]:
            m.pop("container", None)
    return cfg


def test_a_method_its_image_cannot_run_stops_the_config(paper):
    """Defects 2 and 3: on the paper image alone, draft models and GLM's MTP were scheduled and failed at LLM()."""
    problems = config_problems(_single_image(paper, "paper"))
    assert problems == [
        'config error: engine.container = "paper": experiment llama3-70b method draft_model cannot run on vLLM '
        "0.10.1.1: its V1 engine raises NotImplementedError for draft-model speculative decoding; set "
        "experiments[1].methods[4].container to latest",
        'config error: engine.container = "paper": experiment qwen3-8b method draft_model cannot run on vLLM '
        "0.10.1.1: its V1 engine raises NotImplementedError for draft-model speculative decoding; set "
        "experiments[2].methods[4].container to latest",
        'config error: engine.container = "paper": experiment llama3.1-8b-today method eagle3 with k_by_batch_size '
        "cannot run on vLLM 0.10.1.1: its SpeculativeConfig has no num_speculative_tokens_per_batch_size; set "
        "experiments[4].methods[3].container to latest",
        'config error: engine.container = "paper": experiment llama3.1-8b-today method suffix cannot run on vLLM '
        "0.10.1.1: suffix is not one of its speculative methods; set experiments[4].methods[4].container to latest",
        'config error: engine.container = "paper": experiment llama3.1-8b-today method suffix with k_by_batch_size '
        "cannot run on vLLM 0.10.1.1: suffix is not one of its speculative methods; its SpeculativeConfig has no "
        "num_speculative_tokens_per_batch_size; set experiments[4].methods[5].container to latest",
        'config error: engine.container = "paper": experiment glm-4.5-air method mtp cannot run on vLLM 0.10.1.1: '
        "it fills the MTP model in only for deepseek_v3/mimo targets (others fail at LLM() with "
        "'num_speculative_tokens was provided without speculative model'); set experiments[5].methods[2].container "
        "to v0111 or latest",
    ] + [  # today's EAGLE-3 jobs at the target's context: 0.10.1.1 does not raise the head's 2048 positions
        f"config error: experiments[4].methods[{j}] = eagle3: its head has max_position_embeddings 2048 "
        "(models.llama3.1-8b.drafters.eagle3) but the experiment's context is the target model default on vLLM "
        "0.10.1.1, which does not raise the head's positions; set experiments[4].engine_settings.max_model_len: 2048, or "
        "models.llama3.1-8b.drafters.eagle3.raise_max_position_embeddings: true"
        for j in (2, 3)]
    assert config_problems(paper) == []
    # moved to the latest image, the draft jobs are refused (0.34.0 has no draft-substitution hook): that, and only that
    latest = config_problems(_single_image(paper, "latest"))
    assert latest and all(".drafts[" in p and "has no draft-substitution hook" in p for p in latest), latest
    no_drafts = _single_image(paper, "latest")
    for e in no_drafts["experiments"]:
        e.pop("drafts", None)
    assert config_problems(no_drafts) == []
    cfg = _single_image(paper, "v0111")
    problems = config_problems(cfg)
    assert [p.split(":")[0] for p in problems] == ["config error"] * 7
    # vLLM 0.11.1 has suffix decoding, but only with a package its image does not install
    assert problems[3] == (
        'config error: engine.container = "v0111": experiment llama3.1-8b-today method suffix cannot run on vLLM '
        "0.11.1: it runs suffix decoding only through arctic-inference==0.1.1 (config/speculative.py raises "
        "ImportError without it), which the v0111 image does not install; set experiments[4].methods[4].container "
        "to latest")
    cfg["experiments"][1]["methods"][4]["container"] = "paper"
    assert config_problems(cfg)[0].startswith('config error: experiments[1].methods[4].container = "paper": ')
    cfg = copy.deepcopy(paper)
    cfg["experiments"][4]["container"] = "v0111"
    assert [p.split(": experiment llama3.1-8b-today ")[0] for p in config_problems(cfg)] == [
        'config error: experiments[4].container = "v0111"'] * 3  # the paper's head is raised: no position problem
    cfg["models"]["llama3.1-8b"]["drafters"]["eagle3"].pop("raise_max_position_embeddings")
    cfg["experiments"][0]["engine_settings"] = {"max_model_len": 2048}  # the unraised head's experiment capped
    assert [p.split(": experiment llama3.1-8b-today ")[0] for p in config_problems(cfg)] == [
        'config error: experiments[4].container = "v0111"'] * 3 + [
        f"config error: experiments[4].methods[{j}] = eagle3: its head has max_position_embeddings 2048 "
        "(models.llama3.1-8b.drafters.eagle3) but the experiment's context is the target model default on vLLM "
        "0.11.1, which does not raise the head's positions; set experiments[4].engine_settings.max_model_len: 2048, or "
        "models.llama3.1-8b.drafters.eagle3.raise_max_position_embeddings: true"
        for j in (2, 3)]


def test_an_sglang_experiment_takes_no_vllm_image(paper):
    cfg = copy.deepcopy(paper)
    i = [e["name"] for e in cfg["experiments"]].index("tree-qwen3-8b-sglang")
    cfg["experiments"][i]["container"] = "latest"
    assert config_problems(cfg) == [
        f'config error: experiments[{i}].container = "latest": experiment tree-qwen3-8b-sglang runs on SGLang, in the '
        "sglang image (containers/sglang.def): leave container out"]


def test_check_config_verb_says_it_in_one_line(paper, tmp_path):
    path = tmp_path / "one-image.yaml"
    path.write_text(yaml.safe_dump(_single_image(paper, "paper")))
    proc = subprocess.run([sys.executable, "-m", "specrepro", "check-config", str(path)], capture_output=True,
                          text=True, env=env_with(), timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        'specrepro check-config: error: config error: engine.container = "paper": experiment llama3-70b method '
        "draft_model cannot run on vLLM 0.10.1.1: its V1 engine raises NotImplementedError for draft-model "
        "speculative decoding; set experiments[1].methods[4].container to latest"]


def test_progress_lines_and_bar():
    now = [100.0]
    log = io.StringIO()
    p = Progress("x eagle-k3", 10, done=4, stream=log, clock=lambda: now[0])
    now[0] += 30.0
    assert p.step("cnn request 0 B=1") == "x eagle-k3: 5/10 points (cnn request 0 B=1), elapsed 30s, ETA 2m30s"
    now[0] += 3570.0
    p.step()
    assert log.getvalue().splitlines()[-1] == "x eagle-k3: 6/10 points, elapsed 1h00m, ETA 2h00m"
    tty = io.StringIO()
    tty.isatty = lambda: True
    b = Progress("y", 2, stream=tty, clock=lambda: now[0])
    b.step()
    b.step()
    text = tty.getvalue()
    assert text.startswith("\r[############............] y: 1/2 points") and text.endswith("\n")
    assert "\r[########################] y: 2/2 points" in text
    assert duration(None) == "?" and duration(59.4) == "59s" and duration(7260) == "2h01m"
