# Models the pipeline builds, unpacks from packages or trains (models.smk).
# Included at the top of workflow/rules/models.smk (functions and tables only: `snakemake --lint` wants
# rules and functions in separate files).

# --- models the pipeline builds -----------------------------------------------------------

BUILD_MODELS = {
    model_name(m, d): model_source(model_name(m, d))["build"] for m, d in used_models() if "build" in model_source(model_name(m, d))
}
# the tokenizer of a built target is trained on every prompts file of the config (sorted: same bytes each run)
BUILD_CORPUS = sorted({str(REPO / d["source"]["prompts_file"]) for d in config["datasets"].values() if "prompts_file" in d["source"]})


def build_target_manifest(wc):
    """A built drafter needs its target (tokenizer, hidden size); a built target needs nothing."""
    model, _, method = wc.name.partition("/drafters/")
    return [model_manifest(model)] if method else []


# --- models from packages and drafters the pipeline trains ------------------------------------

def _sources_of(key):
    out = {}
    for m, d in used_models():
        src = model_source(model_name(m, d))
        if key in src:
            out[model_name(m, d)] = src[key]
    return out


PACKAGE_MODELS = _sources_of("package")
TRAIN_MODELS = _sources_of("train")
# targets whose drafters are trained: their training outputs and hidden states are computed once
TRAIN_TARGETS = sorted({n.partition("/drafters/")[0] for n in TRAIN_MODELS})


def train_data_file(model):
    return f"resources/models/{model}/train/outputs.parquet"


def train_engine(model):
    """Engine settings (JSON) of the training-data jobs: the engine section with the train_data's dtype."""
    td = config["models"][model].get("train_data") or {}
    return json.dumps({**ENGINE, "dtype": td.get("dtype", "bfloat16")}, sort_keys=True)
