"""The engine images: definition files (parsed and checked), locks, and the --use-apptainer wiring."""

import importlib.util
import json
import re
import socket
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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


def lockpy():
    """containers/lock.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("specrepro_lockpy", REPO / "containers" / "lock.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def stem_pins(stem):
    """{canonical name: version} of containers/<stem>.lock; every pin exact."""
    pins = {}
    for name, p in lockpy().parse_lock((REPO / "containers" / f"{stem}.lock").read_text()).items():
        assert PIN.match(f"{name}=={p['version']}"), f"{stem}.lock: not an exact pin: {name}=={p['version']}"
        pins[name.lower().replace("_", "-")] = p["version"]
    return pins


def lock_pins(name):
    return stem_pins(f"vllm-{name}")


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
    from specrepro.jobspec.images import definition_problems, parse_definition

    assert definition_problems(parse_definition(text, str(definition(name))), ("apptainer", (1, 4, 5))) == []


@pytest.mark.parametrize("name", IMAGES)
def test_every_python_package_is_pinned(name):
    text = definition(name).read_text()
    post = sections(text)["post"]
    pins = lock_pins(name)
    assert pins["vllm"] == IMAGES[name]
    assert {"pandas", "pyarrow", "matplotlib", "jinja2", "huggingface-hub"} <= set(pins)  # analysis rules run here too
    # each pip install names exact versions or the lock, and the lock goes in with --no-deps (nothing unlisted)
    check_installs(f"vllm-{name}", post)
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
    """The image a GPU job of the paper DAG must run in: its own (specrepro.jobspec.images), from its wildcards."""
    from specrepro.jobspec.args import experiment_configs
    from specrepro.jobspec.images import job_image, trace_image

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

    from specrepro.jobspec.images import image_stem

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
        e.pop("drafts", None)  # draft jobs need an engine with the draft hook (0.34.0 has none: a config error)
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
                                             "engine_sglang_bench", "container_test_sglang", "engine_draft_bench"}
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
    return stem_pins("sglang")


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
    from specrepro.jobspec.images import definition_problems, parse_definition

    assert definition_problems(parse_definition(text, str(SGLANG_DEF)), ("apptainer", (1, 4, 5))) == []


def test_sglang_lock_matches_sglangs_own_pins():
    """FA3 (sgl-kernel) and FlashInfer at the versions SGLang 0.5.9 itself requires, and the analysis packages."""
    from specrepro.engine.check.sources import source_tree

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
    check_installs("sglang", post)
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


# --- the locks: every pin exact and hashed, as lock.py writes it; the images install them by hash ------

STEMS = ["vllm-paper", "vllm-v0111", "vllm-latest", "sglang"]
LOCK_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)"
                       r"(?P<hashes>( --hash=sha256:[0-9a-f]{64})*)(  # (?P<note>.+))?$")


def pip_installs(post):
    """Word lists of the %post's `pip install` commands (continuation lines joined)."""
    # join continuation lines first: a regex that stops at the first line saw no `-r` after a backslash
    return [cmd.split() for cmd in re.findall(r"pip install ([^\n]*)", post.replace("\\\n", " "))]


def expected_unhashed(stem):
    """{canonical name: why} of the pins the .in says cannot be hashed: absent from PyPI, or from an index
    the locking machine could not reach (PyPI is the only one it reaches)."""
    lp = lockpy()
    _, opts = lp.parse_in((REPO / "containers" / f"{stem}.in").read_text())
    out = {lp.canonical(spec.split("==")[0]): "absent" for spec, _ in opts["absent"]}
    for spec, index in opts["override"]:  # an override replaces a stand-in's pin: hashed from PyPI, or from index
        out.pop(lp.canonical(spec.split("==")[0]), None)
        if index:
            out[lp.canonical(spec.split("==")[0])] = index
    return out


def check_installs(stem, post):
    """The .def installs pip by hash, the lock's hashed pins with --require-hashes and --no-deps, and the
    unhashed ones (if any) in their own step from the index they come from; its own grep split is complete."""
    lp = lockpy()
    installs = pip_installs(post)
    assert installs and all("-r" in w for w in installs), f"{stem}.def: a pip install without -r: {installs}"
    files = [w[w.index("-r") + 1] for w in installs]
    boot = re.search(r"echo '(pip==\S+ --hash=sha256:[0-9a-f]{64})' > /opt/specrepro/pip.txt", post)
    assert boot and files[0] == "/opt/specrepro/pip.txt" and "--require-hashes" in installs[0], f"{stem}: pip not by hash"
    pins = lp.parse_lock((REPO / "containers" / f"{stem}.lock").read_text())
    unhashed = {n for n, p in pins.items() if not p["hashes"]}
    if not unhashed:
        assert files[1:] == ["/opt/specrepro/requirements.lock"], files
        assert {"--no-deps", "--require-hashes"} <= set(installs[1])
        return
    assert files[1:] == ["/opt/specrepro/hashed.txt", "/opt/specrepro/unhashed.txt"], files
    assert {"--no-deps", "--require-hashes"} <= set(installs[1]) and "--no-deps" in installs[2]
    # run the .def's own split on the lock: hashed + unhashed = the lock, each pin once
    greps = re.findall(r"^\s*(grep .*/opt/specrepro/requirements\.lock > /opt/specrepro/\w+\.txt)$", post, re.M)
    assert len(greps) == 2, greps
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "requirements.lock").write_text((REPO / "containers" / f"{stem}.lock").read_text())
        for g in greps:
            subprocess.run(["bash", "-c", g.replace("/opt/specrepro", tmp)], check=True)
        hashed = lp.parse_lock((Path(tmp) / "hashed.txt").read_text())
        rest = lp.parse_lock((Path(tmp) / "unhashed.txt").read_text())
    assert set(hashed) == set(pins) - unhashed and all(p["hashes"] for p in hashed.values())
    assert set(rest) == unhashed
    # the unhashed step reads the one index those pins come from (PyPI when none is named)
    indexes = {expected_unhashed(stem)[lp.canonical(n)] for n in unhashed}
    named = installs[2][installs[2].index("--index-url") + 1] if "--index-url" in installs[2] else "absent"
    assert indexes == {named}, (indexes, installs[2])
    assert "--extra-index-url" not in " ".join(" ".join(w) for w in installs), "another index beside PyPI for everything"


@pytest.mark.parametrize("stem", STEMS)
def test_every_lock_line_is_an_exact_pin_with_its_hash(stem):
    """Item 4: every pin of every lock names one version and its file's SHA-256, or says why it cannot."""
    lp = lockpy()
    unhashed = {}
    for line in (REPO / "containers" / f"{stem}.lock").read_text().splitlines():
        if line.startswith("#"):
            continue
        m = LOCK_LINE.match(line)
        assert m, f"{stem}.lock: not an exact pin with hash or reason: {line!r}"
        if not m["hashes"]:
            assert m["note"] and "unhashed: " in m["note"], f"{stem}.lock: no hash and no reason: {line!r}"
            unhashed[lp.canonical(m["name"])] = m["note"]
    want = expected_unhashed(stem)
    assert set(unhashed) == set(want), (unhashed, want)
    for name, index in want.items():
        assert (index == "absent") == ("absent from PyPI" in unhashed[name]), unhashed[name]
        assert index == "absent" or index in unhashed[name], unhashed[name]


@pytest.mark.parametrize("stem", STEMS)
def test_lock_is_lock_py_output_of_its_in(stem):
    """The lock is what containers/lock.py writes from its .in: same text from its pins, every top-level
    requirement pinned, every override and stand-in applied (no hand edits)."""
    lp = lockpy()
    text = (REPO / "containers" / f"{stem}.lock").read_text()
    reqs, opts = lp.parse_in((REPO / "containers" / f"{stem}.in").read_text())
    pins = lp.parse_lock(text)
    python = labels(((REPO / "containers" / f"{stem}.def")).read_text())["python.version"]
    assert lp.render(f"{stem}.in", python, opts.get("cutoff"), pins, opts["pip_check"]) == text
    assert lp.pip_check_lines(text) == opts["pip_check"]
    by = {lp.canonical(n): p for n, p in pins.items()}
    for req in reqs:
        m = re.match(r"^([A-Za-z0-9._-]+)(==(\S+))?$", req)
        assert m and lp.canonical(m[1]) in by, f"{stem}: top-level {req} not in the lock"
        assert not m[3] or by[lp.canonical(m[1])]["version"] == m[3], req
    for spec, _ in opts["override"]:
        name, version = spec.split("==")
        assert by[lp.canonical(name)]["version"] == version and by[lp.canonical(name)]["note"].startswith("override")
    overridden = {lp.canonical(spec.split("==")[0]) for spec, _ in opts["override"]}
    for spec, _ in opts["absent"]:
        name, version = spec.split("==")
        if lp.canonical(name) not in overridden:
            assert by[lp.canonical(name)]["version"] == version and not by[lp.canonical(name)]["hashes"]
    for spec, reason in opts["reasons"].items():  # an override's reason is in its pin's note
        assert by[lp.canonical(spec.split("==")[0])]["note"].endswith(f": {reason}"), spec
    assert labels((REPO / "containers" / f"{stem}.def").read_text())["pip.uploaded_prior_to"] == opts["cutoff"]


def test_lock_py_sizes_count_the_hashed_files_and_name_the_rest(monkeypatch):
    """Issue 21: the README's image table gives each lock's download size from the index's own file sizes (PEP 700);
    a pin with no hash (another index) or whose file the index lists without a size is named, not guessed."""
    lp = lockpy()
    pages = {"a": {"files": [{"hashes": {"sha256": "1" * 64}, "size": 1000},
                             {"hashes": {"sha256": "2" * 64}, "size": 5}]},
             "b-c": {"files": [{"hashes": {"sha256": "3" * 64}}]}}
    monkeypatch.setattr(lp, "simple_page", lambda name, index=lp.INDEX: pages[lp.canonical(name)])
    lock = ("# header\n"
            f"a==1.0 --hash=sha256:{'9' * 64} --hash=sha256:{'1' * 64}\n"
            f"B_c==2.0 --hash=sha256:{'3' * 64}\n"
            "torch==2.7.1+cu128  # override; unhashed: from https://download.pytorch.org/whl/cu128\n")
    assert lp.download_sizes(lock) == (1000, 1, ["B_c==2.0", "torch==2.7.1+cu128"])


def test_lock_py_parses_override_and_absent_directives():
    lp = lockpy()
    reqs, opts = lp.parse_in("# uploaded-prior-to: 2025-01-01T00:00:00Z\n"
                             "# override: torch==2.7.1+cu128 from https://download.pytorch.org/whl/cu128\n"
                             "# override: nvidia-nccl-cu12==2.26.2\n"
                             "# absent-here: a-b==1.0 like a-b==1.1\n# a comment\nvllm==0.10.1.1\npandas\n")
    assert reqs == ["vllm==0.10.1.1", "pandas"] and opts["cutoff"] == "2025-01-01T00:00:00Z"
    assert opts["override"] == [("torch==2.7.1+cu128", "https://download.pytorch.org/whl/cu128"),
                                ("nvidia-nccl-cu12==2.26.2", None)]
    assert opts["absent"] == [("a-b==1.0", "a-b==1.1")] and opts["pip_check"] == [] and opts["reasons"] == {}
    _, opts = lp.parse_in("# override: a-b==1.2 -- the index lacks 1.0; its code needs >= 1.0\n"
                          "# pip-check: x 1 has requirement a-b==1.0, but you have a-b 1.2.\n")
    assert opts["override"] == [("a-b==1.2", None)] and opts["reasons"] == {"a-b==1.2": "the index lacks 1.0; its code needs >= 1.0"}
    assert opts["pip_check"] == ["x 1 has requirement a-b==1.0, but you have a-b 1.2."]
    text = lp.render("x.in", "3.12", None, {}, opts["pip_check"])
    assert lp.pip_check_lines(text) == opts["pip_check"] and lp.parse_lock(text) == {}
    pins = {"B_x": {"version": "2", "hashes": ["a" * 64, "b" * 64], "note": None},
            "a": {"version": "1+cu1", "hashes": [], "note": "unhashed: why"}}
    text = lp.render("x.in", "3.12", None, pins)
    assert text.splitlines()[3:] == ["a==1+cu1  # unhashed: why", f"B_x==2 --hash=sha256:{'a' * 64} --hash=sha256:{'b' * 64}"]
    assert lp.parse_lock(text) == {"a": pins["a"], "B_x": pins["B_x"]}


#: the image platform's environment markers (Ubuntu 24.04, x86_64, CPython 3.12)
IMAGE_MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "platform_system": "Linux",
                 "sys_platform": "linux", "platform_machine": "x86_64", "os_name": "posix",
                 "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def engine_requirements(stem):
    """(engine, version, requirements) the engine a lock pins declares in its own source: vLLM's
    requirements/cuda.txt (with its ``-r`` files), SGLang's pyproject.toml dependencies; markers evaluated for the
    image's platform."""
    import tomllib

    from packaging.requirements import Requirement

    from specrepro.engine.check.sources import source_tree

    pins = stem_pins(stem)
    engine = "sglang" if stem == "sglang" else "vllm"
    root = source_tree(engine, pins[engine])
    if engine == "sglang":
        lines = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    else:
        lines, todo = [], [root / "requirements" / "cuda.txt"]
        while todo:
            f = todo.pop(0)
            for ln in f.read_text().splitlines():
                ln = ln.split(" #", 1)[0].strip()
                if ln.startswith("-r "):
                    todo.append(f.parent / ln[3:].strip())
                elif ln and not ln.startswith(("#", "-", "--")):
                    lines.append(ln)
    reqs = [Requirement(x) for x in lines]
    return engine, pins[engine], [r for r in reqs if r.marker is None or r.marker.evaluate(IMAGE_MARKERS)]


@pytest.mark.parametrize("stem", STEMS)
def test_every_exact_requirement_of_the_engine_is_in_the_lock_or_an_override(stem):
    """Item 1: every ``==`` requirement of the pinned engine's own requirement files is satisfied by the lock, or
    its pin is an override of the .in with its reason and the lock's ``# pip-check:`` lines are exactly what
    ``pip check`` prints for those overrides (pip's own message format); no lock line says a file is absent."""
    from packaging.utils import canonicalize_name

    lp = lockpy()
    text = (REPO / "containers" / f"{stem}.lock").read_text()
    pins = {canonicalize_name(n): p for n, p in lp.parse_lock(text).items()}
    _, opts = lp.parse_in((REPO / "containers" / f"{stem}.in").read_text())
    reasons = {canonicalize_name(spec.split("==")[0]): r for spec, r in opts["reasons"].items()}
    engine, version, reqs = engine_requirements(stem)
    exact = [r for r in reqs if any(s.operator == "==" for s in r.specifier)]
    assert len(exact) >= 5, (stem, exact)
    conflicts = []
    for r in exact:
        name = canonicalize_name(r.name)
        assert name in pins, f"{stem}: {engine} {version} requires {r}, which the lock does not install"
        got = pins[name]["version"]
        if not r.specifier.contains(got, prereleases=True):
            assert name in reasons and (pins[name]["note"] or "").startswith("override"), \
                f"{stem}: {engine} {version} requires {r}, the lock has {got} and no override with a reason"
            conflicts.append(f"{engine} {version} has requirement {r}, but you have {name} {got}.")
    assert sorted(lp.pip_check_lines(text)) == sorted(conflicts), (stem, conflicts)
    assert not [ln for ln in text.splitlines() if not ln.startswith("#") and "absent" in ln], stem


def test_the_latest_image_overrides_flashinfer_to_a_served_version_its_code_accepts():
    """vLLM 0.34.0 pins flashinfer-python==0.7.3, which the index does not serve; the lock installs 0.7.4 by hash,
    and 0.34.0's code asks only for a floor at run time (flashinfer_ts.py: >= 0.7.1), which 0.7.4 meets."""
    from packaging.version import Version

    from specrepro.engine.check.sources import source_tree

    lp = lockpy()
    pins = {lp.canonical(n): p for n, p in lp.parse_lock((REPO / "containers" / "vllm-latest.lock").read_text()).items()}
    fi = pins["flashinfer-python"]
    assert fi["version"] == "0.7.4" and len(fi["hashes"]) == 1 and fi["note"].startswith("override (resolver chose 0.7.3)")
    root = source_tree("vllm", "0.34.0")
    assert "flashinfer-python==0.7.3" in (root / "requirements" / "cuda.txt").read_text()
    ts = (root / "vllm" / "v1" / "attention" / "backends" / "flashinfer_ts.py").read_text()
    floor = re.search(r"< \((\d+), (\d+), (\d+)\)", ts)
    assert floor and Version(fi["version"]) >= Version(".".join(floor.groups())) == Version("0.7.1")
    # nothing in 0.34.0's code names 0.7.3 as a version it needs
    assert not [p for p in (root / "vllm").rglob("*.py") if re.search(r"flashinfer[^\n]*0\.7\.3\b", p.read_text(errors="replace"))]


def _pypi_reachable():
    try:
        socket.create_connection(("pypi.org", 443), timeout=10).close()
        return True
    except OSError:
        return False


@pytest.mark.network
@pytest.mark.skipif(not _pypi_reachable(), reason="PyPI not reachable")
def test_every_hash_is_a_file_of_that_pin_on_pypi():
    """Item 4: each lock hash (and each image's pip bootstrap hash) is the SHA-256 PyPI lists for a file of
    exactly that name and version, whose tags the image (CPython 3.12, glibc 2.39, x86_64) installs, uploaded
    before the lock's cut-off; each pin kept unhashed as absent from PyPI is still absent there."""
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name, canonicalize_version, parse_wheel_filename

    lp = lockpy()
    supported = set(cpython_tags((3, 12), platforms=lp.PLATFORMS)) | set(
        compatible_tags((3, 12), "cp312", platforms=lp.PLATFORMS))
    wanted = []  # (stem, name, version, hash or None, cutoff)
    for stem in STEMS:
        _, opts = lp.parse_in((REPO / "containers" / f"{stem}.in").read_text())
        for name, p in lp.parse_lock((REPO / "containers" / f"{stem}.lock").read_text()).items():
            if "absent from PyPI" in (p["note"] or ""):
                wanted.append((stem, name, p["version"], None, opts["cutoff"]))
            wanted += [(stem, name, p["version"], h, opts["cutoff"]) for h in p["hashes"]]
        boot = re.search(r"echo 'pip==(\S+) --hash=sha256:([0-9a-f]{64})'", (REPO / "containers" / f"{stem}.def").read_text())
        wanted.append((stem, "pip", boot[1], boot[2], None))
    names = sorted({canonicalize_name(w[1]) for w in wanted})
    with ThreadPoolExecutor(8) as ex:
        pages = dict(zip(names, ex.map(lp.simple_page, names)))
    problems = []
    for stem, name, version, h, cutoff in wanted:
        page = pages[canonicalize_name(name)]
        if h is None:
            if version in page["versions"]:
                problems.append(f"{stem}: {name}=={version} is on PyPI now: lock again without its absent-here")
            continue
        files = [f for f in page["files"] if f["hashes"].get("sha256") == h]
        if len(files) != 1:
            problems.append(f"{stem}: {name}=={version}: sha256 {h[:12]}... is no file of {name} on PyPI")
            continue
        f = files[0]
        fname, fversion, _, tags = parse_wheel_filename(f["filename"])
        if fname != canonicalize_name(name) or canonicalize_version(fversion) != canonicalize_version(version):
            problems.append(f"{stem}: {name}=={version}: hash is of {f['filename']}")
        elif not tags & supported:
            problems.append(f"{stem}: {name}=={version}: {f['filename']} does not install on the image")
        elif cutoff and f.get("upload-time", "") >= cutoff:
            problems.append(f"{stem}: {name}=={version}: {f['filename']} uploaded after the cut-off {cutoff}")
    assert not problems, "\n".join(problems)


def _other_index_pins():
    """(stem, name, version, index) of every pin an .in overrides from an index other than PyPI."""
    lp = lockpy()
    out = []
    for stem in STEMS:
        _, opts = lp.parse_in((REPO / "containers" / f"{stem}.in").read_text())
        out += [(stem, *spec.split("=="), index) for spec, index in opts["override"] if index]
    return out


@pytest.mark.network
@pytest.mark.parametrize("stem,name,version,index", _other_index_pins())
def test_pins_from_another_index_are_served_there(stem, name, version, index):
    """The pins that come from an index other than PyPI (the paper image's CUDA 12.8 PyTorch) are served there for
    the image (CPython 3.12, glibc 2.39, x86_64); skipped where that index cannot be reached (then they stay
    unhashed in the lock, which says so, and the image's build fetches them from it)."""
    import html
    import urllib.parse
    import urllib.request

    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import canonicalize_version, parse_wheel_filename

    lp = lockpy()
    if not lp.reachable(index):
        pytest.skip(f"{index} not reachable from here")
    page = urllib.request.urlopen(f"{index}/{lp.canonical(name)}/", timeout=60).read().decode()
    files = {urllib.parse.unquote(html.unescape(f)) for f in re.findall(r'>([^<>]+\.whl)<', page)}
    supported = set(cpython_tags((3, 12), platforms=lp.PLATFORMS)) | set(compatible_tags((3, 12), "cp312", platforms=lp.PLATFORMS))
    ok = [f for f in files if canonicalize_version(parse_wheel_filename(f)[1]) == canonicalize_version(version)
          and parse_wheel_filename(f)[3] & supported]
    assert ok, f"{stem}: {name}=={version}: no wheel for the image on {index}"


UPPER_BOUND_RULES = ("fit_cost_model", "simulate_engine_traces", "closed_loop", "tab_closed_loop", "fig_closed_loop",
                     "fig10_sim_engine", "fig12_sim_engine", "tab_sim_engine", "fig_costfit", "tab_costfit",
                     "tab_closed_loop_summary")


def test_each_models_upper_bounds_reuse_planned_engine_jobs_only(dag_jobs):
    """Every paper experiment with engine traces has its cost model, Figs. 10/12 and closed loop as targets of its own;
    none of those jobs is a GPU job, and every engine output they read is made by a job `specrepro plan` bills (so the
    plan's total does not grow: there is no GPU job outside the plan at all)."""
    import yaml

    from specrepro.jobspec.args import trace_label
    from specrepro.jobspec.jobs import trace_methods
    from specrepro.plan import plan_jobs

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    jobs, _ = dag_jobs("config/paper.yaml", "all")
    traced = [e["name"] for e in cfg["experiments"] if trace_methods(cfg, e["name"])]
    assert traced == ["llama3.1-8b", "llama3-70b", "qwen3-8b", "qwen3-8b-thinking", "glm-4.5-air"]
    outputs = {o for j in jobs for o in j["output"]}
    for x in traced:
        for f in (f"results/engine/{x}/cost_model.yaml", f"results/simulator/engine-{x}/upper_bounds.csv",
                  f"results/simulator/engine-{x}/closed_loop.csv", f"results/metrics/engine-sim-{x}.json",
                  f"figures/fig10_sim_engine-engine-{x}.pdf", f"figures/fig12_sim_engine-engine-{x}.pdf",
                  f"figures/tab_sim_engine-engine-{x}.tex", f"figures/fig_closed_loop-engine-{x}.pdf",
                  f"figures/tab_closed_loop-engine-{x}.tex"):
            assert f in outputs, f
    # the pooled fit is gone; the reasoning runs (no profiled pass) fit their cost model from their bench points
    assert not any("cost_model-" in o for o in outputs)
    fits = {j["output"][0].split("/")[2]: j for j in jobs if j["rule"] == "fit_cost_model"}
    assert set(fits) == set(traced) | {"llama3.1-8b-today"}
    assert any("/bench/" in f for f in fits["glm-4.5-air"]["input"])
    assert not any("/bench/" in f for f in fits["llama3.1-8b"]["input"])
    plan = plan_jobs(cfg)
    billed = {(r.exp, r.job, r.config) for r in plan.itertuples()}
    made_by = {}
    for j in jobs:
        if not is_gpu_rule(j) or j["rule"].startswith("container_"):
            continue
        out = j["output"][0].split("/")  # results/engine/<exp>/<bench|profile|traces|drafts>/<name>
        if out[3] == "prompts":  # engine_prompts: tokenising, no engine run
            continue
        kind = {"bench": "bench", "profile": "profile", "traces": "trace", "drafts": "draft"}[out[3]]
        name = out[4].split(".")[0]
        key = (out[2], kind, trace_label(name) if kind == "trace" else name)
        assert key in billed, f"GPU job {j['rule']} {j['output'][0]} is not in the plan"
        for o in j["output"]:
            made_by[o] = key
    assert len({v for v in made_by.values()}) == len(billed)
    mine = [j for j in jobs if j["rule"] in UPPER_BOUND_RULES]
    assert {j["rule"] for j in mine} == set(UPPER_BOUND_RULES)
    for j in mine:
        assert not is_gpu_rule(j) and j["container"] is None, j["rule"]
        for f in j["input"]:
            if f.startswith("results/engine/") and "/prompts/" not in f and "cost_model" not in f:
                assert f in made_by, (j["rule"], f)
