"""Why SmolLM2's trained EAGLE head accepts more on its held-out prompts than in the benchmark (issue 15, item 15).

    python tools/smollm_acceptance_gap.py --run-dir <a finished CPU run> [--more 4]   # under the heavy lock

Walks, with the training's host-side rule (specrepro.engine.models.oracle, k = 3, tokens per step as vLLM counts them):

1. the held-out requests of the training data, with the stored (bf16) and with float32 target hidden states, whole
   and cut to the benchmark's 32 output tokens (positions, dtype);
2. the benchmark's own requests (vLLM's no-SD outputs at B = 1), beside vLLM's counters of the EAGLE job on the same
   requests (the engine: hidden-state layer, positions, numerics);
3. ``--more`` further benchmark prompts per workload, greedy outputs from the target in torch (float32).

Prints tokens per step with 95 % bootstrap intervals over requests, per workload.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--exp", default="smollm2")
    ap.add_argument("--more", type=int, default=4, help="further benchmark prompts per workload (0: none)")
    a = ap.parse_args()
    import torch

    from specrepro.engine.models import drafters as D
    from specrepro.engine.models.oracle import _EagleHead, _Model, acc_from_drafts, llama_forward
    from specrepro.engine.run.traces import simulate_steps
    from specrepro.core.io import read_parquet
    from specrepro.core.uncertainty import bootstrap_pooled_ratio_ci

    torch.set_num_threads(1)
    root = a.run_dir / "resources" / "models" / a.model
    head = _EagleHead(_Model(root / "drafters" / "eagle" / "model"), _Model(root / "model"), eagle3=False)
    k, rows = D.EVAL_K, []

    def walk(src, workload, prompt, out, hidden=None, cap=None):
        out = np.asarray(out, np.int64)
        acc = acc_from_drafts(head.drafts(np.asarray(prompt, np.int64), out, k, hidden=hidden), out)
        if cap is not None:
            acc = np.minimum(acc[:cap], np.arange(min(cap, out.size), 0, -1))
        w = simulate_steps(acc, k + 1)
        rows.append({"src": src, "workload": workload, "steps": len(w), "tokens": int(sum(w))})
        return len(w), int(sum(w))

    with torch.inference_mode():
        df = read_parquet(root / "train" / "outputs.parquet")
        held = [i for i, s in enumerate(df["split"]) if s == "heldout"]
        bf16 = D.split_states(np.load(root / "train" / "states.npy"), D.sequences(df))
        sub = df.iloc[held].reset_index(drop=True)
        f32 = D.split_states(D.target_states(str(root / "model"), D.sequences(sub), dtype="float32")[0], D.sequences(sub))
        for j, i in enumerate(held):
            p, o, wl = df["prompt_token_ids"].iloc[i], df["output_token_ids"].iloc[i], df["workload"].iloc[i]
            walk("held-out, bf16 states", wl, p, o, torch.as_tensor(bf16[i][:-1]))
            walk("held-out, float32 states", wl, p, o, torch.as_tensor(f32[j][:-1]))
            walk("held-out, float32, first 32 tokens", wl, p, o, torch.as_tensor(f32[j][:-1]), cap=32)
        bench = a.run_dir / "results" / "engine" / a.exp
        prompts = {f.stem: read_parquet(f) for f in (bench / "prompts").glob("*.parquet")}
        none = read_parquet(bench / "bench" / "none.parquet")
        eagle = read_parquet(bench / "bench" / "eagle-k3.parquet")
        for r in none[(none["status"] == "ok") & (none["batch_size"] == 1)].itertuples(index=False):
            pr = prompts[r.dataset]
            prompt = pr.loc[pr["request_index"] == r.request_index, "prompt_token_ids"].iloc[0]
            steps, tokens = walk("benchmark requests, host-side", r.dataset, prompt, r.output_token_ids)
            e = eagle[(eagle["dataset"] == r.dataset) & (eagle["request_index"] == r.request_index)
                      & (eagle["batch_size"] == 1) & (eagle["status"] == "ok")]
            if len(e):
                d, acc = int(e["num_drafts"].iloc[0]), int(e["num_accepted_tokens"].iloc[0])
                rows.append({"src": "benchmark requests, vLLM counters", "workload": r.dataset, "steps": d,
                             "tokens": d + acc})
                print(f"{r.dataset} {r.request_index}: host-side {steps} steps {tokens} tokens; vLLM {d} drafts, "
                      f"{d + acc} tokens")
        for ds, pr in sorted(prompts.items()):
            done = set(none["request_index"][none["dataset"] == ds])
            for r in pr[~pr["request_index"].isin(done)].head(a.more).itertuples(index=False):
                seq = list(map(int, r.prompt_token_ids))
                n = len(seq)
                for _ in range(32):
                    seq.append(int(llama_forward(head.t, seq)[0][-1].argmax()))
                    if seq[-1] == 2:
                        break
                if len(seq) - n >= 2:
                    walk("more benchmark prompts, host-side", ds, seq[:n], seq[n:])
    t = pd.DataFrame(rows)
    for src, g in t.groupby("src", sort=False):
        iv = bootstrap_pooled_ratio_ci(g["tokens"].to_numpy(), g["steps"].to_numpy())
        per = g.groupby("workload")[["tokens", "steps"]].sum()
        print(f"{src}: {iv.estimate:.3f} [{iv.low:.3f}, {iv.high:.3f}] over {len(g)} requests; "
              + ", ".join(f"{w} {v:.2f}" for w, v in (per["tokens"] / per["steps"]).items()))


if __name__ == "__main__":
    main()
