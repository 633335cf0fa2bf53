"""Config validation: schema + cross-references, each problem as one line naming key, value and what is allowed."""

from __future__ import annotations

import copy

import pytest
import yaml

from specrepro.config import ConfigError, RunConfig, check_config, config_hash, validate_schema

from conftest import REPO

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def load(name: str) -> dict:
    return yaml.safe_load((REPO / "config" / name).read_text())


@pytest.mark.parametrize("name", ["paper.yaml", "cpu.yaml"])
def test_shipped_configs_are_valid(name):
    cfg = load(name)
    validate_schema(cfg, SCHEMA)
    check_config(cfg)
    rc = RunConfig.from_dict(cfg)
    assert rc.released.datasets == ["cnn", "gsm8k", "instructcoder", "sharegpt"]
    if name == "paper.yaml":  # the paper's n-gram settings (the CPU config matches 1..3 tokens on random models)
        assert cfg["engine"]["ngram"] == {"prompt_lookup_min": 3, "prompt_lookup_max": 7}
    else:
        assert cfg["engine"]["ngram"] == {"prompt_lookup_min": 1, "prompt_lookup_max": 3}


def test_paper_config_holds_the_paper_grid():
    cfg = load("paper.yaml")
    validate_schema(cfg, SCHEMA)
    exps = {e["name"]: e for e in cfg["experiments"]}
    assert set(exps) >= {"llama3.1-8b", "llama3-70b", "qwen3-8b", "qwen3-8b-thinking", "glm-4.5-air"}
    # the paper's Fig. 1 grid, plus B = 32 for the text's ShareGPT drop from B = 1 to 32
    assert exps["llama3.1-8b"]["batch_sizes"] == exps["llama3-70b"]["batch_sizes"] == [1, 16, 32, 64, 128]
    assert exps["qwen3-8b"]["batch_sizes"] == [1, 16, 64, 128]
    assert {m["method"] for m in exps["llama3-70b"]["methods"]} == {"none", "ngram", "eagle", "draft_model"}
    assert cfg["models"]["llama3-70b"]["tensor_parallel_size"] == 4
    assert cfg["models"]["glm-4.5-air"]["tensor_parallel_size"] == 4
    assert cfg["engine"]["seed"] == 42 and cfg["engine"]["temperature"] == 0
    assert cfg["engine"]["enable_prefix_caching"] is False
    assert cfg["profiling"]["batch_sizes"] == [1, 64, 128, 512]
    for ds in ("instructcoder", "sharegpt", "gsm8k", "cnn"):
        assert cfg["datasets"][ds]["num_samples"] == 500
        assert len(cfg["datasets"][ds]["source"]["hf"]["revision"]) == 40


def mutated(fn):
    cfg = load("paper.yaml")
    fn(cfg)
    return cfg


CASES = [
    (lambda c: c["experiments"][0]["methods"][1].__setitem__("method", "eagel"),
     "config error: experiments[0].methods[1].method = \"eagel\": not allowed (allowed: none, ngram, eagle, eagle3, draft_model, mtp, suffix)"),
    (lambda c: c["experiments"][0]["batch_sizes"].__setitem__(0, 0),
     "config error: experiments[0].batch_sizes[0] = 0: 0 is less than the minimum of 1"),
    (lambda c: c["experiments"][0]["methods"][1].__setitem__("k", [0]),
     "config error: experiments[0].methods[1].k[0] = 0: 0 is less than the minimum of 1"),
    (lambda c: c["experiments"][0]["datasets"].append("mmlu"),
     "config error: experiments[0].datasets[4] = \"mmlu\": not a dataset of this config (allowed: aime, cnn, gpqa, gsm8k, instructcoder, sharegpt)"),
    (lambda c: c["experiments"][1]["methods"].append({"method": "eagle3", "k": [3]}),
     "config error: experiments[1].methods[5].method = \"eagle3\": model \"llama3-70b\" has no eagle3 drafter (models.llama3-70b.drafters has: draft_model, eagle)"),
    (lambda c: c["experiments"][0].__setitem__("model", "llama-9b"),
     "config error: experiments[0].model = \"llama-9b\": not a model of this config"),
    (lambda c: c["engine"].__setitem__("batching", "random"),
     "config error: engine.batching = \"random\": not allowed (allowed: replicate, distinct)"),
    (lambda c: c["run"].__setitem__("colour", "blue"),
     "config error: run.colour: unknown key (allowed here: description, kind, name)"),
    (lambda c: c["models"]["qwen3-8b"]["source"]["hf"].__setitem__("revision", "main"),
     "config error: models.qwen3-8b.source.hf.revision = \"main\""),
    (lambda c: c["experiments"][0]["methods"][1].pop("k"),
     "config error: experiments[0].methods[1]: method \"ngram\" needs k (e.g. k: [3])"),
]


@pytest.mark.parametrize("mutate, expected", CASES)
def test_bad_config_is_one_line(mutate, expected):
    cfg = mutated(mutate)
    with pytest.raises(ConfigError) as exc:
        validate_schema(cfg, SCHEMA)
        check_config(cfg)
    msg = str(exc.value)
    assert msg.startswith(expected), msg
    assert "\n" not in msg


def test_config_hash_is_stable_and_sensitive():
    a, b = load("cpu.yaml"), load("cpu.yaml")
    assert config_hash(a) == config_hash(b)
    b2 = copy.deepcopy(b)
    b2["figures"]["heatmap_max_position"] = 256
    assert config_hash(b2) != config_hash(a)
