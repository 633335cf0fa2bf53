# Draft jobs (docs/hybrid.md): the oracle as a drafter, controlled acceptance profiles and the hybrid n-gram /
# model-drafter proposer, each an engine with the plugin's draft hook (specrepro draft-bench).
#
#   results/engine/<exp>/drafts/<config>.parquet        points (bench columns + profile, choice shares, departed
#                                                       requests, counters agree, lossless)
#   results/engine/<exp>/drafts/<config>.steps.parquet  per request and verified step: source, proposed, accepted


include: "helpers/drafts.smk"


rule engine_draft_bench:
    """One draft job: its engine runs every plan of the job (a controlled job: one per profile) over its points."""
    input:
        unpack(draft_engine_inputs),
        unpack(draft_inputs),
    output:
        points="results/engine/{exp}/drafts/{config}.parquet",
        steps="results/engine/{exp}/drafts/{config}.steps.parquet",
        meta="results/engine/{exp}/drafts/{config}.json",
    params:
        threads_env=timed_job_env,
        spec=draft_spec,
        drafter=lambda wc, input: f"--drafter-manifest {input.drafter!r}" if "drafter" in input.keys() else "",
        cost=lambda wc, input: f"--cost-model {input.cost_model!r}" if "cost_model" in input.keys() else "",
        config_hash=config_hash(config),
        repo=str(REPO),
        gpus=with_gpus,
    wildcard_constraints:
        exp=name_regex(VLLM_EXPERIMENTS),
        config=name_regex(DRAFT_LABELS),
    threads: timed_job_threads
    resources:
        gpu=engine_job_resources("gpu", "draft"),
        runtime=engine_job_resources("runtime", "draft"),
        mem_mb=engine_job_resources("mem_mb", "draft"),
        cpus_per_gpu=engine_job_resources("cpus_per_gpu", "draft"),
        gpu_model=engine_job_resources("gpu_model", "draft"),
    log:
        "logs/engine_draft_bench/{exp}/{config}.log",
    container:
        draft_container
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "{params.gpus} {params.threads_env}specrepro draft-bench --spec {params.spec:q} --prompts {input.prompts:q} --target-manifest {input.target:q}"
        " {params.drafter} --traces {input.traces:q} {params.cost} --none-points {input.none_points:q}"
        " --config-hash {params.config_hash} --repo {params.repo:q} -o {output.points:q} 2> {log}"
