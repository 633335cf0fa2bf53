"""Cluster: engine job resources from the config, turned into sbatch options by the SLURM plugin itself."""

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from _infra import REPO, env_with, fake_apptainer, slurm_controller_listens
from specrepro.core.cluster import engine_resources

slurm_plugin = pytest.importorskip("snakemake_executor_plugin_slurm")
from snakemake_executor_plugin_slurm.submit_string import get_submit_command  # noqa: E402
from snakemake_executor_plugin_slurm.utils import set_gres_string  # noqa: E402


class _Resources(dict):
    """Snakemake's job.resources: a mapping with attribute access."""

    __getattr__ = dict.get


class _Job:
    def __init__(self, name, resources, threads=1):
        self.name, self.resources, self.threads = name, _Resources(resources), threads

    def is_group(self):
        return False


def sbatch(name, resources):
    """The sbatch command line the plugin would submit for a job with these resources."""
    job = _Job(name, resources)
    params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": f"rule_{name}", "account": "",
              "partition": "-p gpu", "workdir": "/w"}
    return get_submit_command(job, params) + set_gres_string(job)


@pytest.fixture(scope="module")
def paper():
    from specrepro.config import validate_schema

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    return cfg


def test_gpus_follow_tensor_parallel_size(paper):
    gpus = {m: engine_resources(paper["models"][m], paper["cluster"])["gpu"] for m in paper["models"]}
    assert gpus == {"llama3.1-8b": 1, "qwen3-8b": 1, "llama3-70b": 4, "glm-4.5-air": 4}


def test_submission_of_an_8b_and_a_70b_job(paper):
    r8 = engine_resources(paper["models"]["llama3.1-8b"], paper["cluster"], estimate_min=100)
    r70 = engine_resources(paper["models"]["llama3-70b"], paper["cluster"])
    c8, c70 = sbatch("engine_bench", r8), sbatch("engine_bench", r70)
    assert " --gpus=1" in c8 and " -t 150 " in c8 and " --mem 64000" in c8 and "--cpus-per-gpu=8" in c8
    assert " --gpus=4" in c70 and " -t 240 " in c70 and " --mem 256000" in c70 and "--cpus-per-gpu=8" in c70


def test_gpu_model_from_config(paper):
    cluster = dict(paper["cluster"], gpu_model="h100")
    assert sbatch("engine_bench", engine_resources(paper["models"]["glm-4.5-air"], cluster)).endswith(" --gpus=h100:4")


def test_profile_and_dag_give_the_gpu_rule_its_gpu(tmp_path):
    """The DAG Snakemake builds with the slurm profile's settings: its GPU job asks the plugin for 1 GPU."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["executor"] == "slurm" and profile["software-deployment-method"] == "apptainer"
    assert profile["apptainer-args"] == "--nv" and profile["rerun-incomplete"] is True
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "dag_probe.py"), str(REPO), "config/paper.yaml", str(tmp_path / "c"),
         "--apptainer", "results/containers/vllm-paper.test.txt"],
        capture_output=True, text=True, env=env_with(fake_apptainer(tmp_path)), timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = {j["rule"]: j for j in json.loads(proc.stdout)}
    res = dict(profile["default-resources"], **jobs["container_test"]["resources"])
    assert sbatch("container_test", res).endswith(" --gpus=1") and " -t 15 " in sbatch("container_test", res)


def test_gpu_model_reaches_every_engine_job_of_the_dag(tmp_path):
    """``cluster.gpu_model`` was documented as giving ``--gpus=h100:N`` while no rule passed it: the helper returned
    it, the rules' resources left it out, and the plugin submitted a plain ``--gpus=N``."""
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    cfg["cluster"] = dict(cfg.get("cluster") or {}, gpu_model="h100")
    (tmp_path / "paper-h100.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "dag_probe.py"), str(REPO), str(tmp_path / "paper-h100.yaml"),
         str(tmp_path / "c"), "results/engine/llama3-70b/bench/none.parquet",
         "results/engine/llama3-70b/profile/none.timings.parquet"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    engine = [j for j in json.loads(proc.stdout) if j["rule"].startswith("engine_") and j["rule"] != "engine_prompts"]
    assert {j["rule"] for j in engine} >= {"engine_bench", "engine_profile"}
    for j in engine:
        assert j["resources"].get("gpu_model") == "h100", j["rule"]
        assert sbatch(j["rule"], j["resources"]).endswith(f" --gpus=h100:{j['resources']['gpu']}")


#: the rules that load a model or need a GPU: cluster jobs; every other rule is a local rule (the Snakefile's
#: ``localrules``, or its own ``localrule: True``: the image builds and preflight), so a new rule must be put on one
#: side or the other
CLUSTER_RULES = {"container_test", "container_test_sglang",
                 "build_model", "package_model", "drafter_train_data", "drafter_train_states", "train_drafter",
                 "engine_prompts", "engine_bench", "engine_profile", "engine_trace", "engine_draft_bench",
                 "engine_sglang_bench"}


def workflow_rules() -> tuple[set[str], set[str]]:
    """(every rule of the workflow, the Snakefile's local rules), read from the rule files."""
    import re

    rules, own = set(), set()
    for f in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        text = f.read_text()
        rules |= set(re.findall(r"^rule (\w+):", text, re.M))
        # a rule's own "localrule: True" (until the next rule)
        for name, body in re.findall(r"^rule (\w+):\n((?:(?!^rule ).*\n)*)", text, re.M):
            if re.search(r"^    localrule: True", body, re.M):
                own.add(name)
    block = re.search(r"^localrules:\n((?:    .*\n)+)", (REPO / "Snakefile").read_text(), re.M)
    assert block, "the Snakefile has no localrules block"
    local = {n.strip() for n in block.group(1).replace("\n", " ").split(",") if n.strip()}
    return rules, local | own


def test_rules_that_load_models_are_cluster_jobs_and_the_rest_run_where_snakemake_runs():
    """On a cluster an sbatch job costs a Snakemake start and a scheduler wait: the downloads (compute nodes may
    reach no network) and the table, figure, simulator and report rules run on the submitting host; every rule
    that loads a model or needs a GPU is submitted."""
    rules, local = workflow_rules()
    assert local <= rules, local - rules
    assert not local & CLUSTER_RULES, local & CLUSTER_RULES
    assert rules - local == CLUSTER_RULES, {"unclassified": rules - local - CLUSTER_RULES,
                                            "gone": CLUSTER_RULES - rules}
    assert {"hf_model", "dataset_input", "fetch_released_trace", "report"} <= local
    # built where snakemake runs (apptainer from conda there): the README says so
    assert {"container_image", "container_image_sglang", "preflight"} <= local


def slurm_is_up() -> bool:
    """A controller answers (slurm-wlm being installed is not enough); where none listens, without sinfo's 9-s wait."""
    if not shutil.which("sinfo") or not slurm_controller_listens():
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.slurm
@pytest.mark.skipif(not slurm_is_up(), reason="no SLURM controller answers here (bash .ci/slurm-start.sh starts one)")
def test_cpu_run_through_slurm(tmp_path):
    """The CPU config end to end, every job an sbatch job on the local SLURM (minutes). CI's budget: the engine
    stage keeps one stand-in (the Qwen3 thinking one: bench and trace jobs; the e2e test runs the whole CPU config)."""
    from _infra import snakemake

    cfg = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    small = tmp_path / "cpu-ci.yaml"
    keep = [e for e in cfg["experiments"] if e["name"] == "standin-qwen3-8b-thinking"]
    assert keep, "config/cpu.yaml has no standin-qwen3-8b-thinking: pick another stand-in for the SLURM run"
    small.write_text(yaml.safe_dump({"experiments": keep}, sort_keys=False))
    proc = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
                     "--profile", str(REPO / "profiles" / "cpu"), "--configfile", str(REPO / "config" / "cpu.yaml"),
                     str(small), "--executor", "slurm", "--jobs", "16",
                     "--slurm-status-command", "squeue",  # the CI cluster keeps no accounting (sacct)
                     # the plugin checks jobs 40 s after a job finished (10 s later each round none did): with
                     # jobs of seconds the stage mostly waited; SLURM itself runs what the node's CPUs allow
                     "--slurm-init-seconds-before-status-checks", "2",
                     "--default-resources", "mem_mb=1000", "runtime=30", timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "paper" / "report.pdf").exists()
    # the plugin deletes the logs of successful jobs; Snakemake's own log names every submission
    log = "".join(f.read_text() for f in (tmp_path / ".snakemake" / "log").glob("*.log"))
    import re

    submitted = re.findall(r"^rule (\w+):", log, re.M)  # a local job's block starts "localrule <name>:"
    ran_here = set(re.findall(r"^localrule (\w+):", log, re.M))
    # the stand-in's model builds, prompts, bench and trace jobs went through sbatch, nothing else did
    assert len(submitted) >= 9 and set(submitted) <= CLUSTER_RULES, submitted
    assert {"engine_bench", "engine_trace"} <= set(submitted), submitted
    assert log.count("has been submitted with SLURM jobid") == len(submitted), "the jobs did not go through sbatch"
    assert "report" in ran_here and not ran_here & CLUSTER_RULES, ran_here
