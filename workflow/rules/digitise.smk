# The paper's figure images read independently (specrepro.analysis.digitise): no registry or simulator value
# enters the reading. Outputs:
#   results/digitised/readings.csv    one row per marker or bar of Figs. 1, 3, 10, 12 (value, fit, readable)
#   figures/tab_digitiser-paper.*     the readings against paper/claims.yaml (agreement per figure)

# The digitiser reads the paper's figure images when the configured folder holds them; otherwise its table
# is left out with one line on stderr.
PAPER_FIGURES = config.get("paper_figures") or {}
PAPER_FIGURES_DIR = repo_path(PAPER_FIGURES.get("dir"))
_missing_figs = [f for f in PAPER_FIGURES.get("files", {}) if not (Path(PAPER_FIGURES_DIR) / f).exists()] if PAPER_FIGURES_DIR else []
DIGITISE = bool(PAPER_FIGURES) and not _missing_figs
if PAPER_FIGURES and _missing_figs and workflow.is_main_process:
    print(f"note: {PAPER_FIGURES_DIR}/{_missing_figs[0]} not found: the digitiser table is left out of this run",
          file=sys.stderr)
DIGITISE_TARGETS = ["figures/tab_digitiser-paper.tex"] if DIGITISE else []


rule digitise:
    """Read the markers and bars of the paper's figure images (each checked against its SHA-256)."""
    input:
        images=[f"{PAPER_FIGURES_DIR}/{f}" for f in PAPER_FIGURES.get("files", {})] if DIGITISE else [],
    output:
        "results/digitised/readings.csv",
    params:
        dir=lambda wc, input: str(Path(input.images[0]).parent),
        sha256=" ".join(f"{f}={h}" for f, h in PAPER_FIGURES.get("files", {}).items()),
        traceset=RELEASED["name"],
    log:
        "logs/digitise.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro digitise --figures {params.dir:q} --sha256 {params.sha256} --traceset {params.traceset}"
        " -o {output} 2> {log}"


rule tab_digitiser:
    """The readings against the registry: per figure how many agree within the claim's tolerance."""
    input:
        config=RUN_CONFIG,
        readings="results/digitised/readings.csv",
        claims=str(REPO / "paper" / "claims.yaml"),
        images=str(REPO / "paper" / "figure_images.yaml"),
    output:
        tex="figures/tab_digitiser-paper.tex",
        csv="figures/tab_digitiser-paper.csv",
    log:
        "logs/figures/tab_digitiser-paper.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_digitiser --run-config {input.config} --subject paper --readings {input.readings}"
        " --claims {input.claims} --images {input.images} --csv {output.csv} -o {output.tex} 2> {log}"
