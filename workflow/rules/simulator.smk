# Speedup simulator on acceptance traces (paper Figs. 9, 10, 12 and beyond), outputs under
# results/simulator/<trace set>/:
#   paper/<dataset>.csv             paper mode: n-gram and EAGLE x policies, Oracle Combine
#   variants/<name>/<dataset>.csv   beyond-the-paper variants (config simulator.variants)
#   fig9/<dataset>.csv              every request simulated on its own (per-batch rows), for Fig. 9
#   ngram/<dataset>.jsonl           acc_ngram recomputed from tokens (+ .stats.json: agreement)
#   recomputed/<dataset>.csv        n-gram paper mode on the recomputed traces
#   fig9/<dataset>.bleu.csv         BLEU-4 of every request's output against its prompt
#   suffix/<dataset>.jsonl          the trace with acc_suffix (suffix decoding recomputed from tokens)
#   today/kgrid/<dataset>.csv       fixed k = each of simulator.today.k_candidates, n-gram, EAGLE, suffix
#   today/schedule.json             k by batch size chosen from the grids (specrepro.analysis.today)
#   today/<dataset>.csv             k by batch size (held-out schedules) of n-gram, EAGLE and suffix
#   today/<dataset>.suffix.csv      suffix with fixed k and the oracle; Oracle Combine of n-gram, EAGLE, suffix
# and the metrics results/metrics/simulator-<trace set>.json (keys sim.<trace set>....) for the claims.

include: "helpers/simulator.smk"


rule simulate_paper:
    """Paper mode: n-gram and EAGLE with every configured policy, and Oracle Combine."""
    input:
        trace=trace_file,
    output:
        "results/simulator/{traceset}/paper/{dataset}.csv",
    params:
        common=sim_args(),
        policies=" ".join(SIM.get("policies", [])),
    log:
        "logs/simulator/{traceset}/paper/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro simulate --trace {input.trace:q} {params.common} --proposer ngram eagle combined"
        " --policy {params.policies} -o {output:q} 2> {log}"


rule simulate_variant:
    """One beyond-the-paper variant (combine cost, pairing, batching, adaptive policy)."""
    input:
        trace=trace_file,
    output:
        "results/simulator/{traceset}/variants/{variant}/{dataset}.csv",
    wildcard_constraints:
        variant="|".join(re.escape(v) for v in SIM_VARIANTS) or "(?!)",
    params:
        common=sim_args(),
        proposers=lambda wc: " ".join(SIM_VARIANTS[wc.variant]["proposers"]),
        policies=lambda wc: " ".join(SIM_VARIANTS[wc.variant]["policies"]),
        modes=lambda wc: " ".join(
            f"--{k.replace('_', '-')} {SIM_VARIANTS[wc.variant].get(k, d)}"
            for k, d in (("combine_cost", "ngram"), ("batching", "replicate"), ("pairing", "index"))
        ),
    log:
        "logs/simulator/{traceset}/variants/{variant}/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro simulate --trace {input.trace:q} {params.common} --proposer {params.proposers}"
        " --policy {params.policies} {params.modes} -o {output:q} 2> {log}"


rule simulate_fig9:
    """Every request as its own batch (all requests of the trace), n-gram and EAGLE with fixed k."""
    input:
        trace=trace_file,
    output:
        summary="results/simulator/{traceset}/fig9/{dataset}.csv",
        batches="results/simulator/{traceset}/fig9/{dataset}.batches.csv",
    params:
        # every request of the trace: the draw takes min(num_requests, requests available)
        common=sim_args(SIM["fig9"]["batch_sizes"], num_requests=10**9),
        policies=" ".join(dict.fromkeys(SIM["fig9"]["ngram_policies"] + [SIM["fig9"]["eagle_policy"]])),
    log:
        "logs/simulator/{traceset}/fig9/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro simulate --trace {input.trace:q} {params.common} --proposer ngram eagle"
        " --policy {params.policies} --per-batch {output.batches:q} -o {output.summary:q} 2> {log}"


rule ngram_trace:
    """acc_ngram recomputed from the tokens with vLLM's rule, and its agreement with the released trace."""
    input:
        trace=trace_file,
    output:
        trace="results/simulator/{traceset}/ngram/{dataset}.jsonl",
        stats="results/simulator/{traceset}/ngram/{dataset}.stats.json",
    params:
        lookup=(
            f"--min-n {config['engine']['ngram']['prompt_lookup_min']}"
            f" --max-n {config['engine']['ngram']['prompt_lookup_max']} --k 20"
        ),
    log:
        "logs/simulator/{traceset}/ngram/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro ngram-trace {input.trace:q} {params.lookup} --dataset {wildcards.dataset}"
        " --stats {output.stats:q} -o {output.trace:q} 2> {log}"


rule simulate_recomputed:
    """n-gram paper mode on the recomputed traces (does recomputation change the speedups?)."""
    input:
        trace="results/simulator/{traceset}/ngram/{dataset}.jsonl",
    output:
        "results/simulator/{traceset}/recomputed/{dataset}.csv",
    params:
        common=sim_args(),
    log:
        "logs/simulator/{traceset}/recomputed/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro simulate --trace {input.trace:q} {params.common} --proposer ngram --policy oracle fixed-3"
        " -o {output:q} 2> {log}"


rule prompt_bleu:
    """Token-level BLEU-4 of every request's output against its prompt (Fig. 9's x-axis)."""
    input:
        trace=trace_file,
    output:
        "results/simulator/{traceset}/fig9/{dataset}.bleu.csv",
    log:
        "logs/simulator/{traceset}/fig9/{dataset}.bleu.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro prompt-bleu {input.trace:q} --dataset {wildcards.dataset} -o {output:q} 2> {log}"


rule simulator_metrics:
    """Speedups keyed sim.<trace set>.<dataset>.<proposer>.<policy>[-<variant mode>].b<B>, n-gram
    recomputation agreement and BLEU-4 bucket counts (traces.<trace set>....) for the claims."""
    input:
        paper=sim_inputs("paper"),
        variants=variant_inputs,
        today=today_inputs,
        recomputed=sim_inputs("recomputed"),
        fig9=sim_inputs("fig9"),
        stats=lambda wc: [f"results/simulator/{wc.traceset}/ngram/{d}.stats.json" for d in TRACE_SETS[wc.traceset]["datasets"]],
        bleu=lambda wc: [f"results/simulator/{wc.traceset}/fig9/{d}.bleu.csv" for d in TRACE_SETS[wc.traceset]["datasets"]],
    output:
        "results/metrics/simulator-{traceset}.json",
    params:
        edges=" ".join(str(e) for e in SIM.get("fig9", {}).get("bleu_edges", [])),
        draw=f"--num-requests {SIM.get('num_requests')} --seed {SIM.get('seed')}",
    log:
        "logs/simulator/{traceset}/metrics.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro sim-metrics --traceset {wildcards.traceset} --inputs {input.paper} {input.variants} {input.today}"
        " --recomputed {input.recomputed} --all-requests {input.fig9} --ngram-stats {input.stats}"
        " --bleu {input.bleu} --bleu-edges {params.edges} {params.draw} -o {output} 2> {log}"


# --- figures and tables ------------------------------------------------------------------------


rule tab_head_positions:
    """Positions past the EAGLE-3 head's max_position_embeddings per dataset, and the engine jobs' handling."""
    input:
        config=RUN_CONFIG,
        requests=trace_tables("requests"),
        positions=trace_tables("positions"),
    output:
        tex="figures/tab_head_positions-{traceset}.tex",
        csv="figures/tab_head_positions-{traceset}.csv",
    log:
        "logs/figures/tab_head_positions-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_head_positions --run-config {input.config} --subject {wildcards.traceset}"
        " --requests {input.requests} --positions {input.positions} --csv {output.csv} -o {output.tex} 2> {log}"


rule fig_head_positions:
    """EAGLE acceptance by context position, before and past the EAGLE-3 head's max_position_embeddings."""
    input:
        config=RUN_CONFIG,
        requests=trace_tables("requests"),
        positions=trace_tables("positions"),
    output:
        pdf="figures/fig_head_positions-{traceset}.pdf",
        csv="figures/fig_head_positions-{traceset}.csv",
    log:
        "logs/figures/fig_head_positions-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig_head_positions --run-config {input.config} --subject {wildcards.traceset}"
        " --requests {input.requests} --positions {input.positions} --csv {output.csv} -o {output.pdf} 2> {log}"


rule tab_ngram_agreement:
    input:
        config=RUN_CONFIG,
        stats=lambda wc: [f"results/simulator/{wc.traceset}/ngram/{d}.stats.json" for d in TRACE_SETS[wc.traceset]["datasets"]],
        released=sim_inputs("paper"),
        recomputed=sim_inputs("recomputed"),
    output:
        tex="figures/tab_ngram_agreement-{traceset}.tex",
        csv="figures/tab_ngram_agreement-{traceset}.csv",
    log:
        "logs/figures/tab_ngram_agreement-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_ngram_agreement --run-config {input.config} --subject {wildcards.traceset}"
        " --stats {input.stats} --released {input.released} --recomputed {input.recomputed}"
        " --csv {output.csv} -o {output.tex} 2> {log}"


rule fig10_sim_speedup:
    input:
        config=RUN_CONFIG,
        summaries=sim_inputs("paper"),
        claims=str(REPO / "paper" / "claims.yaml"),
    output:
        "figures/fig10_sim_speedup-{traceset}.pdf",
    log:
        "logs/figures/fig10_sim_speedup-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig10_sim_speedup --run-config {input.config} --subject {wildcards.traceset}"
        " --summaries {input.summaries} --claims {input.claims:q} -o {output} 2> {log}"


rule fig12_oracle_combine:
    input:
        config=RUN_CONFIG,
        summaries=sim_inputs("paper"),
        claims=str(REPO / "paper" / "claims.yaml"),
    output:
        "figures/fig12_oracle_combine-{traceset}.pdf",
    log:
        "logs/figures/fig12_oracle_combine-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig12_oracle_combine --run-config {input.config} --subject {wildcards.traceset}"
        " --summaries {input.summaries} --claims {input.claims:q} -o {output} 2> {log}"


rule tab_oracle_gap:
    input:
        config=RUN_CONFIG,
        summaries=sim_inputs("paper"),
    output:
        tex="figures/tab_oracle_gap-{traceset}.tex",
        csv="figures/tab_oracle_gap-{traceset}.csv",
    log:
        "logs/figures/tab_oracle_gap-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_oracle_gap --run-config {input.config} --subject {wildcards.traceset}"
        " --summaries {input.summaries} --csv {output.csv} -o {output.tex} 2> {log}"


rule fig09_bleu_ngram:
    input:
        config=RUN_CONFIG,
        batches=lambda wc: [f"results/simulator/{wc.traceset}/fig9/{d}.batches.csv" for d in TRACE_SETS[wc.traceset]["datasets"]],
        bleu=lambda wc: [f"results/simulator/{wc.traceset}/fig9/{d}.bleu.csv" for d in TRACE_SETS[wc.traceset]["datasets"]],
    output:
        pdf="figures/fig09_bleu_ngram-{traceset}.pdf",
        csv="figures/fig09_bleu_ngram-{traceset}.csv",
    params:
        edges=" ".join(str(e) for e in SIM.get("fig9", {}).get("bleu_edges", [])),
        ngram=" ".join(SIM.get("fig9", {}).get("ngram_policies", [])),
        eagle=SIM.get("fig9", {}).get("eagle_policy", "fixed-3"),
    log:
        "logs/figures/fig09_bleu_ngram-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig09_bleu_ngram --run-config {input.config} --subject {wildcards.traceset}"
        " --batches {input.batches} --bleu {input.bleu} --bleu-edges {params.edges}"
        " --ngram-policies {params.ngram} --eagle-policy {params.eagle} --csv {output.csv} -o {output.pdf} 2> {log}"


rule tab_sim_beyond:
    input:
        config=RUN_CONFIG,
        summaries=sim_inputs("paper"),
        variants=variant_inputs,
    output:
        tex="figures/tab_sim_beyond-{traceset}.tex",
        csv="figures/tab_sim_beyond-{traceset}.csv",
    log:
        "logs/figures/tab_sim_beyond-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_sim_beyond --run-config {input.config} --subject {wildcards.traceset}"
        " --summaries {input.summaries} {input.variants} --csv {output.csv} -o {output.tex} 2> {log}"


rule fig_sim_beyond:
    input:
        config=RUN_CONFIG,
        summaries=sim_inputs("paper"),
        variants=variant_inputs,
    output:
        "figures/fig_sim_beyond-{traceset}.pdf",
    log:
        "logs/figures/fig_sim_beyond-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig_sim_beyond --run-config {input.config} --subject {wildcards.traceset}"
        " --summaries {input.summaries} {input.variants} -o {output} 2> {log}"


# --- the paper's question on today's engines (specrepro.analysis.today, specrepro.core.suffix) -----------------


rule suffix_trace:
    """acc_suffix recomputed from the tokens (suffix decoding's longest-match, frequency-voted draft)."""
    input:
        trace=trace_file,
    output:
        trace="results/simulator/{traceset}/suffix/{dataset}.jsonl",
        stats="results/simulator/{traceset}/suffix/{dataset}.stats.json",
    params:
        depth=TODAY.get("suffix_max_depth", 24),
    log:
        "logs/simulator/{traceset}/suffix/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro suffix-trace {input.trace:q} --max-depth {params.depth} --k 20 --dataset {wildcards.dataset}"
        " --stats {output.stats:q} -o {output.trace:q} 2> {log}"


rule simulate_kgrid:
    """Every candidate fixed k of n-gram, EAGLE and suffix (paper mode): what the schedules are chosen from."""
    input:
        trace="results/simulator/{traceset}/suffix/{dataset}.jsonl",
    output:
        "results/simulator/{traceset}/today/kgrid/{dataset}.csv",
    params:
        common=sim_args(),
        policies=" ".join(f"fixed-{k}" for k in TODAY.get("k_candidates", list(range(1, 21)))),
    log:
        "logs/simulator/{traceset}/today/kgrid/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro simulate --trace {input.trace:q} {params.common} --proposer ngram eagle suffix"
        " --policy {params.policies} -o {output:q} 2> {log}"


rule k_schedule:
    """k by batch size per proposer (pooled over the datasets, and held out per dataset)."""
    input:
        lambda wc: [f"results/simulator/{wc.traceset}/today/kgrid/{d}.csv" for d in TRACE_SETS[wc.traceset]["datasets"]],
    output:
        "results/simulator/{traceset}/today/schedule.json",
    params:
        cost=SIM_COST,
    log:
        "logs/simulator/{traceset}/today/schedule.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro k-schedule --grids {input:q} --proposers ngram eagle suffix --cost-model {params.cost:q}"
        " -o {output:q} 2> {log}"


rule simulate_today:
    """k by batch size (each dataset with the schedule chosen without it), suffix decoding, Oracle Combine of three."""
    input:
        trace="results/simulator/{traceset}/suffix/{dataset}.jsonl",
        schedule="results/simulator/{traceset}/today/schedule.json",
    output:
        schedule="results/simulator/{traceset}/today/{dataset}.csv",
        suffix="results/simulator/{traceset}/today/{dataset}.suffix.csv",
    params:
        common=sim_args(),
    log:
        "logs/simulator/{traceset}/today/{dataset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "(specrepro simulate --trace {input.trace:q} {params.common} --proposer ngram eagle suffix"
        " --policy batch-schedule --schedule {input.schedule:q} --schedule-mode held-out -o {output.schedule:q}"
        " && specrepro simulate --trace {input.trace:q} {params.common} --proposer suffix combined3"
        " --policy fixed-1 fixed-3 fixed-5 oracle -o {output.suffix:q}) 2> {log}"


rule fig_today:
    input:
        config=RUN_CONFIG,
        summaries=sim_inputs("paper"),
        variants=adaptive_variant_inputs,
        today=today_inputs,
        kgrid=today_kgrid_inputs,
    output:
        "figures/fig_today-{traceset}.pdf",
    log:
        "logs/figures/fig_today-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure fig_today --run-config {input.config} --subject {wildcards.traceset}"
        " --summaries {input.summaries} {input.variants} {input.today} {input.kgrid} -o {output} 2> {log}"


rule tab_today:
    input:
        config=RUN_CONFIG,
        summaries=sim_inputs("paper"),
        variants=adaptive_variant_inputs,
        today=today_inputs,
        kgrid=today_kgrid_inputs,
        honest=honest_variant_inputs,
        schedule="results/simulator/{traceset}/today/schedule.json",
        engine=today_engine_points,
    output:
        tex="figures/tab_today-{traceset}.tex",
        csv="figures/tab_today-{traceset}.csv",
        mixed="results/simulator/{traceset}/today/mixed.csv",
    log:
        "logs/figures/tab_today-{traceset}.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "specrepro figure tab_today --run-config {input.config} --subject {wildcards.traceset}"
        " --summaries {input.summaries} {input.variants} {input.honest} {input.today} {input.kgrid}"
        " --schedule {input.schedule} --engine-points {input.engine:q} --csv {output.csv} --mixed-csv {output.mixed}"
        " -o {output.tex} 2> {log}"
