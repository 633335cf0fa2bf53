# Which experiments get a cost model, upper bounds and a closed loop, and their targets (upperbounds.smk).
# Included at the top of workflow/rules/upperbounds.smk (functions and tables only: `snakemake --lint` wants
# rules and functions in separate files).

# --- which experiments get a cost model, upper bounds and a closed loop; their targets ------------------------

def upper_bound_methods(exp):
    """The experiment's traced methods the simulator models (n-gram and model-based drafters), in trace-set order."""
    from specrepro.engine.results.modelfit import DRAFTERS, LOOKUP

    ts = TRACE_SETS.get(f"engine-{exp}")
    return [m for m, _ in ts["proposers"] if m == LOOKUP or m in DRAFTERS] if ts else []


# experiments with an engine trace set the simulator can use; experiments whose cost model the run fits
UPPER_BOUND_EXPERIMENTS = [x for x in EXPERIMENTS if upper_bound_methods(x)]
COSTFIT_EXPERIMENTS = [x for x in EXPERIMENTS if x in UPPER_BOUND_EXPERIMENTS or any(px == x for px, _ in PROFILE_JOBS)]
UPPER_BOUND_OUTPUTS = ["tab_closed_loop.tex", "fig_closed_loop.pdf", "tab_falsification.tex", "fig10_sim_engine.pdf", "fig12_sim_engine.pdf",
                       "tab_sim_engine.tex"]


# The per-experiment figures and tables: every experiment of a GPU run; on a CPU run the real model (SmolLM2), not the
# random stand-ins (their cost models, simulations and closed loops still run: fig_costfit, the closed-loop summary)
UPPER_BOUND_FIGURE_EXPERIMENTS = [x for x in UPPER_BOUND_EXPERIMENTS
                                  if RUN["kind"] == "gpu" or not EXPERIMENTS[x].get("stands_in_for")]


def upper_bound_targets():
    """The closed-loop summary of every experiment, then per experiment its closed loop (its error) and its upper
    bounds (report order)."""
    out = ["figures/tab_closed_loop_summary-engine.tex"] if UPPER_BOUND_EXPERIMENTS else []
    return out + [f"figures/{n.replace('.', f'-engine-{x}.')}" for x in UPPER_BOUND_FIGURE_EXPERIMENTS
                  for n in UPPER_BOUND_OUTPUTS] + [f"figures/tab_hybrid-engine-{x}.tex" for x in HYBRID_EXPERIMENTS
                                                   if x in UPPER_BOUND_FIGURE_EXPERIMENTS]


# --- the draft jobs (workflow/rules/drafts.smk) against the simulator: specrepro engine-drafted -------------------

# experiments with draft jobs (oracle, controlled, hybrid) and upper bounds; those with a hybrid job
DRAFTED_EXPERIMENTS = [x for x in UPPER_BOUND_EXPERIMENTS if any(e == x for e, _ in DRAFT_JOBS)]
HYBRID_EXPERIMENTS = [x for x in DRAFTED_EXPERIMENTS
                      if any(e == x and j["mode"] == "hybrid" for (e, _), j in DRAFT_JOBS.items())]


def drafted_points(exp):
    """The draft jobs' points of one experiment (specrepro draft-bench)."""
    return [_drafts.DRAFT_OUTPUT.format(exp=exp, config=c) for e, c in DRAFT_JOBS if e == exp]


def measured_bounds(wc):
    """engine-drafted's bounds table where the experiment ran draft jobs (Figs. 10/12 draw the measured bound)."""
    return [f"results/simulator/engine-{wc.exp}/measured_bounds.csv"] if wc.exp in DRAFTED_EXPERIMENTS else []


def drafted_summary(wc):
    """engine-drafted's summary where the experiment ran draft jobs (its repeat check: the closed loop's noise floor)."""
    return [f"results/simulator/engine-{wc.exp}/drafted.json"] if wc.exp in DRAFTED_EXPERIMENTS else []


def costfit_targets():
    return ["figures/fig_costfit-engine.pdf", "figures/tab_costfit-engine.tex"] if COSTFIT_EXPERIMENTS else []


def exp_profile_jobs(exp):
    return [c for x, c in PROFILE_JOBS if x == exp]


def exp_trace_files(exp):
    ts = TRACE_SETS[f"engine-{exp}"]
    return [ts["files"][d] for d in ts["datasets"]]


def ngram_trace_inputs(wc):
    """The n-gram trace job's own file and check record (n-gram's match probability), when n-gram is traced."""
    if "ngram" not in upper_bound_methods(wc.exp):
        return []
    return [f"results/engine/{wc.exp}/traces/ngram.jsonl", f"results/engine/{wc.exp}/traces/ngram.check.json"]
