# Acceptance traces: obtain the authors' released traces (verified copy or download), then tidy tables.

include: "helpers/traces.smk"


rule fetch_released_trace:
    """The released trace of one dataset, SHA-256 checked; a local traces_dir copy is used when present."""
    output:
        trace=f"resources/traces/{RELEASED['name']}/{{dataset}}.jsonl",
        source=f"resources/traces/{RELEASED['name']}/{{dataset}}.source.json",
    params:
        url=lambda wc: RELEASED["url"].format(dataset=wc.dataset),
        sha256=lambda wc: RELEASED["files"][wc.dataset]["sha256"],
        filename=lambda wc: RELEASED.get("filename", "combined_{dataset}.jsonl").format(dataset=wc.dataset),
        local=f"--local-dir {TRACES_DIR!r}" if TRACES_DIR else "",
        offline="--offline" if OFFLINE else "",
    log:
        f"logs/fetch_released_trace/{RELEASED['name']}/{{dataset}}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro fetch-trace --url {params.url:q} --sha256 {params.sha256} --filename {params.filename:q}"
        " {params.local} {params.offline} --provenance {output.source:q} -o {output.trace:q} 2> {log}"


rule trace_tables:
    """Validate a trace file and write its tidy tables (one row per request; per request x proposer x position)."""
    input:
        trace_file,
    output:
        positions="results/traces/{traceset}/{dataset}.positions.parquet",
        requests="results/traces/{traceset}/{dataset}.requests.parquet",
    params:
        aligned=lambda wc: " ".join(TRACE_SETS[wc.traceset]["aligned"]),
    log:
        "logs/trace_tables/{traceset}/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro trace-tables {input:q} --dataset {wildcards.dataset} --aligned {params.aligned}"
        " --positions {output.positions:q} --requests {output.requests:q} 2> {log}"
