# The engine's Apptainer images (containers/vllm-<name>.def -> <containers.dir>/vllm-<name>.sif),
# their GPU self-test, and the preflight check that runs before the first GPU job.
#
# GPU rules: every rule whose name starts with `engine_` or that has a `gpu` resource runs in its job's
# image (`container: job_container`) and takes `unpack(engine_inputs)` (tests/test_containers.py).

include: "helpers/containers.smk"


# Local GPU runs: before the first job, stop if a job needs more GPUs than the machine has, else let
# Snakemake run GPU jobs on all of them (helpers/containers.smk: gpu_onstart; each job leases its own via with-gpus).
onstart:
    gpu_onstart()


rule container_image:
    """Build one image from its definition and lock (no GPU needed; %test runs in container_test)."""
    input:
        definition=str(REPO / "containers" / "vllm-{image}.def"),
        lock=str(REPO / "containers" / "vllm-{image}.lock"),
        preflight=preflight_input(),
    output:
        image_path("{image}"),
    params:
        repo=lambda wc: str(REPO),
        args=config["containers"]["build_args"],
    log:
        "logs/container_image/vllm-{image}.log",
    # on a cluster, on the submit host; --use-conda provides apptainer from conda-forge
    localrule: True
    conda:
        "../../envs/apptainer.yaml"
    shell:
        # %files paths are relative to the repository root; --force: a half-built image from a killed
        # build is replaced (snakemake also removes outputs of failed jobs)
        "(cd {params.repo:q} && apptainer build --notest --force {params.args} {output:q} {input.definition:q}) > {log} 2>&1"


rule container_test:
    """One image's %test (vLLM imports, a GPU is visible) on a GPU node, inside the image."""
    input:
        image=lambda wc: image_path(wc.image),
    output:
        image_test("{image}"),
    log:
        "logs/container_test/vllm-{image}.log",
    container:
        lambda wc: image_path(wc.image)
    params:
        selftest=IMAGE_SELFTEST,
        gpus=with_gpus,
    wildcard_constraints:
        image=name_regex(IMAGE_NAMES),
    resources:
        gpu=1,
        runtime=15,
    shell:
        # apptainer keeps the %test section as /.singularity.d/test inside the image
        "{params.gpus} sh {params.selftest} > {log} 2>&1 && cp {log} {output}"


rule preflight:
    """GPUs, drivers, memory, disk, apptainer (and that it takes the definitions), token; one line per problem."""
    input:
        config=RUN_CONFIG,
        definitions=lambda wc: [str(REPO / "containers" / f"{image_stem(n)}.def") for n in used_images()],
    output:
        temp(PREFLIGHT),
    params:
        apptainer="--uses-apptainer" if USES_APPTAINER else "",
        # on SLURM the GPUs that matter are the nodes' (sinfo), not this login node's
        slurm=lambda wc: "--slurm" if getattr(workflow.executor_plugin, "name", None) == "slurm" else "",
        image=lambda wc: " ".join(f"--image-missing {n}" for n in used_images() if not Path(image_path(n)).exists()),
        images=lambda wc: " ".join(f"--image {shlex.quote(f'{n}={REPO}/containers/{image_stem(n)}.def')}" for n in used_images()),
        downloaded=lambda wc: " ".join(
            model_name(m, d) for m, d in used_models() if Path(model_manifest(m, d)).exists()
        ),
        cache=CACHE_DIR,
        token_file=HF_TOKEN_PATH,
    log:
        "logs/preflight.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro preflight --run-config {input.config} --cache-dir {params.cache:q} {params.apptainer} {params.slurm}"
        " {params.images} {params.image} --downloaded {params.downloaded} --token-file {params.token_file:q} -o {output} 2> {log}"


rule image_record:
    """The engine image's checksums (definition, lock, .sif) for the run's manifest."""
    input:
        definition=str(REPO / "containers" / "vllm-{image}.def"),
        lock=str(REPO / "containers" / "vllm-{image}.lock"),
        image=image_path("{image}"),
    output:
        "results/containers/vllm-{image}.json",
    log:
        "logs/image_record/vllm-{image}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro image-record --name vllm-{wildcards.image} --definition {input.definition:q} --lock {input.lock:q}"
        " --image {input.image:q} -o {output:q} 2> {log}"


# --- the SGLang image (Fig. 2): containers/sglang.def -> <containers.dir>/sglang.sif ---------------


rule container_image_sglang:
    """Build the SGLang 0.5.9 image from its definition and lock (no GPU needed; %test runs in container_test_sglang)."""
    input:
        definition=str(REPO / "containers" / "sglang.def"),
        lock=str(REPO / "containers" / "sglang.lock"),
        preflight=preflight_input(),
    output:
        image_path("sglang"),
    params:
        repo=lambda wc: str(REPO),
        args=config["containers"]["build_args"],
    log:
        "logs/container_image/sglang.log",
    localrule: True
    conda:
        "../../envs/apptainer.yaml"
    shell:
        "(cd {params.repo:q} && apptainer build --notest --force {params.args} {output:q} {input.definition:q}) > {log} 2>&1"


rule container_test_sglang:
    """The SGLang image's %test (SGLang, FlashAttention-3 and FlashInfer import, a GPU is visible) on a GPU node."""
    input:
        image=image_path("sglang"),
    output:
        image_test("sglang"),
    log:
        "logs/container_test/sglang.log",
    container:
        image_path("sglang")
    params:
        selftest=IMAGE_SELFTEST,
        gpus=with_gpus,
    resources:
        gpu=1,
        runtime=15,
    shell:
        "{params.gpus} sh {params.selftest} > {log} 2>&1 && cp {log} {output}"


rule image_record_sglang:
    """The SGLang image's checksums (definition, lock, .sif) for the run's manifest."""
    input:
        definition=str(REPO / "containers" / "sglang.def"),
        lock=str(REPO / "containers" / "sglang.lock"),
        image=image_path("sglang"),
    output:
        "results/containers/sglang.json",
    log:
        "logs/image_record/sglang.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro image-record --name sglang --definition {input.definition:q} --lock {input.lock:q}"
        " --image {input.image:q} -o {output:q} 2> {log}"
