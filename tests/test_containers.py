"""The engine images: definition files (parsed and checked), locks, and the --use-apptainer wiring."""

import re

import pytest
from spython.main.parse.parsers import SingularityParser

from _infra import REPO, env_with, fake_apptainer, snakemake

IMAGES = {"paper": "0.10.1.1", "v0111": "0.11.1", "latest": "0.34.0"}
KNOWN_SECTIONS = {"arguments", "setup", "files", "post", "test", "environment", "runscript", "labels", "help",
                  "startscript", "apprun", "applabels", "appinstall", "appenv", "apphelp", "appfiles", "apptest"}
REQUIRED_SECTIONS = {"files", "post", "test", "environment", "labels", "help"}
REQUIRED_LABELS = {"vllm.version", "torch.version", "cuda.version", "cuda.min_driver", "python.version", "base.image",
                   "base.tag", "pip.lock", "ubuntu.snapshot"}
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$")


def definition(name):
    return REPO / "containers" / f"vllm-{name}.def"


def sections(text):
    """{section: body} of a .def, by its `%name` lines (what Apptainer reads; spython ignores typos)."""
    out, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^%(\w+)", line)
        if m:
            current = m.group(1)
            out[current] = ""
        elif current:
            out[current] += line + "\n"
    return out


def labels(text):
    return dict(line.strip().split(None, 1) for line in sections(text)["labels"].splitlines() if line.strip())


def lock_pins(name):
    pins = {}
    for line in (REPO / "containers" / f"vllm-{name}.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert PIN.match(line), f"vllm-{name}.lock: not an exact pin: {line!r}"
            pkg, version = line.split("==")
            pins[pkg.lower().replace("_", "-")] = version
    return pins


@pytest.mark.parametrize("name", IMAGES)
def test_spython_parses_the_definition(name):
    recipe = SingularityParser(str(definition(name))).recipe["spython-base"]
    assert re.fullmatch(r"nvidia/cuda@sha256:[0-9a-f]{64}", recipe.fromHeader), recipe.fromHeader
    assert recipe.install and recipe.environ and recipe.labels and recipe.test


@pytest.mark.parametrize("name", IMAGES)
def test_definition_sections_and_header(name):
    text = definition(name).read_text()
    found = set(sections(text))
    assert found <= KNOWN_SECTIONS, f"unknown sections: {found - KNOWN_SECTIONS}"
    assert REQUIRED_SECTIONS <= found, f"missing sections: {REQUIRED_SECTIONS - found}"
    header = text.split("\n%", 1)[0]
    assert re.search(r"^Bootstrap: docker$", header, re.M)
    # defect 7: the digest alone (tools built on containers/image reject tag@digest); the tag in a comment
    froms = re.findall(r"^From:\s*(\S+)\s*$", header, re.M)
    assert len(froms) == 1 and re.fullmatch(r"[a-z0-9][a-z0-9._/-]*@sha256:[0-9a-f]{64}", froms[0]), froms
    from specrepro.engine.images import definition_problems, parse_definition

    assert definition_problems(parse_definition(text, str(definition(name))), ("apptainer", (1, 4, 5))) == []


@pytest.mark.parametrize("name", IMAGES)
def test_every_python_package_is_pinned(name):
    text = definition(name).read_text()
    post = sections(text)["post"]
    pins = lock_pins(name)
    assert pins["vllm"] == IMAGES[name]
    assert {"pandas", "pyarrow", "matplotlib", "jinja2", "huggingface-hub"} <= set(pins)  # analysis rules run here too
    # each pip install names exact versions or the lock, and the lock goes in with --no-deps (nothing unlisted)
    installs = re.findall(r"pip install ([^\n]*(?:\\\n[^\n]*)*)", post)
    assert installs
    for cmd in installs:
        words = cmd.replace("\\\n", " ").split()
        pkgs = [w for w in words if w != "\\" and not w.startswith(("-", "http")) and "/" not in w]
        assert all("==" in w for w in pkgs), f"unpinned pip package in: {cmd}"
        if "-r" in words:
            assert "--no-deps" in words and words[words.index("-r") + 1] == "/opt/specrepro/requirements.lock"
    assert "pip check" in post
    lock = f"containers/vllm-{name}.lock"
    assert sections(text)["files"].split() == [lock, "/opt/specrepro/requirements.lock"]


@pytest.mark.parametrize("name", IMAGES)
def test_apt_side_is_fixed(name):
    post = sections(definition(name).read_text())["post"]
    assert re.search(r"https://snapshot\.ubuntu\.com/ubuntu/\d{8}T\d{6}Z", post), "apt not frozen to a snapshot"
    for pkg in re.findall(r"\b(texlive-[a-z-]+)\S*", post):
        assert re.search(rf"\b{pkg}=\S+", post), f"{pkg} not pinned"
    assert "latexmk" in post


@pytest.mark.parametrize("name", IMAGES)
def test_labels_environment_and_test(name):
    text = definition(name).read_text()
    lab = labels(text)
    assert REQUIRED_LABELS <= set(lab), REQUIRED_LABELS - set(lab)
    pins = lock_pins(name)
    assert lab["vllm.version"] == pins["vllm"] == IMAGES[name]
    assert lab["torch.version"] == pins["torch"]
    assert lab["pip.lock"] == f"containers/vllm-{name}.lock"
    header = text.split("\n%", 1)[0]
    assert re.search(rf"^From: {re.escape(lab['base.image'])}$", header, re.M)
    assert re.search(rf"^# {re.escape(lab['base.tag'])}$", header, re.M) and ":" in lab["base.tag"]
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", lab["cuda.min_driver"])
    assert lab["ubuntu.snapshot"] in sections(text)["post"]
    env = sections(text)["environment"]
    for var in ("HF_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR"):
        # a value set by the workflow wins; the fallback is under SPECREPRO_CACHE, never $HOME (= the repo)
        assert re.search(rf'export {var}="\$\{{{var}:-\$SPECREPRO_CACHE/', env), var
    code = "\n".join(ln for ln in env.splitlines() if not ln.strip().startswith("#"))
    assert "$HOME" not in code and "~" not in code
    test = sections(text)["test"]
    assert "nvidia-smi" in test and "torch.cuda.is_available()" in test and f"'{IMAGES[name]}'" in test
    assert "apptainer build" in sections(text)["help"]


def is_gpu_rule(job):
    """The marker (CONTRIBUTING.md): a rule named engine_* or with a gpu resource."""
    return job["rule"].startswith("engine_") or int(job["resources"].get("gpu", 0) or 0) > 0


def test_dry_run_with_apptainer_resolves(tmp_path):
    proc = snakemake("-n", "--use-apptainer", "--cores", "1", "all", "results/containers/vllm-paper.test.txt",
                     "--config", f"cache={{'dir': '{tmp_path}/cache'}}", env=env_with(fake_apptainer(tmp_path)))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    for rule in ("container_image", "container_test", "preflight", "hf_model", "report"):
        assert re.search(rf"^{rule}\s+\d+", out, re.M), rule


def expected_image(job, cfg):
    """The image a GPU job of the paper DAG must run in: its own (specrepro.engine.images), from its wildcards."""
    from specrepro.engine.args import experiment_configs
    from specrepro.engine.images import job_image, trace_image

    exps = {e["name"]: e for e in cfg["experiments"]}
    if job["rule"] == "container_test":
        return re.search(r"vllm-(\w+)\.test\.txt$", job["output"][0]).group(1)
    if job["rule"] == "container_test_sglang":
        return "sglang"
    parts = job["output"][0].split("/")  # results/engine/<exp>/<bench|profile|traces|prompts>/...
    exp = exps[parts[2]]
    if parts[3] in ("bench", "profile"):
        c = experiment_configs(exp)[parts[4].split(".")[0]]
        return job_image(cfg, exp, c["method"], c["k"], c["tree"], bool(c.get("k_by_batch_size")))
    if parts[3] == "traces":  # traces/<method>.jsonl: the k = 20 engine runs in the method's image
        return trace_image(cfg, exp, parts[4].split(".")[0])
    return job_image(cfg, exp)


def test_every_gpu_job_runs_in_its_own_image_and_needs_it(dag_jobs):
    """Every GPU job (vLLM's and Fig. 2's SGLang jobs) in its own image, which it takes as input with its test."""
    import yaml

    from specrepro.engine.images import image_stem

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    jobs, cache = dag_jobs("config/paper.yaml", "all")
    gpu_jobs = [j for j in jobs if is_gpu_rule(j)]
    assert gpu_jobs, "no GPU job in the paper DAG"
    assert {"engine_sglang_bench", "container_test_sglang"} <= {j["rule"] for j in gpu_jobs}
    seen = set()
    for j in gpu_jobs:
        name = expected_image(j, cfg)
        seen.add(name)
        assert (name == "sglang") == (j["rule"] in ("engine_sglang_bench", "container_test_sglang")
                                      or "-sglang/" in j["output"][0]), j["output"]
        image = f"{cache}/images/{image_stem(name)}.sif"
        assert j["container"] == image, (j["output"], j["container"], image)
        assert image in j["input"], f"{j['rule']} does not take its image as input (it would not be built first)"
        if not j["rule"].startswith("container_test"):
            assert f"results/containers/{image_stem(name)}.test.txt" in j["input"], (j["rule"], "image's test not an input")
    assert seen == set(IMAGES) | {"sglang"}
    builds = [j for j in jobs if j["rule"] == "container_image"]
    assert sorted(j["input"][0] for j in builds) == sorted(str(REPO / "containers" / f"vllm-{n}.def") for n in IMAGES)
    builds = [j for j in jobs if j["rule"] == "container_image_sglang"]
    assert [j["input"][0] for j in builds] == [str(SGLANG_DEF)]
    tests = [j for j in jobs if j["rule"] in ("container_test", "container_test_sglang")]
    assert sorted(j["output"][0] for j in tests) == sorted(
        [f"results/containers/vllm-{n}.test.txt" for n in IMAGES] + ["results/containers/sglang.test.txt"])
    # preflight reads every definition the jobs use (Apptainer takes it; the driver minimum from its own label)
    (pre,) = [j for j in jobs if j["rule"] == "preflight"]
    defs = [str(REPO / "containers" / f"vllm-{n}.def") for n in IMAGES] + [str(SGLANG_DEF)]
    assert sorted(f for f in pre["input"] if f.endswith(".def")) == sorted(defs)
    assert f"sglang={SGLANG_DEF}" in pre["params"]["images"]


def test_draft_model_and_mtp_jobs_run_on_engines_that_have_them(dag_jobs):
    """Defects 2 and 3: draft-model jobs ran on 0.10.1.1 (NotImplementedError), GLM MTP too (no MTP model)."""
    jobs, _ = dag_jobs("config/paper.yaml", "all")
    bench = {j["output"][0]: j["container"].rsplit("/", 1)[1] for j in jobs if j["rule"] == "engine_bench"}
    assert bench["results/engine/llama3-70b/bench/draft_model-k3.parquet"] == "vllm-latest.sif"
    assert bench["results/engine/qwen3-8b/bench/draft_model-k3.parquet"] == "vllm-latest.sif"
    assert bench["results/engine/glm-4.5-air/bench/mtp-k3.parquet"] == "vllm-v0111.sif"
    assert bench["results/engine/qwen3-8b/bench/eagle3-k3.parquet"] == "vllm-v0111.sif"
    assert bench["results/engine/llama3.1-8b/bench/eagle-k3.parquet"] == "vllm-paper.sif"
    # Fig. 2 in vLLM's tree path: each model on its Fig. 1 engine (both have the tree path)
    assert bench["results/engine/tree-qwen3-8b-vllm/bench/eagle3-k21-tree-d3b4.parquet"] == "vllm-v0111.sif"
    assert bench["results/engine/tree-llama3-70b-vllm/bench/eagle-k6-tree-d3b2.parquet"] == "vllm-paper.sif"


def test_default_image_selected_by_config(tmp_path, dag_jobs):
    import yaml

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg["engine"]["container"] = "latest"
    for e in cfg["experiments"]:
        e.pop("container", None)
        for m in e["methods"]:
            m.pop("container", None)
    path = tmp_path / "latest.yaml"
    path.write_text(yaml.safe_dump(cfg))
    jobs, cache = dag_jobs(str(path), "all")
    images = f"{cache}/images"
    for j in (j for j in jobs if is_gpu_rule(j)):  # Fig. 2's SGLang jobs keep their own image
        sglang = j["rule"] in ("engine_sglang_bench", "container_test_sglang") or "-sglang/" in j["output"][0]
        assert j["container"] == (f"{images}/sglang.sif" if sglang else f"{images}/vllm-latest.sif"), j["output"]


def test_gpu_jobs_take_their_gpus_through_a_lease(dag_jobs):
    """Defect 5: every GPU job's command runs through `specrepro with-gpus <its gpu count>` (own GPUs)."""
    jobs, _ = dag_jobs("config/paper.yaml", "all")
    gpu_jobs = [j for j in jobs if int(j["resources"].get("gpu", 0) or 0) > 0]
    assert {j["rule"] for j in gpu_jobs} == {"engine_bench", "engine_profile", "engine_trace", "container_test",
                                             "engine_sglang_bench", "container_test_sglang"}
    for j in gpu_jobs:
        n = int(j["resources"]["gpu"])
        assert j["params"]["gpus"].startswith(f"specrepro with-gpus {n} --lease-dir "), (j["rule"], j["params"])
        assert j["shell"].startswith("{params.gpus} "), (j["rule"], j["shell"][:80])
    cpu, _ = dag_jobs("config/cpu.yaml", "all", apptainer=False)
    assert all(j["params"].get("gpus", "") == "" for j in cpu if j["rule"].startswith("engine_"))


def test_cpu_run_needs_no_image(dag_jobs):
    jobs, _ = dag_jobs("config/cpu.yaml", "all", apptainer=False)
    assert not [j for j in jobs if j["rule"].startswith("container_") or j["container"]]


# --- the SGLang image (Fig. 2) --------------------------------------------------------------------------

SGLANG_DEF = REPO / "containers" / "sglang.def"


def sglang_pins():
    pins = {}
    for line in (REPO / "containers" / "sglang.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert PIN.match(line), f"sglang.lock: not an exact pin: {line!r}"
            pkg, version = line.split("==")
            pins[pkg.lower().replace("_", "-")] = version
    return pins


def test_sglang_definition_header_sections_and_digest():
    text = SGLANG_DEF.read_text()
    found = set(sections(text))
    assert found <= KNOWN_SECTIONS and REQUIRED_SECTIONS <= found, found
    header = text.split("\n%", 1)[0]
    assert re.search(r"^Bootstrap: docker$", header, re.M)
    # the digest alone: the bytes cannot change under a moved tag
    assert re.search(r"^From: [\w./-]+@sha256:[0-9a-f]{64}$", header, re.M), "base image not pinned by digest alone"
    recipe = SingularityParser(str(SGLANG_DEF)).recipe["spython-base"]
    assert re.fullmatch(r"nvidia/cuda@sha256:[0-9a-f]{64}", recipe.fromHeader), recipe.fromHeader
    assert recipe.install and recipe.environ and recipe.labels and recipe.test
    # what preflight checks of every definition the run uses (Apptainer accepts it)
    from specrepro.engine.images import definition_problems, parse_definition

    assert definition_problems(parse_definition(text, str(SGLANG_DEF)), ("apptainer", (1, 4, 5))) == []


def test_sglang_lock_matches_sglangs_own_pins():
    """FA3 (sgl-kernel) and FlashInfer at the versions SGLang 0.5.9 itself requires, and the analysis packages."""
    from specrepro.engine.sources import source_tree

    pins = sglang_pins()
    own = (source_tree("sglang", "0.5.9") / "pyproject.toml").read_text()
    assert pins["sglang"] == "0.5.9"
    for pkg in ("torch", "flashinfer-python", "flashinfer-cubin", "sgl-kernel", "transformers", "xgrammar"):
        spelled = re.search(rf'"{pkg.replace("-", "[-_]")}==([^"; ]+)', own)
        assert spelled and pins[pkg] == spelled.group(1), pkg
    assert pins["nvidia-cuda-runtime-cu12"].startswith("12.8.")  # PyPI's torch 2.9.1 is the CUDA 12.8 build
    assert {"pandas", "pyarrow", "matplotlib", "jinja2", "huggingface-hub"} <= set(pins)


def test_sglang_post_labels_environment_and_test():
    text = SGLANG_DEF.read_text()
    post = sections(text)["post"]
    assert sections(text)["files"].split() == ["containers/sglang.lock", "/opt/specrepro/requirements.lock"]
    installs = re.findall(r"pip install ([^\n]*(?:\\\n[^\n]*)*)", post)
    assert installs
    for cmd in installs:
        words = cmd.replace("\\\n", " ").split()
        pkgs = [w for w in words if w != "\\" and not w.startswith(("-", "http")) and "/" not in w]
        assert all("==" in w for w in pkgs), f"unpinned pip package in: {cmd}"
        if "-r" in words:
            assert "--no-deps" in words and words[words.index("-r") + 1] == "/opt/specrepro/requirements.lock"
    assert "pip check" in post and "libnuma1" in post
    assert re.search(r"https://snapshot\.ubuntu\.com/ubuntu/\d{8}T\d{6}Z", post)
    for pkg in re.findall(r"\b(texlive-[a-z-]+)\S*", post):
        assert re.search(rf"\b{pkg}=\S+", post), f"{pkg} not pinned"
    lab, pins = labels(text), sglang_pins()
    assert lab["sglang.version"] == pins["sglang"] and lab["torch.version"] == pins["torch"]
    assert lab["flashinfer.version"] == pins["flashinfer-python"] and lab["sgl_kernel.version"] == pins["sgl-kernel"]
    assert lab["pip.lock"] == "containers/sglang.lock" and lab["base.image"] in text.split("\n%", 1)[0]
    assert lab["ubuntu.snapshot"] in post and lab["cuda.min_driver"]
    env = sections(text)["environment"]
    for var in ("HF_HOME", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE"):
        assert re.search(rf'export {var}="\$\{{{var}:-\$SPECREPRO_CACHE/', env), var
    code = "\n".join(ln for ln in env.splitlines() if not ln.strip().startswith("#"))
    assert "$HOME" not in code and "~" not in code
    test = sections(text)["test"]
    for needle in ("nvidia-smi", "torch.cuda.is_available()", "'0.5.9'", "flash_attn_with_kvcache", "flashinfer"):
        assert needle in test, needle
    assert "apptainer build" in sections(text)["help"]
