# Acceptance behaviour per position, request and dataset (paper Figs. 5, 7, 11 and a statistics table).
# One rule per figure; each runs one script (a module of specrepro.figures) over one trace set.

include: "helpers/acceptance.smk"


rule fig05_acceptance_heatmap:
    input:
        config=RUN_CONFIG,
        positions=trace_tables("positions"),
        requests=trace_tables("requests"),
    output:
        "figures/fig05_acceptance_heatmap-{traceset}.pdf",
    log:
        "logs/figures/fig05_acceptance_heatmap-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig05_acceptance_heatmap --run-config {input.config} --subject {wildcards.traceset}"
        " --positions {input.positions} --requests {input.requests} -o {output} 2> {log}"


rule fig11_acceptance_diff:
    input:
        config=RUN_CONFIG,
        positions=trace_tables("positions"),
        requests=trace_tables("requests"),
    output:
        "figures/fig11_acceptance_diff-{traceset}.pdf",
    log:
        "logs/figures/fig11_acceptance_diff-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig11_acceptance_diff --run-config {input.config} --subject {wildcards.traceset}"
        " --positions {input.positions} --requests {input.requests} -o {output} 2> {log}"


rule fig07_request_span:
    input:
        config=RUN_CONFIG,
        positions=trace_tables("positions"),
    output:
        "figures/fig07_request_span-{traceset}.pdf",
    log:
        "logs/figures/fig07_request_span-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig07_request_span --run-config {input.config} --subject {wildcards.traceset}"
        " --positions {input.positions} -o {output} 2> {log}"


rule tab_acceptance_stats:
    input:
        config=RUN_CONFIG,
        positions=trace_tables("positions"),
    output:
        tex="figures/tab_acceptance_stats-{traceset}.tex",
        csv="figures/tab_acceptance_stats-{traceset}.csv",
        metrics="results/metrics/acceptance-{traceset}.json",
    log:
        "logs/figures/tab_acceptance_stats-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_acceptance_stats --run-config {input.config} --subject {wildcards.traceset}"
        " --positions {input.positions} --csv {output.csv} --metrics {output.metrics} -o {output.tex} 2> {log}"
