# Helpers of workflow/rules/drafts.smk: the draft jobs of the config (experiments[].drafts; specrepro.jobspec.drafts).

from specrepro.jobspec import draftjobs as _drafts
from specrepro.jobspec.jobs import draft_bench_spec as _draft_bench_spec

DRAFT_JOBS = {(x, c): j for x in EXPERIMENTS for c, j in _drafts.draft_jobs(EXPERIMENTS[x]).items()}
DRAFT_LABELS = sorted({c for _, c in DRAFT_JOBS})


def draft_spec(wc):
    """The JSON spec of `specrepro draft-bench` for one draft job."""
    return json.dumps(_draft_bench_spec(config, wc.exp, wc.config), sort_keys=True)


def draft_inputs(wc):
    """Prompt tables, target and drafter manifests, the keep-one traces it reads, the no-SD points and (adaptive
    hybrid) the experiment's fitted cost model."""
    job = DRAFT_JOBS[(wc.exp, wc.config)]
    model = EXPERIMENTS[wc.exp]["model"]
    out = {"prompts": [prompts_file(wc.exp, d) for d in job["datasets"]], "target": model_manifest(model),
           "none_points": f"results/engine/{wc.exp}/bench/none.parquet",
           "traces": [f"results/engine/{wc.exp}/traces/{m}.jsonl" for m in job["traces"]]}
    if drafter_of(wc.exp, job["method"]).get("source"):
        out["drafter"] = model_manifest(model, job["method"])
    if job["mode"] == "hybrid" and job["policy"] == "adaptive":
        out["cost_model"] = f"results/engine/{wc.exp}/cost_model.yaml"
    return out


def draft_targets():
    """Every draft job's points (the run's `all` target asks for them)."""
    return [_drafts.DRAFT_OUTPUT.format(exp=x, config=c) for x, c in DRAFT_JOBS]


def draft_image_name(wc):
    """The image of a draft job: its engine method's (specrepro.jobspec.images.job_image); None on CPU runs."""
    if RUN["kind"] != "gpu":
        return None
    job = DRAFT_JOBS[(wc.exp, wc.config)]
    return job_image(config, EXPERIMENTS[wc.exp], job["method"], job["k"])


def draft_engine_inputs(wc):
    """As engine_inputs: the job's image and its GPU test (apptainer), preflight."""
    out = {}
    name = draft_image_name(wc)
    if name and USES_APPTAINER:
        out["image"] = image_path(name)
        out["image_test"] = image_test(name)
    if config.get("preflight", True):
        out["preflight"] = ancient(PREFLIGHT)
    return out


def draft_container(wc):
    name = draft_image_name(wc)
    return image_path(name) if name else None
