# The claims table and the LaTeX report (paper/report.pdf).

include: "helpers/report.smk"


rule claims:
    """The paper's claims (paper/claims.yaml) against the metrics this run measured."""
    input:
        registry=str(REPO / "paper" / "claims.yaml"),
        config=RUN_CONFIG,
        metrics=metrics_files(),
    output:
        "results/claims.csv",
    log:
        "logs/claims.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro claims --registry {input.registry} --run-config {input.config} --metrics {input.metrics}"
        " -o {output} 2> {log}"


rule report:
    """Render paper/templates/*.j2 with every figure and table of this run, compile with latexmk."""
    input:
        config=RUN_CONFIG,
        claims="results/claims.csv",
        figures=report_figures(),
        manifest=MANIFEST,
        template=str(REPO / "paper" / "templates" / "report.tex.j2"),
    output:
        pdf=REPORT_PDF,
    params:
        repo=lambda wc: str(REPO),
        templates=lambda wc, input: str(Path(input.template).parent),
    log:
        "logs/report.log",
    conda:
        "../../envs/report.yaml"
    shell:
        "specrepro report --run-config {input.config} --claims {input.claims} --figures {input.figures}"
        " --manifest {input.manifest} --templates {params.templates:q} --repo {params.repo:q}"
        " --tex paper/build/report.tex --pdf {output.pdf} > {log} 2>&1"
