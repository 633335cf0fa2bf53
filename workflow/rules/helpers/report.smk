# Everything the report shows and the metrics the claims table reads (report.smk).
# Included at the top of workflow/rules/report.smk (functions and tables only: `snakemake --lint` wants
# rules and functions in separate files).

def report_figures():
    """Every figure and table the report shows, for this config."""
    out = []
    for ts in TRACE_SETS:
        if TRACE_SETS[ts]["origin"] == "engine" and ts[len("engine-"):] not in figure_experiments():
            continue
        out += acceptance_targets(ts)
    for ts in SIM_TRACE_SETS:
        out += simulator_targets(ts)
    # per-model cost models and upper bounds (workflow/rules/upperbounds.smk)
    out += costfit_targets() + upper_bound_targets()
    return out + engine_targets() + DIGITISE_TARGETS + SIZING_TARGETS


def metrics_files():
    out = [f"results/metrics/acceptance-{ts}.json" for ts in TRACE_SETS]
    out += [f"results/metrics/simulator-{ts}.json" for ts in SIM_TRACE_SETS]
    if EXPERIMENTS:
        out += ["results/metrics/engine.json", "results/metrics/engine-memory.json"]
    if TREE_EXPERIMENTS:
        out.append("results/metrics/engine-tree.json")
    out += [f"results/metrics/engine-sim-{x}.json" for x in UPPER_BOUND_EXPERIMENTS]
    return out + (["results/metrics/engine-breakdown.json"] if PROFILE_JOBS else [])
