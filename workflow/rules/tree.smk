# Fig. 2: tree vs chain verification. The experiments with engine: sglang run SGLang 0.5.9 in the sglang image
# (GPU only; rule engine_sglang_bench); the vLLM experiments with draft trees run through rule engine_bench
# (engine.smk), each in its own image. Both feed the figure, its table and the metrics of the Fig. 2 claims.
# An SGLang engine that does not start is recorded in the job's outputs, as for the vLLM jobs.


rule engine_sglang_bench:
    """One configuration's sweep on SGLang's offline engine: every request x batch size; resumes where it stopped."""
    input:
        unpack(engine_inputs),
        unpack(engine_model_inputs),
        prompts=bench_prompts,
    output:
        points="results/engine/{exp}/bench/{config}.parquet",
        meta="results/engine/{exp}/bench/{config}.json",
    params:
        # the spec of every engine job (specrepro.jobspec.jobs.bench_spec), so what engine-args lists is what runs
        spec=lambda wc: bench_spec(wc),
        sglang=json.dumps(config.get("sglang") or {}, sort_keys=True),
        drafter=lambda wc, input: f"--drafter-manifest {input.drafter!r}" if "drafter" in input.keys() else "",
        config_hash=config_hash(config),
        repo=str(REPO),
        gpus=with_gpus,
    wildcard_constraints:
        exp=name_regex(SGLANG_EXPERIMENTS),
        config=name_regex(ENGINE_LABELS),
    resources:
        gpu=engine_job_resources("gpu"),
        runtime=engine_job_resources("runtime"),
        mem_mb=engine_job_resources("mem_mb"),
        cpus_per_gpu=engine_job_resources("cpus_per_gpu"),
        gpu_model=engine_job_resources("gpu_model"),
    log:
        "logs/engine_sglang_bench/{exp}/{config}.log",
    # SGLang exists only in its image: no conda environment can run this rule
    container:
        job_container
    shell:
        "{params.gpus} specrepro sglang-bench --spec {params.spec:q} --sglang {params.sglang:q} --prompts {input.prompts:q}"
        " --target-manifest {input.target:q} {params.drafter} --config-hash {params.config_hash} --repo {params.repo:q}"
        " -o {output.points:q} 2> {log}"


rule fig02_tree:
    """Speedup, accepted length and acceptance rate of chain and trees against batch size, per engine."""
    input:
        config=RUN_CONFIG,
        points=all_bench_points(tree=True),
        registry=str(REPO / "paper" / "claims.yaml"),
    output:
        pdf="figures/fig02_tree-engine.pdf",
        csv="figures/fig02_tree-engine.csv",
        metrics="results/metrics/engine-tree.json",
    log:
        "logs/figures/fig02_tree-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig02_tree --run-config {input.config} --subject engine --points {input.points:q}"
        " --claims {input.registry:q} --csv {output.csv} --metrics {output.metrics} -o {output.pdf} 2> {log}"


rule tab_tree:
    input:
        config=RUN_CONFIG,
        points=all_bench_points(tree=True),
    output:
        tex="figures/tab_tree-engine.tex",
        csv="figures/tab_tree-engine.csv",
    log:
        "logs/figures/tab_tree-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_tree --run-config {input.config} --subject engine --points {input.points:q}"
        " --csv {output.csv} -o {output.tex} 2> {log}"
