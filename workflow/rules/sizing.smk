# The sizing rule of the quick GPU run (specrepro.analysis.sizing) checked on the released traces: every simulator
# headline claim and every stand-in of a sized engine claim of `sizing.sized_config`, subsampled at the
# requests the rule gives it. Outputs:
#   results/sizing/<trace set>/validation.csv     coverage, half-widths, decisions per quantity
#   figures/tab_sizing_validation-<trace set>.*   the same as a report table

# Checked for the trace set the simulator runs on; `sizing.sized_config` is the config whose engine claims'
# stand-ins it subsamples.
SIZING = config.get("sizing") or {}
SIZED_CONFIG = repo_path(SIZING["sized_config"]) if SIZING.get("sized_config") else None
if SIZED_CONFIG and not Path(SIZED_CONFIG).exists():
    stop(f"config error: sizing.sized_config = {json.dumps(SIZING['sized_config'])}: no such file (relative to the repository)")
SIZING_TARGETS = [f"figures/tab_sizing_validation-{ts}.tex" for ts in SIM_TRACE_SETS]


rule sizing_study:
    """Subsamples of the sized sizes, each with its bootstrap interval: coverage of the full draw's value and
    decisions of the simulator claims (CSV)."""
    input:
        config=RUN_CONFIG,
        traces=lambda wc: [TRACE_SETS[wc.traceset]["files"][d] for d in TRACE_SETS[wc.traceset]["datasets"]],
        claims=str(REPO / "paper" / "claims.yaml"),
        sized=[SIZED_CONFIG] if SIZED_CONFIG else [],
    output:
        "results/sizing/{traceset}/validation.csv",
    params:
        sized=lambda wc, input: f"--sized-config {input.sized[0]!r}" if input.sized else "",
        draw=f"--replications {SIZING.get('replications', 1000)} --seed {SIZING.get('seed', 42)}",
    log:
        "logs/sizing/{traceset}/validation.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro sizing-study --run-config {input.config} --traceset {wildcards.traceset} --traces {input.traces:q}"
        " --claims {input.claims:q} {params.sized} {params.draw} -o {output} 2> {log}"


rule tab_sizing_validation:
    input:
        config=RUN_CONFIG,
        study="results/sizing/{traceset}/validation.csv",
    output:
        tex="figures/tab_sizing_validation-{traceset}.tex",
        csv="figures/tab_sizing_validation-{traceset}.csv",
    log:
        "logs/figures/tab_sizing_validation-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_sizing_validation --run-config {input.config} --subject {wildcards.traceset}"
        " --study {input.study} --csv {output.csv} -o {output.tex} 2> {log}"
