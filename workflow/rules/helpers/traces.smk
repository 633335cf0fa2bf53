# Trace files and trace tables of a trace set (traces.smk; acceptance.smk and simulator.smk read the tables).
# Included at the top of workflow/rules/traces.smk (functions and tables only: `snakemake --lint` wants
# rules and functions in separate files).

def trace_file(wc):
    try:
        return TRACE_SETS[wc.traceset]["files"][wc.dataset]
    except KeyError:
        raise WorkflowError(f"no trace of dataset {wc.dataset!r} in trace set {wc.traceset!r}")


def trace_tables(kind):
    def inputs(wc):
        ts = TRACE_SETS[wc.traceset]
        return [f"results/traces/{wc.traceset}/{d}.{kind}.parquet" for d in ts["datasets"]]

    return inputs
