"""Reruns from the same inputs give byte-identical figures and tables."""

import yaml

from _infra import REPO, snakemake

RULES = ["fig05_acceptance_heatmap", "fig11_acceptance_diff", "fig07_request_span", "tab_acceptance_stats"]


def test_figures_and_table_are_byte_identical_on_rerun(tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())
    cfg["released_traces"]["files"] = {"gsm8k": cfg["released_traces"]["files"]["gsm8k"]}  # one dataset: seconds
    cfg["traces_dir"] = str((REPO / cfg["traces_dir"]).resolve())
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    ts = cfg["released_traces"]["name"]
    targets = [f"figures/{r}-{ts}.pdf" for r in RULES[:3]] + [f"figures/tab_acceptance_stats-{ts}.{e}" for e in ("tex", "csv")]
    targets.append(f"results/metrics/acceptance-{ts}.json")
    args = ("--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile",
            str(tmp_path / "c.yaml"), "--cores", "2")

    proc = snakemake(*args, *targets)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = {t: (tmp_path / t).read_bytes() for t in targets}
    proc = snakemake(*args, "--forcerun", *RULES, "--", *targets)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert all(f"rule {r}:" in proc.stdout + proc.stderr for r in RULES), "the figures were not rebuilt"
    for t in targets:
        assert (tmp_path / t).read_bytes() == first[t], f"{t} differs between two runs"
