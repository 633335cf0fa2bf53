"""Preflight: made-up machines fed to the pure checks; one line per problem, with its fix."""

import copy
import json
import subprocess
import sys

import pytest
import yaml

from _infra import REPO, env_with
from specrepro import preflight as pf

# a driver new enough for every image of the paper grid (the latest image's label asks for 580.65)
H100 = pf.Gpu("NVIDIA H100 80GB HBM3", 79.6, "580.95.05")


@pytest.fixture(scope="module")
def paper():
    from specrepro.config import validate_schema

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    return cfg


def check(cfg, obs, uses_apptainer=True, downloaded=(), image_built=True):
    return pf.problems(cfg, obs, pf.needs(cfg, downloaded), uses_apptainer, "/cache", image_built=image_built)


def machine(gpus, free=2000.0, token=True, apptainer="/usr/bin/apptainer", version="apptainer version 1.4.5", **kw):
    return pf.Observed(gpus=list(gpus), free_gb={"/cache": free}, apptainer=apptainer, hf_token=token,
                       apptainer_version=version if apptainer else None, **kw)


def test_parse_nvidia_smi_and_sinfo():
    smi = "NVIDIA H100 80GB HBM3, 81559, 580.95.05\nNVIDIA H100 80GB HBM3, 81559, 580.95.05\n"
    assert pf.parse_nvidia_smi(smi) == [H100, H100]
    assert pf.parse_nvidia_smi("") == []
    assert pf.parse_sinfo_gres("gpu:h100:8(S:0-1)\n(null)\ngpu:a100:4,tmpdisk:100\n") == 8
    assert pf.parse_sinfo_gres("(null)\n") == 0


def test_needs_follow_the_experiments(paper):
    by = {n.model: n for n in pf.needs(paper)}
    assert by["llama3.1-8b"].tensor_parallel_size == 1 and by["llama3-70b"].tensor_parallel_size == 4
    assert by["glm-4.5-air"].tensor_parallel_size == 4
    # target + the drafters the experiments use (EAGLE 3.3 GB, Llama-3.2-1B 2.5 GB)
    assert by["llama3-70b"].weights_gb == pytest.approx(141.1 + 3.3 + 2.5)
    assert by["llama3-70b"].gated == ("meta-llama/Meta-Llama-3-70B-Instruct", "meta-llama/Llama-3.2-1B-Instruct")
    done = pf.needs(paper, ["llama3-70b", "llama3-70b/drafters/eagle", "llama3-70b/drafters/draft_model"])
    assert {n.model: n for n in done}["llama3-70b"].download_gb == 0 and not {n.model: n for n in done}["llama3-70b"].gated


def test_paper_grid_on_four_h100s_is_fine(paper):
    assert check(paper, machine([H100] * 4)) == []


def test_too_few_gpus_one_line(paper):
    found = check(paper, machine([H100]))
    assert len(found) == 1
    assert found[0].startswith("glm-4.5-air (tensor_parallel_size 4), llama3-70b (tensor_parallel_size 4) need 4 GPUs")
    assert "1 are visible on this machine" in found[0] and "run on a node with 4 GPUs" in found[0]


def test_slurm_counts_gpus_per_node(paper):
    assert check(paper, machine([], slurm_gpus_per_node=8)) == []
    found = check(paper, machine([], slurm_gpus_per_node=2))
    assert len(found) == 1 and "2 are visible per SLURM node" in found[0]


def test_gpu_memory_too_small(paper):
    small = pf.Gpu("NVIDIA L4", 22.0, "580.65")
    found = check(paper, machine([small] * 4))
    # 70B: 147 GB / 4 GPUs = 34 GiB per GPU > 0.8 x 0.9 x 22 GiB; GLM-4.5-Air the same; 8B models: 16-18 GB
    assert any(p.startswith("llama3-70b: about 34 GiB of weights per GPU") for p in found)
    assert any(p.startswith("glm-4.5-air:") for p in found)
    assert all("raise tensor_parallel_size" in p for p in found)


def test_disk_token_apptainer_driver(paper):
    found = check(paper, machine([H100] * 4, free=100.0, token=False, apptainer=None), image_built=False)
    assert len(found) == 3
    assert found[0].startswith("apptainer not found on PATH")
    assert found[1].startswith("/cache: 100 GB free but the downloads and the image build need about")
    assert found[2].startswith("gated models meta-llama/") and "export HF_TOKEN" in found[2]
    old = pf.Gpu("NVIDIA H100 80GB HBM3", 79.6, "510.47.03")
    assert [p.split(" (its")[0] for p in check(paper, machine([old] * 4))] == [
        f"NVIDIA driver 510.47.03 is older than {v}, the lowest the {name} image's CUDA runs on"
        for name, v in (("paper", "570.26"), ("v0111", "570.26"), ("latest", "580.65"), ("sglang", "570.26"))
    ]


def test_minimum_driver_is_each_images_own_label(paper):
    """Defect 7: the paper image's label asks for 570.26; a 560 driver was let through (a table said 525.60)."""
    from specrepro.jobspec.images import image_definition

    assert image_definition("paper").labels["cuda.min_driver"] == "570.26"
    only_paper = copy.deepcopy(paper)
    only_paper["experiments"] = [e for e in paper["experiments"] if e["name"] == "llama3.1-8b"]
    found = check(only_paper, machine([pf.Gpu("NVIDIA H100 80GB HBM3", 79.6, "560.35.03")] * 4))
    assert found == ["NVIDIA driver 560.35.03 is older than 570.26, the lowest the paper image's CUDA runs on (its "
                     "cuda.min_driver label): update the driver, or move its jobs to another image (experiments[].container)"]
    assert check(only_paper, machine([pf.Gpu("NVIDIA H100 80GB HBM3", 79.6, "570.26")] * 4)) == []


def test_the_sglang_image_is_checked_like_the_vllm_ones(paper):
    """Fig. 2's SGLang image: its definition goes through the same Apptainer checks and its own label gives the
    driver minimum (its jobs cannot move to another image, so the fix is the driver)."""
    from specrepro.jobspec.images import image_definition, parse_definition, used_images

    only = copy.deepcopy(paper)
    only["experiments"] = [e for e in paper["experiments"] if e.get("engine") == "sglang"]
    assert used_images(only) == ["sglang"] and image_definition("sglang").labels["cuda.min_driver"] == "570.26"
    assert check(only, machine([H100] * 4)) == []
    found = check(only, machine([pf.Gpu("NVIDIA H100 80GB HBM3", 79.6, "560.35.03")] * 4))
    assert found == ["NVIDIA driver 560.35.03 is older than 570.26, the lowest the sglang image's CUDA runs on (its "
                     "cuda.min_driver label): update the driver"]
    text = (REPO / "containers" / "sglang.def").read_text().replace("\n%test", "\n%tests")
    found = pf.problems(only, machine([H100] * 4), pf.needs(only), True, "/cache",
                        images={"sglang": parse_definition(text, "sglang.def")})
    assert found == ["apptainer: sglang.def: unknown section(s) %tests"]


def test_apptainer_must_accept_the_definitions(paper, tmp_path):
    """Defect 7: a tag together with a digest, a section the installed Apptainer lacks, not Apptainer at all."""
    from specrepro.jobspec.images import image_definition, parse_definition

    good = image_definition("paper")
    text = (REPO / "containers" / "vllm-paper.def").read_text()
    tagged = text.replace("From: nvidia/cuda@sha256:", "From: nvidia/cuda:12.8.1-devel-ubuntu24.04@sha256:")
    args = text.replace("\n%files\n", "\n%arguments\n    X=1\n\n%files\n")
    images = {"paper": parse_definition(tagged, "vllm-paper.def")}
    found = pf.problems(paper, machine([H100] * 4), pf.needs(paper), True, "/cache", images=images)
    assert found == ["apptainer: vllm-paper.def: From: nvidia/cuda:12.8.1-devel-ubuntu24.04@sha256:"
                     "4b9ed5fa8361736996499f64ecebf25d4ec37ff56e4d11323ccde10aa36e0c43 is not a base image by digest "
                     "alone (name@sha256:<digest>; tools built on containers/image reject a tag together with a digest)"]
    images = {"paper": parse_definition(args, "vllm-paper.def")}
    found = pf.problems(paper, machine([H100] * 4, version="apptainer version 1.1.9"), pf.needs(paper), True,
                        "/cache", images=images)
    assert found == ["apptainer: vllm-paper.def: needs Apptainer >= 1.2.0 (for %arguments) but 1.1.9 is installed: "
                     "update Apptainer"]
    found = pf.problems(paper, machine([H100] * 4, version="singularity-ce version 4.1.0"), pf.needs(paper), True,
                        "/cache", images={"paper": good})
    assert len(found) == 1 and "singularity-ce 4.1.0 found, the workflow needs Apptainer" in found[0]
    assert pf.problems(paper, machine([H100] * 4), pf.needs(paper), True, "/cache", images={"paper": good}) == []


def test_gpu_run_without_container(paper):
    assert check(paper, machine([H100] * 4), uses_apptainer=False) == [
        "GPU run without the container: add --use-apptainer (or --profile profiles/apptainer), or set run.kind: cpu"
    ]


def test_offline_needs_no_token_and_cpu_needs_no_gpu(paper):
    off = copy.deepcopy(paper)
    off["offline"] = True
    assert check(off, machine([H100] * 4, token=False)) == []
    cpu = copy.deepcopy(paper)
    cpu["run"]["kind"] = "cpu"
    assert check(cpu, machine([]), uses_apptainer=False) == []


def test_verb_stops_with_the_lines_and_writes_nothing(tmp_path, paper):
    cfg = tmp_path / "run_config.json"
    cfg.write_text(json.dumps(paper))
    out = tmp_path / "preflight.json"
    env = env_with(HF_TOKEN="")
    env.pop("HF_TOKEN")
    proc = subprocess.run([sys.executable, "-m", "specrepro", "preflight", "--run-config", str(cfg),
                           "--cache-dir", str(tmp_path), "-o", str(out)], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and not out.exists()
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "preflight: GPU run without the container: add --use-apptainer (or --profile profiles/apptainer), or set run.kind: cpu"
    assert lines[-1].startswith("specrepro preflight: error: ") and "--config preflight=false" in lines[-1]
