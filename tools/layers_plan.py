"""The proposed layers of docs/LAYERS-plan.md, applied to today's imports: every import that points up (or
between two packages of one layer that must stay independent), with its file and line.

    python tools/layers_plan.py            # the imports the restructure has to remove or redirect
    python tools/layers_plan.py --map      # today's module -> its proposed place and layer

``PLACE`` maps each of today's modules to where the plan moves it; ``LAYERS`` lists the proposed packages from
the top down, as the plan's two container contracts (one entry per layer; ``|`` joins packages that must not
import each other, ``:`` packages that may). A module split between two places by the plan is mapped to the place most of it goes to; the helpers that
go elsewhere are named in the plan and show up here as the arrows they cause today. Delete this file once the
restructure has landed and ``lint-imports`` holds the contracts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_graph import graph, internal, where  # noqa: E402

#: the proposed layers from the top down, as the two container contracts of the plan say them: the children of
#: ``specrepro``, then the children of ``specrepro.engine``
LAYERS = {
    "specrepro": ["__main__", "cli | vllm_plugin", "report", "figures", "analysis", "engine | sim",
                  "config | plan | preflight", "jobspec", "core"],
    "specrepro.engine": ["results", "run | check | models"],
}

#: today's module -> its proposed place (package, or module inside it)
PLACE = {
    "specrepro": "specrepro.core",  # the package's own __init__ (version only)
    "specrepro.__main__": "specrepro.__main__",
    "specrepro.cli": "specrepro.cli",
    "specrepro.vllm_plugin": "specrepro.vllm_plugin",
    "specrepro.report": "specrepro.report",
    # analyses
    "specrepro.analysis.acceptance": "specrepro.analysis.acceptance",
    "specrepro.analysis.claims": "specrepro.analysis.claims",  # Claim and load_claims go to core.registry
    "specrepro.digitise": "specrepro.analysis.digitise",
    "specrepro.analysis.sizing": "specrepro.analysis.sizing",
    "specrepro.analysis.today": "specrepro.analysis.today",
    # engine: result analyses
    "specrepro.engine.results.metrics": "specrepro.engine.results.metrics",
    "specrepro.engine.results.costfit": "specrepro.engine.results.costfit",  # profile_sweep & co. go to run.profile
    "specrepro.engine.results.memory": "specrepro.engine.results.memory",  # vllm_reported_memory goes to run.bench
    # engine: running engines
    "specrepro.engine.run.bench": "specrepro.engine.run.bench",
    "specrepro.engine.run.profile": "specrepro.engine.run.profile",
    "specrepro.engine.run.traces": "specrepro.engine.run.traces",
    "specrepro.engine.run.instrument": "specrepro.engine.run.instrument",  # hook tables go to spec.hooks
    "specrepro.engine.run.progress": "specrepro.engine.run.progress",
    "specrepro.jobspec.counters": "specrepro.jobspec.counters",  # counter names go to spec.counters
    "specrepro.engine.run.sglang": "specrepro.engine.run.sglang",  # argument builders go to spec.sglang
    "specrepro.engine.run.breakdown": "specrepro.engine.run.breakdown",
    # engine: checks against engine source
    "specrepro.engine.check.sourcecheck": "specrepro.engine.check.sourcecheck",
    "specrepro.engine.check.sourcecheck_sglang": "specrepro.engine.check.sourcecheck_sglang",
    "specrepro.engine.check.hookcheck": "specrepro.engine.check.hookcheck",
    "specrepro.engine.check.sources": "specrepro.engine.check.sources",
    # engine: building models
    "specrepro.engine.models.families": "specrepro.engine.models.families",
    "specrepro.engine.models.standins": "specrepro.engine.models.standins",
    "specrepro.engine.models.from_gguf": "specrepro.engine.models.from_gguf",
    "specrepro.engine.models.drafters": "specrepro.engine.models.drafters",
    "specrepro.engine.models.oracle": "specrepro.engine.models.oracle",
    # what each engine job is and passes (no vllm, no torch): a package of its own, below config
    "specrepro.engine": "specrepro.jobspec",  # the package __init__ re-exports args (drop it, or re-export jobspec)
    "specrepro.jobspec.args": "specrepro.jobspec.args",
    "specrepro.jobspec.jobs": "specrepro.jobspec.jobs",
    "specrepro.jobspec.images": "specrepro.jobspec.images",
    "specrepro.jobspec.trees": "specrepro.jobspec.trees",
    # simulator
    "specrepro.sim.simulator": "specrepro.sim.simulator",
    # run configuration
    "specrepro.config": "specrepro.config",
    "specrepro.plan": "specrepro.plan",
    "specrepro.preflight": "specrepro.preflight",
    # added after the plan was written
    "specrepro.analysis.closedloop": "specrepro.analysis.closedloop",
    "specrepro.analysis.enginesim": "specrepro.analysis.enginesim",
    "specrepro.engine.results.modelfit": "specrepro.engine.results.modelfit",
    "specrepro.jobspec.sglang": "specrepro.jobspec.sglang",
    "specrepro.engine.run.verbs": "specrepro.engine.run.verbs",
    "specrepro.core.layout": "specrepro.core.layout",
    "specrepro.jobspec.schedule": "specrepro.jobspec.schedule", "specrepro.jobspec.hooks": "specrepro.jobspec.hooks",
    "specrepro.engine.run.llm": "specrepro.engine.run.llm", "specrepro.core.engines": "specrepro.core.engines",
    "specrepro.core": "specrepro.core", "specrepro.core.errors": "specrepro.core.errors",
    "specrepro.core.verbs": "specrepro.core.verbs",
    "specrepro.sim": "specrepro.sim", "specrepro.sim.names": "specrepro.sim.names", "specrepro.sim.verbs": "specrepro.sim.verbs",
    "specrepro.analysis": "specrepro.analysis", "specrepro.analysis.verbs": "specrepro.analysis.verbs",
    # core
    **{f"specrepro.{m}": f"specrepro.core.{m}" for m in (
        "io", "traces", "ngram", "suffix", "costmodel", "uncertainty", "provenance", "latex", "hub", "fetch",
        "prompts", "bleu", "gpus", "integrity", "cluster")},
}


def layer_of(container: str, child: str) -> tuple[int, bool]:
    """(index from the top, whether its packages must stay independent) of a child of a container."""
    for i, layer in enumerate(LAYERS[container]):
        if child in (p.strip() for p in layer.replace(":", "|").split("|")):
            return i, "|" in layer
    raise KeyError(f"{container}.{child}: in no layer")


def judge(a: str, b: str) -> str | None:
    """``up``, ``sideways`` or None for an import of proposed module ``b`` by proposed module ``a``."""
    for container in sorted(LAYERS, key=len, reverse=True):
        pre = container + "."
        if a.startswith(pre) and b.startswith(pre):
            ca, cb = a[len(pre):].split(".")[0], b[len(pre):].split(".")[0]
            if ca == cb:
                if container != "specrepro":
                    return None
                continue
            (ia, ind), (ib, _) = layer_of(container, ca), layer_of(container, cb)
            if ib < ia:
                return "up"
            if ia == ib and ind:
                return "sideways"
            return None
    return None


def place_of(module: str) -> str:
    if module.startswith("specrepro.figures"):
        return module
    if module in PLACE:
        return PLACE[module]
    raise KeyError(f"{module}: not mapped in PLACE (a new module? add it)")


def violations():
    out = []
    for e in internal(graph()):
        a, b = place_of(e.importer), place_of(e.target)
        kind = judge(a, b)
        if kind:
            out.append((e, kind, a, b))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--map", action="store_true")
    a = ap.parse_args(argv)
    if a.map:
        for m in sorted({e.importer for e in graph()}):
            print(f"{m}\t{place_of(m)}")
        return 0
    found = violations()
    for e, kind, pa, pb in found:
        print(f"{where(e)}\t{kind}\t{pa} -> {pb}" + (f"\t(in {e.function})" if e.local else ""))
    print(f"{len(found)} imports against the proposed layers", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
