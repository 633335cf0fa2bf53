# Inputs with provenance: models, drafters and datasets from the Hugging Face Hub at pinned revisions
# (into cache.huggingface), each with a manifest; and results/manifest.json, every input of the run.
# `build:` models (made by the engine rules) write the same manifest under the same path.

include: "helpers/inputs.smk"


HF_MODELS = {model_name(m, d): model_source(model_name(m, d))["hf"] for m, d in used_models() if "hf" in model_source(model_name(m, d))}
HF_DATASETS = [d for d in used_datasets() if "hf" in config["datasets"][d]["source"]]


rule hf_model:
    """One model or drafter at its pinned revision; its manifest lists every file's SHA-256."""
    input:
        preflight_input(),
    output:
        "resources/models/{name}/manifest.json",
    wildcard_constraints:
        name=name_regex(HF_MODELS),
    params:
        repo=lambda wc: HF_MODELS[wc.name]["repo"],
        revision=lambda wc: f"--revision {HF_MODELS[wc.name]['revision']}" if HF_MODELS[wc.name].get("revision") else "",
        gated=lambda wc: "--gated" if HF_MODELS[wc.name].get("gated") else "",
        offline="--offline" if OFFLINE else "",
        cache=HF_HUB_CACHE,
    log:
        "logs/hf_model/{name}.log",
    conda:
        "../../envs/inputs.yaml"
    shell:
        "specrepro fetch-model --name {wildcards.name:q} --repo {params.repo:q} {params.revision} {params.gated}"
        " {params.offline} --cache-dir {params.cache:q} -o {output:q} 2> {log}"


rule dataset_input:
    """One dataset: a Hub dataset at its pinned revision, or a prompts file of the repository."""
    input:
        prompts=lambda wc: [str(REPO / s["prompts_file"])] if "prompts_file" in (s := config["datasets"][wc.dataset]["source"]) else [],
        preflight=lambda wc: preflight_input() if wc.dataset in HF_DATASETS else [],
    output:
        "resources/datasets/{dataset}/manifest.json",
    params:
        source=lambda wc: json.dumps(config["datasets"][wc.dataset]["source"], sort_keys=True),
        sampling=lambda wc: json.dumps(
            {k: config["datasets"][wc.dataset][k] for k in ("num_samples", "seed", "max_output_tokens")}, sort_keys=True
        ),
        offline="--offline" if OFFLINE else "",
        cache=HF_HUB_CACHE,
        repo=lambda wc: str(REPO),
    log:
        "logs/dataset_input/{dataset}.log",
    conda:
        "../../envs/inputs.yaml"
    shell:
        "specrepro fetch-dataset --name {wildcards.dataset} --source {params.source:q} --sampling {params.sampling:q}"
        " {params.offline} --cache-dir {params.cache:q} --repo {params.repo:q} -o {output:q} 2> {log}"


rule manifest:
    """Every input of this run with its revision and checksum (shown in the report)."""
    input:
        input_records(),
    output:
        MANIFEST,
    log:
        "logs/manifest.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro manifest {input:q} -o {output} 2> {log}"
