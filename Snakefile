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
