"""Disjoint GPUs on one machine (defect 5): leases with file locks, the one-line stop, the gpu limit.

The machine is faked: an `nvidia-smi` stand-in on PATH lists N GPUs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


from _infra import REPO, env_with, fake_apptainer
from specrepro.core.gpus import lease_env, start_problem, visible_gpus


def fake_smi(tmp_path, n):
    d = tmp_path / "smi"
    d.mkdir(exist_ok=True)
    exe = d / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\nfor i in $(seq 0 {n - 1}); do echo "$i"; done\n')
    exe.chmod(0o755)
    return d


def test_visible_gpus_from_nvidia_smi_or_cuda_visible_devices(tmp_path):
    env = env_with(fake_smi(tmp_path, 3))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    assert visible_gpus(env) == ["0", "1", "2"]
    assert visible_gpus({**env, "CUDA_VISIBLE_DEVICES": "2,5"}) == ["2", "5"]
    assert visible_gpus({**env, "CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({"PATH": str(tmp_path / "nowhere")}) == []
    assert lease_env({}, ["1", "3"]) == {"CUDA_VISIBLE_DEVICES": "1,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


HOLD = ("import os, sys, time; print(os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'), time.time(), flush=True); "
        "go = sys.argv[2] if len(sys.argv) > 2 else ''; t0 = time.time()\n"
        "while go and not os.path.exists(go) and time.time() - t0 < 120: time.sleep(0.05)\n"
        "time.sleep(float(sys.argv[1])); print(time.time(), flush=True)")


def _job(tmp_path, n, hold, env, name, go=None):
    out = open(tmp_path / f"{name}.out", "w")
    return subprocess.Popen([sys.executable, "-m", "specrepro", "with-gpus", str(n), "--lease-dir",
                             str(tmp_path / "leases"), "--poll", "0.2", "--", sys.executable, "-c", HOLD, str(hold),
                             *([str(go)] if go else [])],
                            stdout=out, stderr=subprocess.STDOUT, env=env)


def _holding(tmp_path, names):
    return [n for n in names if any(not ln.startswith("with-gpus") for ln in (tmp_path / f"{n}.out").read_text().splitlines())]


def test_concurrent_jobs_get_disjoint_gpus(tmp_path):
    """Five jobs (2+1+1+2+1 GPUs) on a 4-GPU machine: no GPU is ever held by two jobs at once, the machine's
    GPUs are shared out in parallel, and the jobs that do not fit wait for GPUs to be released."""
    env = env_with(fake_smi(tmp_path, 4))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("SLURM_JOB_ID", None)
    sizes = [2, 1, 1, 2, 1]
    names = [f"j{i}" for i in range(len(sizes))]
    go = tmp_path / "go"
    procs = [_job(tmp_path, n, 0.5, env, name, go) for n, name in zip(sizes, names)]
    # every job has started and asked for its GPUs: as many as fit hold theirs, the others wait
    deadline = time.time() + 180
    while time.time() < deadline and len(_holding(tmp_path, names)) + sum(
            "waiting for" in (tmp_path / f"{n}.out").read_text() for n in names) < len(names):
        time.sleep(0.1)
    first = _holding(tmp_path, names)
    held = [set(next(ln for ln in (tmp_path / f"{n}.out").read_text().splitlines()
                     if not ln.startswith("with-gpus")).split()[0].split(",")) for n in first]
    assert len(first) >= 2 and sum(len(h) for h in held) == len(set().union(*held)) <= 4, (first, held)
    go.touch()
    for p in procs:
        assert p.wait(timeout=180) == 0
    spans = []
    for i, n in enumerate(sizes):
        lines = [ln for ln in (tmp_path / f"j{i}.out").read_text().splitlines() if not ln.startswith("with-gpus")]
        gpus, start = lines[0].split()
        spans.append((set(gpus.split(",")), float(start), float(lines[1])))
        assert len(spans[-1][0]) == n and spans[-1][0] <= {"0", "1", "2", "3"}
    for a in range(len(spans)):
        for b in range(a + 1, len(spans)):
            overlap = spans[a][1] < spans[b][2] and spans[b][1] < spans[a][2]
            assert not (overlap and spans[a][0] & spans[b][0]), (spans[a], spans[b])
    # 7 GPU-jobs' worth on 4 GPUs: someone had to wait
    assert any("waiting for" in (tmp_path / f"{n}.out").read_text() for n in names)


def test_a_killed_job_releases_its_gpus(tmp_path):
    env = env_with(fake_smi(tmp_path, 1))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("SLURM_JOB_ID", None)
    first = _job(tmp_path, 1, 60, env, "first")
    deadline = time.time() + 60
    while time.time() < deadline and not any(ln.startswith("0 ") for ln in (tmp_path / "first.out").read_text().splitlines()):
        time.sleep(0.1)
    first.kill()  # SIGKILL: the lease goes with the process
    first.wait()
    second = _job(tmp_path, 1, 0, env, "second")
    assert second.wait(timeout=60) == 0
    assert (tmp_path / "second.out").read_text().splitlines()[-2].split()[0] == "0"


def test_slurm_keeps_its_allocation(tmp_path):
    env = env_with(fake_smi(tmp_path, 8), SLURM_JOB_ID="42", CUDA_VISIBLE_DEVICES="3")
    p = _job(tmp_path, 1, 0, env, "slurm")
    assert p.wait(timeout=60) == 0
    out = (tmp_path / "slurm.out").read_text()
    assert out.split()[0] == "3" and "with-gpus" not in out and not (tmp_path / "leases").exists()


def test_too_large_a_job_is_one_line():
    assert start_problem([("engine_bench a", 1), ("engine_bench b", 4), ("engine_bench c", 4)], 2) == (
        "gpu error: engine_bench b needs 4 GPU(s) but 2 are visible on this machine (CUDA_VISIBLE_DEVICES or "
        "nvidia-smi) (and 1 more job(s)): run on a machine with 4 GPUs, or leave its experiment out of the config")
    assert start_problem([("engine_bench a", 1)], 1) is None


def test_a_local_run_stops_before_any_job_when_a_job_needs_more_gpus(tmp_path):
    """`snakemake --cores all --use-apptainer` on a 1-GPU machine: the 4-GPU jobs stop the run, nothing runs."""
    env = env_with(fake_apptainer(tmp_path))
    env["PATH"] = f"{fake_smi(tmp_path, 1)}{os.pathsep}{env['PATH']}"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    work = tmp_path / "run"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--use-apptainer", "--directory",
                           str(work), "--config", f"cache={{'dir': '{tmp_path}/cache'}}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1]
    assert last.startswith("gpu error: engine_") and "needs 4 GPU(s) but 1 is visible on this machine" in last, last
    assert not (work / "results").exists() and not (work / "resources").exists() and not (work / "logs").exists()


def test_a_local_run_uses_every_gpu_of_the_machine(tmp_path):
    """No --resources gpu=N: the run's GPU limit is the machine's GPU count (here 3), jobs lease their own."""
    env = env_with(fake_smi(tmp_path, 3))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    work = tmp_path / "run"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--directory", str(work), "--config",
                           f"cache={{'dir': '{tmp_path}/cache'}}", "preflight=false", "--", "results/run_config.json"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"GPU jobs run on this machine's 3 GPU(s) at most 3 at a time, each on GPUs of its own (leases in " \
           f"{tmp_path}/cache/gpu-leases)" in proc.stderr


def test_gpu_profiles_keep_going():
    """Defect 4: one failure stopped the whole paper run; the GPU profiles keep going (SLURM's already did)."""
    import yaml

    for name in ("default", "apptainer", "slurm"):
        assert yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())["keep-going"] is True, name
