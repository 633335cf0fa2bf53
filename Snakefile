# Reproduction workflow for "Speculative Decoding: Performance or Illusion?" (arXiv 2601.11580).
#
#   snakemake --cores all --use-apptainer          the paper's grid on GPUs (config/paper.yaml)
#   snakemake --profile profiles/cpu               the small CPU run (config/cpu.yaml)
#   snakemake figures/<one figure>.pdf             one figure and what it depends on
#
# Stages, one file each under workflow/rules/: common (config), containers (images, preflight),
# inputs (models, datasets, manifest), models (tiny builds), traces, acceptance, simulator,
# engine (vLLM runs and their figures), upperbounds (each model's cost model, its Figs. 10/12 on its own traces and
# the closed loop against its measured speedups), tree (Fig. 2: tree vs chain on SGLang and vLLM), digitise (the paper's
# figure images read independently), sizing (the quick GPU run's sizing rule checked on the released traces), report.

from snakemake.utils import min_version

min_version("9.0")


include: "workflow/rules/common.smk"
include: "workflow/rules/containers.smk"
include: "workflow/rules/inputs.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/traces.smk"
include: "workflow/rules/acceptance.smk"
include: "workflow/rules/simulator.smk"
include: "workflow/rules/engine.smk"
include: "workflow/rules/drafts.smk"
include: "workflow/rules/upperbounds.smk"
include: "workflow/rules/digitise.smk"
include: "workflow/rules/tree.smk"
include: "workflow/rules/sizing.smk"
include: "workflow/rules/report.smk"


# On a cluster (profiles/slurm) these run on the host that submits, not as cluster jobs: the downloads (compute nodes
# often reach no network) and every rule that reads tables or traces and writes tables, figures or the report (seconds
# each, the simulator's on the released traces included). An sbatch job costs more than such a rule: each starts a
# Snakemake that parses this workflow, and waits for the scheduler. What loads a model or needs a GPU (container
# tests, model builds, drafter training, engine_*) stays a cluster job; image builds and preflight are local too
# (their rules' own `localrule: True`: apptainer from conda on the submit host); tests/test_cluster.py checks the split.
localrules:
    all, run_config, report, claims, manifest, hf_model, dataset_input, fetch_released_trace, trace_tables,
    image_record, image_record_sglang, digitise, tab_digitiser, sizing_study, tab_sizing_validation,
    fig05_acceptance_heatmap, fig11_acceptance_diff, fig07_request_span, tab_acceptance_stats,
    greedy_outputs, merged_engine_traces, speedup_metrics, fig01_speedup, tab_engine_exercise, fig03_reasoning,
    tab_lossless, tab_runtime, tab_engine_jobs, fig04_breakdown, tab_memory, fig09_engine_bleu, tab_trends,
    fig02_tree, tab_tree,
    simulate_paper, simulate_variant, simulate_fig9, ngram_trace, simulate_recomputed, prompt_bleu, simulator_metrics,
    tab_head_positions, fig_head_positions, tab_ngram_agreement, fig10_sim_speedup, fig12_oracle_combine, tab_oracle_gap,
    fig09_bleu_ngram, tab_sim_beyond, fig_sim_beyond, suffix_trace, simulate_kgrid, k_schedule, simulate_today, fig_today,
    tab_today,
    fit_cost_model, simulate_engine_traces, closed_loop, falsify, tab_closed_loop_summary, tab_closed_loop,
    fig_closed_loop, tab_falsification, fig10_sim_engine, fig12_sim_engine, tab_sim_engine, fig_costfit, tab_costfit,
    simulate_drafted, tab_hybrid,


rule all:
    default_target: True
    input:
        REPORT_PDF,
        draft_targets(),


# The validated config plus what the workflow derived from it; every analysis script reads this.
rule run_config:
    output:
        RUN_CONFIG,
    params:
        blob=lambda wc: json.dumps(resolved_config(), sort_keys=True),
    log:
        "logs/run_config.log",
    conda:
        "envs/analysis.yaml"
    shell:
        "specrepro write-json --json {params.blob:q} -o {output} 2> {log}"
