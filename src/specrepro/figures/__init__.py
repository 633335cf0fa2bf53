"""Figures and tables: one module per target, each with its caption and the paper's statement.

A module defines ``SPEC`` (a :class:`FigureSpec`) and ``build(inputs, output, ctx)``.
Output files are named ``figures/<spec.name>-<subject>.<ext>`` where the subject is
a trace set or an experiment; the report finds the spec from the file name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

from ..jobspec import METHOD_LABELS as _ENGINE_METHOD_LABELS
from ..jobspec.args import dataset_labels
from ..jobspec.trees import experiment_engine, tree_study
from ..core.io import SpecReproError

#: modules of this package that define a figure or table (the report's order is specrepro.report.SECTIONS)
MODULES = (
    "acceptance_heatmap",
    "acceptance_diff",
    "request_span",
    "acceptance_table",
    "head_positions",
    "head_positions_figure",
    "sim_ngram_table",
    "sim_fig10",
    "sim_fig12",
    "sim_oracle_gap",
    "sim_fig09",
    "sim_beyond_table",
    "sim_beyond_figure",
    "today_figure",
    "today_table",
    "engine_speedup",
    "engine_tree",
    "engine_tree_table",
    "engine_reasoning",
    "engine_lossless",
    "engine_runtime",
    "engine_jobs",
    "engine_exercise",
    "engine_bleu",
    "engine_breakdown",
    "engine_memory",
    "engine_costfit",
    "engine_costfit_table",
    "engine_closed_loop_summary",
    "engine_closed_loop_table",
    "engine_closed_loop_figure",
    "engine_falsification_table",
    "engine_sim_fig10",
    "engine_sim_fig12",
    "engine_sim_table",
    "engine_hybrid_table",
    "engine_trends",
    "digitiser_table",
    "sizing_validation",
)


@dataclass(frozen=True)
class FigureSpec:
    """What the report needs to know about one figure or table."""

    name: str  #: file-name stem before "-<subject>"
    kind: str  #: "figure" or "table"
    title: str
    paper_ref: str  #: e.g. "Fig. 5"
    caption: str  #: may use {subject_label}
    paper_statement: str  #: what the paper says this shows, in our words
    data: str  #: "released traces", "engine runs", "simulator" ...
    #: the run's files a figure without a CSV of its own draws ("{subject}": its subject; "<dataset>", "<variant>":
    #: one file each), named in the report's appendix "Where each number comes from"
    sources: tuple[str, ...] = ()


def spec(name: str) -> FigureSpec:
    for mod in MODULES:
        s = module(mod).SPEC
        if s.name == name:
            return s
    raise KeyError(name)


def _csv_hook(hook: str, name: str, path: str | Path) -> str:
    """The sentence a figure module's ``hook`` (``report_note`` or ``finding``, a function of its CSV path) gives
    for the output ``path`` (its CSV beside it); empty where the module has none or the CSV is missing."""
    mod = next((module(m) for m in MODULES if module(m).SPEC.name == name), None)
    fn = getattr(mod, hook, None)
    csv = Path(path).with_suffix(".csv")
    return fn(csv) if fn is not None and csv.exists() else ""


def report_note(name: str, path: str | Path) -> str:
    """A sentence the report prints under this figure or table: a statement its numbers make that the caption, the
    same for every run, cannot (``report_note(csv)`` of the figure's module)."""
    return _csv_hook("report_note", name, path)


def finding(name: str, path: str | Path) -> str:
    """The finding, in one sentence, a beyond-the-paper section opens with (``finding(csv)`` of the module of its
    first figure or table that has one)."""
    return _csv_hook("finding", name, path)


def module(mod: str):
    return importlib.import_module(f"{__name__}.{mod}")


def all_specs() -> list[FigureSpec]:
    return [module(m).SPEC for m in MODULES]


def by_cli_name(name: str):
    """The module whose spec name or module name is ``name`` (dashes or underscores)."""
    key = name.replace("-", "_")
    for mod in MODULES:
        m = module(mod)
        if key in (mod, m.SPEC.name):
            return m
    raise KeyError(name)


def parse_output_name(path: str | Path) -> tuple[str, str]:
    """``figures/fig05_acceptance_heatmap-h100-llama3.1-8b.pdf`` -> (spec name, subject)."""
    stem = Path(path).name
    for ext in (".pdf", ".tex", ".csv"):
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
    name, _, subject = stem.partition("-")
    return name, subject


@dataclass(frozen=True)
class TraceContext:
    """The trace set a figure is about: labels and orders taken from the run config."""

    subject: str
    subject_label: str
    datasets: tuple[str, ...]  #: in config order
    dataset_labels: dict
    proposers: dict  #: trace key -> label, in display order
    params: dict  #: the config's ``figures`` section
    run_kind: str = ""  #: the run config's ``run.kind`` ("cpu" or "gpu")
    #: engine subject only: the experiments in config order, each a dict with name, model, model_label,
    #: datasets, methods, batch_sizes, thinking, engine ("vllm" or "sglang"), tree_study (Fig. 2's)
    experiments: tuple = ()
    model_labels: dict = field(default_factory=dict)

    def dataset_label(self, key: str) -> str:
        return self.dataset_labels.get(key, key)

    def proposer_label(self, key: str) -> str:
        return self.proposers.get(key, key)


#: the subject of the engine figures and tables (files ``figures/<name>-engine.<ext>``)
ENGINE_SUBJECT = "engine"

#: engine methods and their labels, in display order
ENGINE_METHODS = dict(_ENGINE_METHOD_LABELS)


def engine_context(run_config: dict) -> TraceContext:
    """The context of the engine figures: every experiment of the run config, its datasets and methods."""
    kind = str(run_config.get("run", {}).get("kind", ""))
    default = {"cpu": "engine runs (CPU, tiny models)", "gpu": "engine runs (GPU)"}.get(kind, "engine runs")
    label = (run_config.get("subjects", {}).get(ENGINE_SUBJECT) or {}).get("label", default)
    models = run_config.get("models", {})
    exps, datasets = [], []
    for e in run_config.get("experiments", []) or []:
        for d in e.get("datasets", []):
            if d not in datasets:
                datasets.append(d)
        model = e.get("model", e.get("name"))
        exps.append({
            "name": e["name"], "model": model, "model_label": (models.get(model) or {}).get("label", model),
            "datasets": list(e.get("datasets", [])), "methods": list(e.get("methods", [])),
            "batch_sizes": [int(b) for b in e.get("batch_sizes", [])], "thinking": bool(e.get("thinking", False)),
            "engine": experiment_engine(e), "tree_study": tree_study(e),
        })
    return TraceContext(
        subject=ENGINE_SUBJECT,
        subject_label=label,
        datasets=tuple(datasets),
        dataset_labels=dataset_labels(run_config),
        proposers=dict(ENGINE_METHODS),
        params=dict(run_config.get("figures", {})),
        run_kind=kind,
        experiments=tuple(exps),
        model_labels={k: (v or {}).get("label", k) for k, v in models.items()},
    )


def trace_context(run_config: dict, traceset: str) -> TraceContext:
    """Build the context of trace set ``traceset`` (or of the engine runs, subject "engine") from the run config."""
    sets = run_config.get("trace_sets", {})
    if traceset == ENGINE_SUBJECT and traceset not in sets:
        return engine_context(run_config)
    other = run_config.get("subjects", {})
    if traceset not in sets and traceset in other:  # a subject that is neither a trace set nor the engine runs
        return TraceContext(subject=traceset, subject_label=other[traceset].get("label", traceset), datasets=(),
                            dataset_labels={}, proposers={}, params=dict(run_config.get("figures", {})),
                            run_kind=str(run_config.get("run", {}).get("kind", "")))
    if traceset not in sets:
        raise SpecReproError(f"trace set {traceset!r} is not in the run config (known: {', '.join(sorted(sets))})")
    ts = sets[traceset]
    return TraceContext(
        subject=traceset,
        subject_label=ts.get("label", traceset),
        datasets=tuple(ts["datasets"]),
        dataset_labels=dataset_labels(run_config),
        proposers={k: label for k, label in ts["proposers"]},
        params=dict(run_config.get("figures", {})),
        run_kind=str(run_config.get("run", {}).get("kind", "")),
    )
