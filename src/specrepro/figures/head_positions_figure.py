"""Figure: EAGLE acceptance before and past the EAGLE-3 head's ``max_position_embeddings`` (released traces).

The released traces' EAGLE-3 head (``released_traces.eagle_head``) declares M = 2048 positions; the paper's engine
(vLLM 0.10.1.1) sized the head's rotary table from that and read past it out of bounds, while its outputs ran to
8192 tokens. Per dataset, among the requests whose context crosses M (the only ones with positions on both sides),
the mean EAGLE acceptance length per context bin (prompt + output position, bins of :data:`BIN` tokens), with M
marked and the means before and past M (:func:`specrepro.figures.head_positions.dataset_rows`, the table's numbers).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import FigureSpec, TraceContext
from . import style
from ._data import load_concat
from .head_positions import SPEC as TABLE
from .head_positions import add_arguments, dataset_rows, positions_past  # noqa: F401 (add_arguments: the CLI's)
from ..core.io import read_json, write_csv

#: context tokens per bin
BIN = 256

SPEC = FigureSpec(
    name="fig_head_positions",
    kind="figure",
    title="EAGLE acceptance past the EAGLE-3 head's positions",
    paper_ref="Sec. 3 (setup), Fig. 5",
    caption=(
        "Mean EAGLE acceptance length ({subject_label}) by context position (prompt plus the output before it, bins "
        "of 256 tokens), within the requests whose context crosses the EAGLE-3 head's max_position_embeddings M "
        "(dashed line); the legend gives the mean before and past M over those requests' positions (as in "
        "tab_head_positions). The paper's engine did not define the head past M (its rotary table has M rows); this "
        "artifact serves the head with its positions raised to the target's context."
    ),
    paper_statement=TABLE.paper_statement,
    data="released traces",
)


def binned(requests: pd.DataFrame, positions: pd.DataFrame, limit: int, proposer: str = "eagle",
           width: int = BIN) -> pd.DataFrame:
    """Per dataset and context bin (``lo`` = first context token of the bin): mean acceptance length of
    ``proposer`` and the number of positions, within the requests that cross ``limit``."""
    req = positions_past(requests, limit)
    pos = positions[positions["proposer"] == proposer].merge(
        req[["dataset", "request_id", "prompt_len", "reaches"]], on=["dataset", "request_id"])
    pos = pos[pos["reaches"]]
    ctx = pos["prompt_len"].astype(int) + pos["position"].astype(int)
    pos = pos.assign(lo=(ctx // width) * width)
    return (pos.groupby(["dataset", "lo"], sort=True)["acc_len"].agg(acc="mean", n="size").reset_index())


def build(args, ctx: TraceContext) -> None:
    style.apply()
    cfg = read_json(args.run_config)
    head = (cfg.get("released_traces") or {}).get("eagle_head") or {}
    limit = int(head.get("max_position_embeddings") or 0)
    requests, positions = load_concat(args.requests), load_concat(args.positions)
    datasets = list(ctx.datasets)
    fig, axes = style.dataset_row(len(datasets), 1.9)
    if not limit:
        for ax in axes:
            ax.text(0.5, 0.5, "no EAGLE head limit configured", ha="center", va="center", transform=ax.transAxes)
        style.save_pdf(fig, args.output)
        write_csv(args.csv, pd.DataFrame(columns=["dataset", "limit"]))
        return
    b = binned(requests, positions, limit)
    rows = dataset_rows(requests, positions, limit)
    rows.insert(1, "label", [ctx.dataset_label(d) for d in rows["dataset"]])
    write_csv(args.csv, rows, float_format="%.6g")
    rows = rows.set_index("dataset")
    color = style.method_color("eagle")
    for j, ds in enumerate(datasets):
        ax = axes[j]
        d = b[b["dataset"] == ds]
        style.panel_title(ax, ctx.dataset_label(ds))
        ax.axvline(limit, color="#555555", linestyle="--", linewidth=0.8)
        if d.empty:
            ax.text(0.5, 0.5, f"no request\ncrosses {limit}", ha="center", va="center", transform=ax.transAxes,
                    fontsize=7)
            ax.set_xlim(0, 2 * limit)
        else:
            x = d["lo"].to_numpy() + BIN / 2
            ax.plot(x, d["acc"].to_numpy(), marker="o", markersize=2.5, linewidth=0.9, color=color)
            r = rows.loc[ds]
            for lo, hi, v, what in ((0, limit, r["eagle_acc_before"], "before"),
                                    (limit, float(np.max(x) + BIN / 2), r["eagle_acc_past"], "past")):
                if np.isfinite(v):
                    ax.hlines(v, lo, hi, colors=color, linestyles=":", linewidth=0.8)
            ax.text(0.03, 0.04, f"{r['eagle_acc_before']:.2f} before\n{r['eagle_acc_past']:.2f} past {limit}",
                    ha="left", va="bottom", transform=ax.transAxes, fontsize=6.5,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1.0})
        ax.set_ylim(bottom=0)
        ax.set_xlabel("Context position")
        ax.grid(axis="y", linewidth=0.3, color="#cccccc")
        ax.set_axisbelow(True)
        if j == 0:
            ax.set_ylabel("Mean EAGLE acceptance length")
    style.save_pdf(fig, args.output)


def finding(csv) -> str:
    """EAGLE's acceptance before and past M within the requests crossing it, per dataset, in one sentence (the
    figure's CSV)."""
    rows = pd.read_csv(csv)
    if rows.empty:
        return ""
    limit = int(rows["limit"].iloc[0])
    crossing = rows[rows["eagle_acc_past"].notna() & rows["eagle_acc_before"].notna()]
    none = [str(d) for d in rows.loc[rows["requests_reaching"] == 0, "label"]]
    if crossing.empty:
        return f"No released request's context crosses the EAGLE-3 head's {limit} positions."
    parts = [f"{r.label} {r.eagle_acc_before:.2f} to {r.eagle_acc_past:.2f} ({100 * r.share_past:.1f} % of its "
             "output positions lie past it)" for r in crossing.itertuples()]
    text = (f"Within the released requests whose context crosses position {limit}, EAGLE's mean acceptance length "
            f"falls past it: " + "; ".join(parts))
    if none:
        text += f"; no {', '.join(none)} request crosses it"
    return text + (". A run capped at that length drops these positions; this artifact serves the EAGLE-3 head past "
                   "them with raised positions, where the paper's engine was not defined.")
