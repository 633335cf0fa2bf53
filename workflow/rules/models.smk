# Models the pipeline builds itself (`source: {build: ...}`): the CPU run's tiny targets, drafters and
# heads (random weights, tokenizer trained on the prompt files). They write the same manifest as a
# Hub download (inputs.smk), at the same path, so engine rules cannot tell them apart.

BUILD_MODELS = {
    model_name(m, d): model_source(model_name(m, d))["build"] for m, d in used_models() if "build" in model_source(model_name(m, d))
}
# the tokenizer of a built target is trained on every prompts file of the config (sorted: same bytes each run)
BUILD_CORPUS = sorted({str(REPO / d["source"]["prompts_file"]) for d in config["datasets"].values() if "prompts_file" in d["source"]})


def build_target_manifest(wc):
    """A built drafter needs its target (tokenizer, hidden size); a built target needs nothing."""
    model, _, method = wc.name.partition("/drafters/")
    return [model_manifest(model)] if method else []


rule build_model:
    """A tiny model with random weights (deterministic from its seed), for the CPU run."""
    input:
        target=build_target_manifest,
        corpus=BUILD_CORPUS,
    output:
        "resources/models/{name}/manifest.json",
    wildcard_constraints:
        name=name_regex(BUILD_MODELS),
    params:
        kind=lambda wc: BUILD_MODELS[wc.name]["kind"],
        seed=lambda wc: BUILD_MODELS[wc.name].get("seed", 0),
        target=lambda wc, input: f"--target-manifest {input.target[0]!r}" if input.target else "",
        sizes=lambda wc: " ".join(f"--size {k}={v}" for k, v in sorted(BUILD_MODELS[wc.name].items()) if k not in ("kind", "seed")),
    log:
        "logs/build_model/{name}.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "specrepro build-model --name {wildcards.name:q} --kind {params.kind} --seed {params.seed} {params.target}"
        " --corpus {input.corpus:q} {params.sizes} -o {output:q} 2> {log}"
