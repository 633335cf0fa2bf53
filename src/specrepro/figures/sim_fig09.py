"""Fig. 9 from traces: n-gram's simulated speedup relative to EAGLE, by prompt-output BLEU-4 and batch size."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm

from . import FigureSpec, TraceContext
from . import style
from ..core.bleu import bucket_of
from ..core.io import SpecReproError, write_csv
from ..core.latex import whole
from ..core.uncertainty import MIN_INTERVAL_REQUESTS, bootstrap_ratio_ci

SPEC = FigureSpec(
    name="fig09_bleu_ngram",
    kind="figure",
    title="When n-gram beats EAGLE: prompt-output overlap",
    paper_ref="Fig. 9",
    caption=(
        "Simulated throughput of n-gram over EAGLE (k = 3), in percent, for requests grouped by the token-level "
        "BLEU-4 of their output against their prompt ({subject_label}; all requests of each trace, each "
        "simulated as a batch of B copies in paper mode). A cell is the ratio of mean throughputs over its "
        "requests; n under each bucket counts them; below the value, low…high, its 95 % bootstrap interval over those "
        "requests (paired: both proposers on the same requests; none over fewer than 8 requests). One row per dataset; left column: n-gram k = 3, right: k = 5."
    ),
    paper_statement=(
        "The more the output copies the prompt, the better n-gram does: on InstructCoder (Llama-3.1-8B, engine "
        "runs) n-gram k = 3 goes from -15% against EAGLE for BLEU-4 below 0.2 to +53% above 0.8 at batch size "
        "1 (k = 5: -10% to +100%; Fig. 9(a, e)), and above about 0.6 it wins at every batch size. Against EAGLE-3, "
        "whose data the released traces hold, Fig. 9(b, f) gives -16% to +50% (k = 5: -11% to +95%)."
    ),
    data="simulator on released traces",
)


def add_arguments(p) -> None:
    p.add_argument("--batches", nargs="+", required=True, help="per-batch CSVs of the fig9 simulations")
    p.add_argument("--bleu", nargs="+", required=True, help="prompt-bleu tables (one per dataset)")
    p.add_argument("--bleu-edges", nargs="+", type=float, default=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    p.add_argument("--ngram-policies", nargs="+", default=["fixed-3", "fixed-5"])
    p.add_argument("--eagle-policy", default="fixed-3")
    p.add_argument("--csv", required=True, help="the cell values as CSV")


def relative_improvement(batches: pd.DataFrame, bleu: pd.DataFrame, edges, ngram_policy: str,
                         eagle_policy: str) -> pd.DataFrame:
    """One row per dataset x batch size x BLEU bucket: requests and n-gram/EAGLE throughput ratio - 1, with its
    95 % interval (``ci_low``, ``ci_high``; paired over the bucket's requests)."""
    edges = np.asarray(edges, dtype=float)
    b = bleu.assign(bucket=bucket_of(bleu["bleu"], edges))
    key = ["dataset", "batch_size", "request_id"]
    ng = batches[(batches["proposer"] == "ngram") & (batches["policy"] == ngram_policy)][key + ["sd_throughput"]]
    ea = batches[(batches["proposer"] == "eagle") & (batches["policy"] == eagle_policy)][key + ["sd_throughput"]]
    both = ng.merge(ea, on=key, suffixes=("_ngram", "_eagle")).merge(b, on=["dataset", "request_id"])
    rows = []
    for (ds, bs), g in both.groupby(["dataset", "batch_size"], sort=False):
        for k in range(len(edges) - 1):
            cell = g[g["bucket"] == k]
            iv = bootstrap_ratio_ci(cell["sd_throughput_ngram"].to_numpy(), cell["sd_throughput_eagle"].to_numpy())
            rows.append({"dataset": ds, "batch_size": int(bs), "ngram_policy": ngram_policy,
                         "eagle_policy": eagle_policy, "bleu_low": edges[k], "bleu_high": edges[k + 1],
                         "requests": len(cell), "relative_improvement": iv.estimate - 1 if len(cell) else np.nan,
                         "ci_low": iv.low - 1 if len(cell) > 1 else np.nan,
                         "ci_high": iv.high - 1 if len(cell) > 1 else np.nan})
    return pd.DataFrame(rows)


def report_note(csv) -> str:
    """The cells above BLEU-4 0.6 where n-gram is slower than EAGLE with the whole interval below 0 (the paper says it
    wins there at every batch size), from the figure's CSV; empty if none."""
    t = pd.read_csv(csv)
    bad = t[(t["bleu_low"] >= 0.6 - 1e-9) & (t["ci_high"] < 0) & (t["requests"] >= MIN_INTERVAL_REQUESTS)]
    if bad.empty:
        return ""
    cells = "; ".join(f"{r.dataset}, n-gram k = {r.ngram_policy.split('-')[-1]}, B = {r.batch_size}, BLEU "
                      f"{r.bleu_low:.1f}-{r.bleu_high:.1f}: {100 * r.relative_improvement:+.1f} % "
                      f"[{100 * r.ci_low:+.1f}, {100 * r.ci_high:+.1f}] over {r.requests} requests"
                      for r in bad.itertuples(index=False))
    return (f"Against the paper's 'above about 0.6 n-gram wins at every batch size': in {len(bad)} cell"
            f"{'s' if len(bad) > 1 else ''} above 0.6 n-gram is slower than EAGLE, the whole interval below 0 "
            f"({cells}; the figure's CSV).")


def build(args, ctx: TraceContext) -> None:
    style.apply()
    batches = pd.concat([pd.read_csv(p) for p in args.batches], ignore_index=True)
    bleu = pd.concat([pd.read_csv(p, dtype={"request_id": str}) for p in args.bleu], ignore_index=True)
    bleu = bleu.rename(columns={"bleu4": "bleu"})[["dataset", "request_id", "bleu"]]
    batches["request_id"] = batches["request_id"].astype(str)
    cells = pd.concat([relative_improvement(batches, bleu, args.bleu_edges, p, args.eagle_policy)
                       for p in args.ngram_policies], ignore_index=True)
    if cells.empty:
        raise SpecReproError("no request appears in both the n-gram and the EAGLE simulations")
    write_csv(args.csv, cells, float_format="%.10g")
    datasets = [d for d in ctx.datasets if d in set(cells["dataset"])]
    vmax = float(np.nanmax(np.abs(cells["relative_improvement"]))) * 100 or 1.0
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-vmax, vmax=vmax)
    # one row per dataset, one column per n-gram k: cells twice as wide as four panels a row, so a cell's value and
    # its interval print at a readable size
    fig, axes = plt.subplots(len(datasets), len(args.ngram_policies), squeeze=False, constrained_layout=True,
                             figsize=(style.FULL_WIDTH, 1.75 * len(datasets) + 0.3))
    image = None
    for j, pol in enumerate(args.ngram_policies):
        for i, ds in enumerate(datasets):
            ax = axes[i][j]
            c = cells[(cells["dataset"] == ds) & (cells["ngram_policy"] == pol)]
            bss = sorted(c["batch_size"].unique(), reverse=True)
            nb = len(args.bleu_edges) - 1
            m = np.full((len(bss), nb), np.nan)
            lo, hi = m.copy(), m.copy()
            counts = np.zeros(nb, dtype=int)
            for r in c.itertuples(index=False):
                k = int(np.argmin(np.abs(np.asarray(args.bleu_edges[:-1]) - r.bleu_low)))
                y = bss.index(r.batch_size)
                m[y, k], lo[y, k], hi[y, k] = (100 * v for v in (r.relative_improvement, r.ci_low, r.ci_high))
                counts[k] = r.requests
            image = ax.imshow(m, cmap="RdBu", norm=norm, aspect="auto")
            for (y, x), v in np.ndenumerate(m):
                if np.isfinite(v):
                    color = "white" if abs(v) > 0.6 * vmax else "black"
                    # no 95 % interval over fewer than MIN_INTERVAL_REQUESTS requests (the caption says so)
                    has_ci = np.isfinite(lo[y, x]) and np.isfinite(hi[y, x]) and counts[x] >= MIN_INTERVAL_REQUESTS
                    ax.text(x, y - (0.12 if has_ci else 0), whole(v, sign=True), ha="center", va="center", fontsize=6.5,
                            color=color)
                    if has_ci:
                        # "low…high" without signs of positive bounds: narrower than a cell (brackets and signs were not)
                        ax.text(x, y + 0.22, f"{whole(lo[y, x])}…{whole(hi[y, x])}", ha="center", va="center",
                                fontsize=5.5, color=color)
            ax.set_yticks(range(len(bss)), [str(b) for b in bss])
            ax.set_xticks(range(nb), [f"{args.bleu_edges[k]:.1f}-{args.bleu_edges[k + 1]:.1f}\nn={counts[k]}"
                                      for k in range(nb)], fontsize=6, rotation=0, ha="center",
                          rotation_mode="anchor")
            style.panel_title(ax, f"{ctx.dataset_label(ds)}, k={pol.split('-')[-1]}")
            if j == 0:
                ax.set_ylabel("Batch size")
            if i == len(datasets) - 1:
                ax.set_xlabel("BLEU-4 (output vs prompt)")
    cb = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, aspect=30, pad=0.01)
    cb.set_label("n-gram vs EAGLE (%)")
    style.save_pdf(fig, args.output)
