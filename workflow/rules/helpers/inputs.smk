# Which models and datasets the run reads, their manifests, and the provenance records of every input (inputs.smk).
# Included at the top of workflow/rules/inputs.smk (functions and tables only: `snakemake --lint` wants
# rules and functions in separate files).

def input_records():
    """Provenance records of every input this run reads (released traces, models, datasets)."""
    out = [f"resources/traces/{RELEASED['name']}/{d}.source.json" for d in TRACE_SETS[RELEASED["name"]]["datasets"]]
    out += [model_manifest(m, d) for m, d in used_models()]
    out += [dataset_manifest(d) for d in used_datasets()]
    if USES_APPTAINER and EXPERIMENTS:
        out += [f"results/containers/{image_stem(name)}.json" for name in used_images()]
    return out


def used_models():
    """(model, None) for each target an experiment runs and (model, method) for each drafter it uses."""
    out = []
    for exp in config.get("experiments", []):
        m = exp["model"]
        out.append((m, None))
        drafters = config["models"][m].get("drafters") or {}
        for meth in exp["methods"]:
            if meth["method"] in drafters and "source" in drafters[meth["method"]]:
                out.append((m, meth["method"]))
    return list(dict.fromkeys(out))


def used_datasets():
    """Datasets the experiments (and, when there are experiments, the profiling runs) read."""
    exps = config.get("experiments", [])
    names = [d for e in exps for d in [*e["datasets"], *e.get("profile_datasets", [])]] + (
        list(config["profiling"]["datasets"]) if exps else [])
    return list(dict.fromkeys(names))


def model_name(model, method=None):
    """Key of a model input: the target `<model>`, or a drafter `<model>/drafters/<method>`."""
    return model if method is None else f"{model}/drafters/{method}"


def target_of(name):
    """The target model of a model key (``<model>`` or ``<model>/drafters/<method>``)."""
    return name.partition("/drafters/")[0]


def model_source(name):
    model, _, method = name.partition("/drafters/")
    m = config["models"][model]
    return m["source"] if not method else m["drafters"][method]["source"]


def model_manifest(model, method=None):
    """resources/models/<name>/manifest.json: {name, source, repo, revision, path, files, bytes} (see specrepro.core.hub)."""
    return f"resources/models/{model_name(model, method)}/manifest.json"


def dataset_manifest(dataset):
    return f"resources/datasets/{dataset}/manifest.json"
