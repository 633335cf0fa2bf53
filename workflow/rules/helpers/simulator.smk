# The simulator's settings, jobs' arguments and inputs, and its report targets (simulator.smk).
# Included at the top of workflow/rules/simulator.smk (functions and tables only: `snakemake --lint` wants
# rules and functions in separate files).

# The simulator runs on the released trace set: it has both proposers'
# traces and a cost model of its hardware. Its figures and tables, in report order:
SIM = config.get("simulator", {})
SIM_TRACE_SETS = [RELEASED["name"]] if SIM else []
SIMULATOR_OUTPUTS = [
    "tab_head_positions",
    "fig_head_positions",
    "tab_ngram_agreement",
    "fig10_sim_speedup",
    "fig12_oracle_combine",
    "tab_oracle_gap",
    "fig09_bleu_ngram",
    "tab_sim_beyond",
    "fig_sim_beyond",
    "fig_today",
    "tab_today",
]
# The paper's question on today's engines (specrepro.analysis.today)
TODAY = SIM.get("today", {})


def simulator_targets(traceset):
    return [f"figures/{n}-{traceset}.{'tex' if n.startswith('tab_') else 'pdf'}" for n in SIMULATOR_OUTPUTS]


# Simulator jobs: variants by name, the cost model, shared arguments.
SIM_VARIANTS = {v["name"]: v for v in SIM.get("variants", [])}
_cost = SIM.get("cost_model", "llama3.1-8b-h100")
SIM_COST = _cost if (REPO / "src" / "specrepro" / "data" / "cost_models" / f"{_cost}.yaml").exists() else repo_path(_cost)


def sim_args(batch_sizes=None, num_requests=None):
    """Arguments every simulate job shares; the dataset's n-gram match probability comes from the config."""

    def args(wc):
        bs = " ".join(str(b) for b in (batch_sizes or SIM["batch_sizes"]))
        prob = SIM["ngram_match_prob"][wc.dataset]
        return (
            f"--dataset {wc.dataset} --batch-sizes {bs} --cost-model {SIM_COST!r}"
            f" --num-requests {num_requests or SIM['num_requests']} --seed {SIM['seed']} --ngram-match-prob {prob}"
        )

    return args


def sim_inputs(kind):
    """One simulator output per dataset of the trace set."""

    def inputs(wc):
        return [f"results/simulator/{wc.traceset}/{kind}/{d}.csv" for d in TRACE_SETS[wc.traceset]["datasets"]]

    return inputs


def today_inputs(wc):
    """The today stage's simulations of every dataset (k by batch size; suffix and Oracle Combine of three)."""
    ds = TRACE_SETS[wc.traceset]["datasets"]
    return [f"results/simulator/{wc.traceset}/today/{d}{x}.csv" for d in ds for x in ("", ".suffix")]


def today_kgrid_inputs(wc):
    """The fixed-k grids (every candidate k): the best fixed k over the schedules' own candidates."""
    return [f"results/simulator/{wc.traceset}/today/kgrid/{d}.csv" for d in TRACE_SETS[wc.traceset]["datasets"]]


def adaptive_variant_inputs(wc):
    """Summaries of the variants that run the online adaptive policy in the paper's batching (for the today stage)."""
    names = [n for n, v in SIM_VARIANTS.items()
             if "adaptive" in v["policies"] and v.get("batching", "replicate") == "replicate"
             and v.get("pairing", "index") == "index"]
    return [f"results/simulator/{wc.traceset}/variants/{n}/{d}.csv" for n in names for d in TRACE_SETS[wc.traceset]["datasets"]]


def honest_variant_inputs(wc):
    """Summaries of the variants that run Oracle Combine charged both drafters (combine_cost: both) in the paper's
    batching: the today table's honest-cost oracle."""
    names = [n for n, v in SIM_VARIANTS.items()
             if v.get("combine_cost") == "both" and "oracle" in v["policies"] and "combined" in v["proposers"]
             and v.get("batching", "replicate") == "replicate" and v.get("pairing", "index") == "index"]
    return [f"results/simulator/{wc.traceset}/variants/{n}/{d}.csv" for n in names for d in TRACE_SETS[wc.traceset]["datasets"]]


def today_engine_points(wc):
    """GPU runs: bench tables of the experiments that run today's methods (suffix, k by batch size)."""
    if RUN["kind"] != "gpu":
        return []  # tiny random models measure nothing about the question
    exps = [x for x, e in EXPERIMENTS.items()
            if any(m["method"] == "suffix" or m.get("k_by_batch_size") for m in e["methods"])]
    return [f"results/engine/{x}/bench/{c}.parquet" for x in exps for c in exp_configs(x)]


def variant_inputs(wc):
    return [
        f"results/simulator/{wc.traceset}/variants/{v}/{d}.csv"
        for v in SIM_VARIANTS
        for d in TRACE_SETS[wc.traceset]["datasets"]
    ]
