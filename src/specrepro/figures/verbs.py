"""``specrepro figure <name>``: the verb that builds one figure or table.

:data:`FIGURES` lists every figure's CLI name and help without importing its module (matplotlib, pandas), so
``specrepro figure --help`` stays cheap; ``specrepro figure <name> ...`` imports that figure's module only.
``tests/test_cli.py`` checks the table against the modules' ``SPEC`` (and :data:`specrepro.figures.MODULES`).
"""

from __future__ import annotations

import importlib
from typing import Sequence

#: spec name -> (help: "<paper_ref>: <title>", module of specrepro.figures), in MODULES order
FIGURES = {
    'fig05_acceptance_heatmap': ('Fig. 5: Per-position acceptance', 'acceptance_heatmap'),
    'fig11_acceptance_diff': ('Fig. 11: Where n-gram beats EAGLE', 'acceptance_diff'),
    'fig07_request_span': ('Fig. 7: Per-request mean acceptance length', 'request_span'),
    'tab_acceptance_stats': ('Figs. 5-7, 11: Acceptance statistics', 'acceptance_table'),
    'tab_head_positions': ("Sec. 3 (setup), Figs. 1, 5: Positions past the EAGLE-3 head's context", 'head_positions'),
    'fig_head_positions': ("Sec. 3 (setup), Fig. 5: EAGLE acceptance past the EAGLE-3 head's positions", 'head_positions_figure'),
    'tab_ngram_agreement': ('Figs. 5, 10: n-gram traces recomputed from tokens', 'sim_ngram_table'),
    'fig10_sim_speedup': ('Fig. 10: Simulated speedup: fixed k versus an oracle', 'sim_fig10'),
    'fig12_oracle_combine': ('Fig. 12: Oracle Combine: the best proposer at every position', 'sim_fig12'),
    'tab_oracle_gap': ('Figs. 10, 12: The oracle gap', 'sim_oracle_gap'),
    'fig09_bleu_ngram': ('Fig. 9: When n-gram beats EAGLE: prompt-output overlap', 'sim_fig09'),
    'tab_sim_beyond': ('Figs. 10, 12, extended: Beyond the paper: how much of the upper bound survives', 'sim_beyond_table'),
    'fig_sim_beyond': ('Figs. 10, 12, extended: Beyond the paper: the upper bound under honest accounting', 'sim_beyond_figure'),
    'fig_today': ("Figs. 10, 12; vLLM 0.34: The paper's question on today's engines", 'today_figure'),
    'tab_today': ("Figs. 10, 12; vLLM 0.34: The paper's question on today's engines: the gap closed", 'today_table'),
    'fig01_speedup': ('Fig. 1: End-to-end speedup of speculative decoding', 'engine_speedup'),
    'fig02_tree': ('Fig. 2: Tree vs chain verification (SGLang and vLLM)', 'engine_tree'),
    'tab_tree': ("Fig. 2: Tree vs chain: every configuration on SGLang and on vLLM's tree path", 'engine_tree_table'),
    'fig03_reasoning': ('Fig. 3: Speculative decoding on reasoning workloads', 'engine_reasoning'),
    'tab_lossless': ('Sec. 2 (greedy SD is lossless); Figs. 1, 3: Lossless check and acceptance of the engine runs', 'engine_lossless'),
    'tab_runtime': ('--: Run time of the engine runs', 'engine_runtime'),
    'tab_engine_jobs': ('Sec. 3 (setup): Engines of the engine jobs, and the jobs that failed', 'engine_jobs'),
    'tab_engine_exercise': ('Sec. 3 (setup): Every engine configuration of this run: ran, lossless, counters consistent', 'engine_exercise'),
    'fig09_engine_bleu': ('Fig. 9: When n-gram beats EAGLE on the engine: prompt-output overlap', 'engine_bleu'),
    'fig04_breakdown': ('Fig. 4: Time breakdown of an engine step', 'engine_breakdown'),
    'tab_memory': ('Sec. 5 (memory): Memory overhead of the drafters', 'engine_memory'),
    'fig_costfit': ('Sec. 6 (simulator cost model): Cost model of each model, fitted to its own engine steps', 'engine_costfit'),
    'tab_costfit': ('Sec. 6 (simulator cost model): Cost-model coefficients of each model', 'engine_costfit_table'),
    'tab_closed_loop_summary': ('Sec. 6 (beyond the paper): Closed loop of every model: its fixed-k speedups simulated against measured', 'engine_closed_loop_summary'),
    'tab_closed_loop': ('Sec. 6 (beyond the paper): Closed loop: simulated against measured speedup', 'engine_closed_loop_table'),
    'fig_closed_loop': ('Sec. 6 (beyond the paper): Closed loop: simulated against measured speedup', 'engine_closed_loop_figure'),
    'tab_falsification': ('Sec. 6 (beyond the paper): Closed loop against wrong inputs: does it fail?', 'engine_falsification_table'),
    'fig10_sim_engine': ("Fig. 10: Simulated speedup on this run's traces: fixed k versus an oracle", 'engine_sim_fig10'),
    'fig12_sim_engine': ("Fig. 12: Oracle Combine on this run's traces", 'engine_sim_fig12'),
    'tab_sim_engine': ("Figs. 10, 12; beyond the paper: Upper bounds and beyond-paper policies on this run's traces", 'engine_sim_table'),
    'tab_hybrid': ('Sec. 7 (beyond the paper): Choosing the proposer online inside vLLM: the hybrid, measured and simulated', 'engine_hybrid_table'),
    'tab_trends': ('Figs. 1, 4, 5; Sec. 4: Trend checks on the real CPU model', 'engine_trends'),
    'tab_digitiser': ("Figs. 1, 3, 10, 12: The paper's figures read independently", 'digitiser_table'),
    'tab_sizing_validation': ('--: Sizing a run from per-request variance, checked on the released traces', 'sizing_validation'),
}


def add_cli(sub, argv: Sequence[str] = ()) -> None:
    """Register ``figure``: each figure a sub-command; only the one named in ``argv`` (the words after
    ``figure``) gets its module's arguments, so no other figure module is imported."""
    p = sub.add_parser("figure", help="build one figure or table (see specrepro.figures)")
    fsub = p.add_subparsers(dest="figure", required=True, metavar="NAME")
    chosen = next((w for w in argv if not w.startswith("-")), None)
    for name, (help_, mod_name) in FIGURES.items():
        fp = fsub.add_parser(name, help=help_)
        if name != chosen:
            continue
        mod = importlib.import_module(f"{__package__}.{mod_name}")
        fp.add_argument("--run-config", required=True, help="results/run_config.json")
        fp.add_argument("--subject", required=True, help="trace set or experiment the figure is about")
        fp.add_argument("-o", "--output", required=True)
        mod.add_arguments(fp)
        fp.set_defaults(func=_runner(mod))


def _runner(mod):
    def run(a):
        from ..core.io import read_json
        from . import trace_context

        ctx = trace_context(read_json(a.run_config), a.subject)
        mod.build(a, ctx)

    return run
