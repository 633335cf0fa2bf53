# The acceptance figures and tables of a trace set (acceptance.smk; report.smk lists them).
# Included at the top of workflow/rules/acceptance.smk (functions and tables only: `snakemake --lint` wants
# rules and functions in separate files).

ACCEPTANCE_FIGURES = [
    "fig05_acceptance_heatmap",
    "fig11_acceptance_diff",
    "fig07_request_span",
]
ACCEPTANCE_TABLES = ["tab_acceptance_stats"]


def acceptance_targets(traceset):
    # the difference heatmap needs two proposers
    names = [n for n in ACCEPTANCE_FIGURES if n != "fig11_acceptance_diff" or len(TRACE_SETS[traceset]["proposers"]) > 1]
    # a per-request figure of fewer than MIN_REQUESTS requests per dataset shows nothing: left out (the report says so)
    if min((TRACE_SETS[traceset].get("requests") or {"": MIN_REQUESTS}).values()) < MIN_REQUESTS:
        names = [n for n in names if n not in PER_REQUEST]
    out = [f"figures/{name}-{traceset}.pdf" for name in names]
    out += [f"figures/{name}-{traceset}.tex" for name in ACCEPTANCE_TABLES]
    return out
