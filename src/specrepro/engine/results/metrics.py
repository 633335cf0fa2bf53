"""Engine points -> the tables the engine figures draw and the flat metrics the claims table reads.

Input: the bench tables of ``specrepro bench`` (one Parquet per engine configuration, one row per point,
columns :data:`specrepro.engine.run.bench.POINT_COLUMNS`). Failed points (``status != "ok"``) never enter a mean;
they are counted. Speedup is the paper's: mean throughput over requests of a configuration divided by
that of no SD at the same experiment, dataset and batch size (:func:`specrepro.engine.results.metrics.speedup_table`).

Metric keys (``<exp>`` is the experiment's name, ``<config>`` ``none`` or ``<method>-k<k>``)::

    engine.<exp>.<dataset>.<config>.throughput.b<B>          mean output tokens/s over requests (none too)
    engine.<exp>.<dataset>.<config>.speedup.b<B>             SD configurations only
    engine.<exp>.<dataset>.<config>.acceptance_length.b<B>   mean over requests of 1 + accepted/drafts
    engine.<exp>.<dataset>.<config>.acceptance_rate.b<B>     pooled accepted / draft tokens
    engine.<exp>.<dataset>.<config>.acceptance_rate_pos<j>.b<B>   pooled accepted at position j / drafts
    engine.<exp>.<dataset>.<config>.acceptance_rate_pos<j>   the same over all batch sizes
    engine.<exp>.<dataset>.<config>.speedup_drop_pct.b<B0>_b<B>   100 (s(B0) - s(B)) / s(B0), B0 the smallest B
    engine.<exp>.<dataset>.<config>.identical_fraction       share of compared points equal to no SD's output
    engine.points.ok, engine.points.failed                   counts over all inputs

Every key of a per-request statistic also carries its 95 % bootstrap interval over requests
(:func:`specrepro.core.uncertainty.interval_metrics`: ``<key>.ci_low``, ``<key>.ci_high``, ``<key>.n``):
throughput (mean over requests), speedup (ratio of means, paired over the requests both the configuration and
no SD served at that B), acceptance length (mean over requests), acceptance rates (pooled over requests),
the speedup drop (all four means resampled together) and the Fig. 9 BLEU buckets (paired ratio in the bucket).
A key whose value cannot be computed (no successful point, no baseline) is left out, so the claims table
says "not measured". A CPU run's metrics are written the same way; :func:`specrepro.analysis.claims.evaluate`
never decides an ``engine`` claim on a run whose kind is not "gpu".
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ...core.io import SpecReproError, read_parquet
from ...core.uncertainty import (
    Interval, bootstrap_ci, bootstrap_function_ci, bootstrap_pooled_ratio_ci, bootstrap_ratio_ci, interval_metrics,
)
from ...core.bleu import bleu4, bucket_of

#: method display order (figures, tables)
METHOD_ORDER = ("none", "ngram", "eagle", "eagle3", "draft_model", "mtp", "suffix")
REQUIRED = ("exp", "model", "method", "k", "config", "dataset", "request_index", "batch_size", "status", "error",
            "wall_s", "output_tokens", "throughput", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
            "accepted_per_pos", "acceptance_length", "output_token_ids")
GROUP = ["exp", "dataset", "config", "batch_size"]
RUN_KINDS = ("cpu", "gpu")


# --- loading ------------------------------------------------------------------------------


def load_points(paths: Sequence[str | Path]) -> pd.DataFrame:
    """The bench tables concatenated; a missing file or column is a one-line error."""
    if not paths:
        raise SpecReproError("no engine points given (--points)")
    frames = []
    for p in paths:
        df = read_parquet(p)
        missing = [c for c in REQUIRED if c not in df.columns]
        if missing:
            raise SpecReproError(f"{p}: not an engine points table (missing column(s) {', '.join(missing)})")
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    return normalise(df)


def normalise(df: pd.DataFrame) -> pd.DataFrame:
    """Types the summaries rely on (k nullable int, batch size int, numbers float)."""
    df = df.copy()
    df["k"] = df["k"].astype("Int64")
    df["batch_size"] = df["batch_size"].astype(int)
    df["request_index"] = df["request_index"].astype(int)
    for c in ("wall_s", "throughput", "acceptance_length", "output_tokens", "num_drafts", "num_draft_tokens",
              "num_accepted_tokens"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    if "acceptance_rate" in df:
        df["acceptance_rate"] = pd.to_numeric(df["acceptance_rate"], errors="coerce").astype(float)
    return df


def method_rank(method: str) -> int:
    return METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER)


def config_order(points: pd.DataFrame) -> list[tuple[str, str, int | None]]:
    """(config, method, k) of the points, in display order: method order, then k."""
    seen = points[["config", "method", "k"]].drop_duplicates("config")
    rows = [(r.config, r.method, None if pd.isna(r.k) else int(r.k)) for r in seen.itertuples(index=False)]
    return sorted(rows, key=lambda t: (method_rank(t[1]), t[1], -1 if t[2] is None else t[2], t[0]))


#: a draft job's configuration label (specrepro.jobspec.drafts): oracle-<of>-k20, controlled-<m>-k3, hybrid-<policy>-<m>-k5
DRAFT_MODE = re.compile(r"^(oracle-[a-z0-9_]+|controlled|hybrid-(?:adaptive|ngram-first))-")


def config_label_text(method: str, k: int | None, labels: Mapping[str, str], config: str | None = None) -> str:
    """``n-gram (k=3)``; ``no SD``; ``EAGLE-3 (k by batch size, up to 10)`` for a ``-bs`` configuration; a draft
    job's mode before its engine method: ``oracle-combine: EAGLE (k=20)``, ``hybrid-adaptive: EAGLE (k=5)``."""
    name = labels.get(method, method)
    if method == "none" or k is None:
        return name
    mode = DRAFT_MODE.match(str(config or ""))
    if mode:
        return f"{mode.group(1)}: {name} (k={k})"
    if config is not None and str(config).endswith("-bs"):
        return f"{name} (k by batch size, up to {k})"
    return f"{name} (k={k})"


# --- summaries ------------------------------------------------------------------------------


def _ok(points: pd.DataFrame) -> pd.DataFrame:
    return points[points["status"] == "ok"]


def speedup_points(points: pd.DataFrame) -> pd.DataFrame:
    """:func:`speedup_table` plus, per (exp, dataset, config, B), how many points there were and failed.

    A group whose points all failed is kept (throughput and speedup empty), so failures stay visible.
    """

    keys = points[["exp", "model", "dataset", "method", "k", "config", "batch_size"]].drop_duplicates(GROUP)
    counts = points.assign(_failed=(points["status"] != "ok").astype(int)).groupby(GROUP).agg(
        points=("status", "size"), failed=("_failed", "sum")).reset_index()
    ok = _ok(points)
    if len(ok):
        t = speedup_table(ok)[GROUP + ["requests", "throughput", "acceptance_length", "wall_s"]]
    else:
        t = pd.DataFrame(columns=GROUP + ["requests", "throughput", "acceptance_length", "wall_s"])
    out = keys.merge(counts, on=GROUP, how="left").merge(t, on=GROUP, how="left")
    base = out[out["method"] == "none"][["exp", "dataset", "batch_size", "throughput"]].rename(
        columns={"throughput": "baseline_throughput"})
    out = out.merge(base, on=["exp", "dataset", "batch_size"], how="left")
    out["speedup"] = out["throughput"] / out["baseline_throughput"]
    out["requests"] = out["requests"].fillna(0).astype(int)
    out["points"] = out["points"].astype(int)
    out["failed"] = out["failed"].astype(int)
    for c in ("throughput", "acceptance_length", "wall_s", "baseline_throughput", "speedup"):
        out[c] = out[c].astype(float)
    ci = point_intervals(points)
    out = out.merge(ci, on=GROUP, how="left") if len(ci) else out.assign(**{c: math.nan for c in CI_COLUMNS})
    out["_r"] = out["method"].map(method_rank)
    out = out.sort_values(["exp", "dataset", "_r", "method", "k", "batch_size"], na_position="first")
    cols = ["exp", "model", "dataset", "method", "k", "config", "batch_size", "points", "failed", "requests",
            "throughput", "baseline_throughput", "speedup", "acceptance_length", "wall_s"] + CI_COLUMNS
    return out[cols].reset_index(drop=True)


# --- intervals over requests ------------------------------------------------------------------

#: interval columns of :func:`speedup_points` (``speedup_n``: requests the paired speedup interval rests on)
CI_COLUMNS = ["throughput_ci_low", "throughput_ci_high", "speedup_ci_low", "speedup_ci_high", "speedup_n",
              "acceptance_length_ci_low", "acceptance_length_ci_high"]


def _per_request(g: pd.DataFrame, col: str) -> pd.Series:
    """One value per request (the first point of each request index), indexed by request index."""
    return g.drop_duplicates("request_index").set_index("request_index")[col].astype(float)


def paired_speedup_ci(sd: pd.Series, base: pd.Series) -> Interval:
    """Speedup mean(sd) / mean(base) with its interval: paired over requests when both served the same ones,
    else each side resampled on its own (a failed point leaves the sets unequal)."""
    sd, base = sd.dropna(), base.dropna()
    if len(sd) == 0 or len(base) == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    if set(sd.index) == set(base.index):
        return bootstrap_ratio_ci(sd.to_numpy(), base.reindex(sd.index).to_numpy(), paired=True)
    return bootstrap_ratio_ci(sd.to_numpy(), base.to_numpy(), paired=False)


def point_intervals(points: pd.DataFrame) -> pd.DataFrame:
    """Per (exp, dataset, config, B): intervals of throughput, speedup and acceptance length (:data:`CI_COLUMNS`)."""
    ok = _ok(points)
    rows = []
    if ok.empty:
        return pd.DataFrame(columns=GROUP + CI_COLUMNS)
    base = {key: g for key, g in ok[ok["method"] == "none"].groupby(["exp", "dataset", "batch_size"])}
    for (exp, ds, cfg, b), g in ok.groupby(GROUP, sort=True):
        tput = _per_request(g, "throughput")
        t_iv = bootstrap_ci(tput.dropna().to_numpy())
        row = dict(zip(GROUP, (exp, ds, cfg, b)), throughput_ci_low=t_iv.low, throughput_ci_high=t_iv.high)
        s_iv = Interval(math.nan, math.nan, math.nan, 0)
        if g["method"].iloc[0] != "none" and (exp, ds, b) in base:
            s_iv = paired_speedup_ci(tput, _per_request(base[(exp, ds, b)], "throughput"))
        a_iv = bootstrap_ci(_per_request(g, "acceptance_length").dropna().to_numpy())
        row.update(speedup_ci_low=s_iv.low, speedup_ci_high=s_iv.high, speedup_n=s_iv.n,
                   acceptance_length_ci_low=a_iv.low, acceptance_length_ci_high=a_iv.high)
        rows.append(row)
    return pd.DataFrame(rows, columns=GROUP + CI_COLUMNS)


def _counter_sums(g: pd.DataFrame) -> pd.DataFrame:
    """Per request: summed drafts, draft tokens, accepted tokens and accepted tokens per position (``pos<j>``)."""
    rows = {}
    for r in g.itertuples(index=False):
        d = rows.setdefault(r.request_index, {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0})
        for col, name in (("num_drafts", "drafts"), ("num_draft_tokens", "draft_tokens"),
                          ("num_accepted_tokens", "accepted")):
            v = getattr(r, col)
            d[name] += 0.0 if v is None or v != v else float(v)
        per = r.accepted_per_pos
        if per is not None and not (isinstance(per, float) and math.isnan(per)):
            for j, x in enumerate(per, start=1):
                d[f"pos{j}"] = d.get(f"pos{j}", 0.0) + float(x)
    return pd.DataFrame.from_dict(rows, orient="index").fillna(0.0).sort_index()


def pooled_acceptance_intervals(g: pd.DataFrame) -> dict[str, Interval]:
    """Pooled acceptance rate and per-position rates of some points, resampling requests (all their points together):
    ``{"acceptance_rate": ..., "acceptance_rate_pos<j>": ...}``."""
    c = _counter_sums(g)
    if c.empty or c["drafts"].sum() == 0:
        return {}
    out = {}
    if c["draft_tokens"].sum() > 0:
        out["acceptance_rate"] = bootstrap_pooled_ratio_ci(c["accepted"].to_numpy(), c["draft_tokens"].to_numpy())
    j = 1
    while f"pos{j}" in c:
        out[f"acceptance_rate_pos{j}"] = bootstrap_pooled_ratio_ci(c[f"pos{j}"].to_numpy(), c["drafts"].to_numpy())
        j += 1
    return out


def speedup_drop_ci(sd0: pd.Series, base0: pd.Series, sd: pd.Series, base: pd.Series) -> Interval:
    """100 (s(B0) - s(B)) / s(B0) with the four mean throughputs resampled together over the requests all four
    served; the estimate is from all successful points (as the metric)."""
    common = sorted(set(sd0.dropna().index) & set(base0.dropna().index) & set(sd.dropna().index)
                    & set(base.dropna().index))
    est = 100.0 * (1.0 - (sd.mean() / base.mean()) / (sd0.mean() / base0.mean()))
    if not common:
        return Interval(est, math.nan, math.nan, 0)
    iv = bootstrap_function_ci([x.reindex(common).to_numpy() for x in (sd0, base0, sd, base)],
                               lambda a0, b0, a, b: 100.0 * (1.0 - (a / b) / (a0 / b0)))
    return Interval(est, iv.low, iv.high, iv.n)


def pooled_acceptance(ok: pd.DataFrame) -> dict:
    """Acceptance from the summed counters of successful points: length, rate, per-position rates."""
    drafts = float(np.nansum(ok["num_drafts"].to_numpy(dtype=float))) if len(ok) else 0.0
    drafted = float(np.nansum(ok["num_draft_tokens"].to_numpy(dtype=float))) if len(ok) else 0.0
    acc = float(np.nansum(ok["num_accepted_tokens"].to_numpy(dtype=float))) if len(ok) else 0.0
    per: list[float] = []
    for v in ok["accepted_per_pos"]:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        vals = [float(x) for x in v]
        per.extend([0.0] * (len(vals) - len(per)))
        for i, x in enumerate(vals):
            per[i] += x
    return {
        "drafts": drafts, "draft_tokens": drafted, "accepted": acc,
        "acceptance_length": 1 + acc / drafts if drafts else math.nan,
        "acceptance_rate": acc / drafted if drafted else math.nan,
        "acceptance_rate_per_pos": [x / drafts for x in per] if drafts else [],
    }


def lossless_detail(points: pd.DataFrame) -> pd.DataFrame:
    """Per experiment x configuration: points compared with / identical to no SD, acceptance, failures.

    ``compared``: successful SD points whose no-SD point (same dataset, request, B) succeeded too;
    ``identical``: of those, outputs equal to no SD's token for token (the first sequence of each batch);
    ``batch_consistent``: successful points whose B sequences are all equal; ``counter_warnings``:
    successful points whose SD counters were inconsistent (their ``error`` field). Acceptance length and
    rate carry 95 % bootstrap intervals over requests (``*_ci_low``, ``*_ci_high``; ``requests`` = n), each
    request's points (all batch sizes) resampled together.
    """

    ok = _ok(points)
    same = lossless_table(points) if len(ok) else pd.DataFrame(columns=["exp", "config", "points", "identical"])
    same = same.set_index(["exp", "config"])
    rows = []
    for exp in sorted(points["exp"].unique()):
        sub = points[points["exp"] == exp]
        for cfg, method, k in config_order(sub):
            g = sub[sub["config"] == cfg]
            gok = _ok(g)
            failed = g[g["status"] != "ok"]
            warn = gok[gok["error"].notna() & (gok["error"].astype(str) != "")]
            first = failed["error"].dropna().astype(str)
            first_warn = warn["error"].dropna().astype(str)
            acc = pooled_acceptance(gok) if method != "none" else {}
            ivs = pooled_acceptance_intervals(gok) if method != "none" and len(gok) else {}
            c = _counter_sums(gok) if method != "none" and len(gok) else pd.DataFrame()
            len_iv = (bootstrap_function_ci([c["accepted"], c["drafts"]], lambda a, d: 1 + a / d, reduce="sum")
                      if len(c) and c["drafts"].sum() > 0 else Interval(math.nan, math.nan, math.nan, 0))
            rate_iv = ivs.get("acceptance_rate", Interval(math.nan, math.nan, math.nan, 0))
            cmp_pts = int(same.loc[(exp, cfg), "points"]) if (exp, cfg) in same.index else 0
            ident = int(same.loc[(exp, cfg), "identical"]) if (exp, cfg) in same.index else 0
            distinct = pd.to_numeric(gok["distinct_outputs"], errors="coerce") if "distinct_outputs" in gok else None
            rows.append({
                "exp": exp, "config": cfg, "method": method, "k": k, "points": len(g), "ok": len(gok),
                "failed": len(failed), "compared": cmp_pts if method != "none" else None,
                "identical": ident if method != "none" else None,
                "identical_fraction": (ident / cmp_pts if cmp_pts else math.nan) if method != "none" else math.nan,
                "batch_consistent": int((distinct == 1).sum()) if distinct is not None else None,
                "acceptance_length_mean": float(gok["acceptance_length"].mean()) if method != "none" and len(gok)
                else math.nan,
                "acceptance_length": acc.get("acceptance_length", math.nan),
                "acceptance_length_ci_low": len_iv.low, "acceptance_length_ci_high": len_iv.high,
                "acceptance_rate": acc.get("acceptance_rate", math.nan),
                "acceptance_rate_ci_low": rate_iv.low, "acceptance_rate_ci_high": rate_iv.high,
                "requests": int(gok["request_index"].nunique()),
                "acceptance_rate_per_pos": " ".join(f"{x:.4f}" for x in acc.get("acceptance_rate_per_pos", [])),
                "counter_warnings": len(warn),
                "first_error": first.iloc[0] if len(first) else "",
                "first_counter_warning": first_warn.iloc[0] if len(first_warn) else "",
            })
    out = pd.DataFrame(rows)
    if len(out):
        out["k"] = out["k"].astype("Int64")
        for c in ("compared", "identical", "batch_consistent"):
            out[c] = out[c].astype("Int64")
    return out


def identical_by_dataset(points: pd.DataFrame) -> pd.DataFrame:
    """(exp, dataset, config) -> compared, identical (as :func:`lossless_table`, split by dataset)."""

    frames = []
    for ds in sorted(points["dataset"].unique()):
        sub = points[points["dataset"] == ds]
        if (_ok(sub)["method"] != "none").any():
            t = lossless_table(sub)
            frames.append(t.assign(dataset=ds))
    if not frames:
        return pd.DataFrame(columns=["exp", "config", "points", "identical", "dataset"])
    return pd.concat(frames, ignore_index=True)


# --- metrics --------------------------------------------------------------------------------


def _finite(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and not pd.isna(v)


def engine_metrics(points: pd.DataFrame, run_kind: str) -> dict:
    """Flat ``{key: value}`` metrics of the engine points (keys in the module docstring)."""
    if run_kind not in RUN_KINDS:
        raise SpecReproError(f"run kind {run_kind!r} is not one of {', '.join(RUN_KINDS)}")
    points = normalise(points)
    out: dict[str, float] = {
        "engine.points.ok": int((points["status"] == "ok").sum()),
        "engine.points.failed": int((points["status"] != "ok").sum()),
    }
    t = speedup_points(points)
    for r in t.itertuples(index=False):
        pre = f"engine.{r.exp}.{r.dataset}.{r.config}"
        b = f"b{int(r.batch_size)}"
        if _finite(r.throughput):
            out.update(interval_metrics(f"{pre}.throughput.{b}", Interval(
                float(r.throughput), r.throughput_ci_low, r.throughput_ci_high, int(r.requests))))
        if r.method != "none":
            if _finite(r.speedup):
                out.update(interval_metrics(f"{pre}.speedup.{b}", Interval(
                    float(r.speedup), r.speedup_ci_low, r.speedup_ci_high, int(r.speedup_n))))
            if _finite(r.acceptance_length):
                out.update(interval_metrics(f"{pre}.acceptance_length.{b}", Interval(
                    float(r.acceptance_length), r.acceptance_length_ci_low, r.acceptance_length_ci_high,
                    int(r.requests))))
    ok = _ok(points)
    tput = {key: _per_request(g, "throughput") for key, g in ok.groupby(GROUP)}
    # speedup drop from the smallest batch size to every other one
    sd = t[(t["method"] != "none") & t["speedup"].notna()]
    for (exp, ds, cfg), g in sd.groupby(["exp", "dataset", "config"]):
        g = g.sort_values("batch_size")
        b0, s0 = int(g["batch_size"].iloc[0]), float(g["speedup"].iloc[0])
        for r in g.iloc[1:].itertuples(index=False):
            if s0:
                b = int(r.batch_size)
                iv = speedup_drop_ci(tput[(exp, ds, cfg, b0)], tput[(exp, ds, "none", b0)], tput[(exp, ds, cfg, b)],
                                     tput[(exp, ds, "none", b)])
                out.update(interval_metrics(f"engine.{exp}.{ds}.{cfg}.speedup_drop_pct.b{b0}_b{b}", iv))
    # pooled acceptance rates from the counters, resampled over requests
    ok = ok[ok["method"] != "none"]
    for (exp, ds, cfg), g in ok.groupby(["exp", "dataset", "config"]):
        pre = f"engine.{exp}.{ds}.{cfg}"
        for name, iv in pooled_acceptance_intervals(g).items():
            if name != "acceptance_rate":
                out.update(interval_metrics(f"{pre}.{name}", iv))
        for b, gb in g.groupby("batch_size"):
            for name, iv in pooled_acceptance_intervals(gb).items():
                out.update(interval_metrics(f"{pre}.{name}.b{int(b)}", iv))
    for r in identical_by_dataset(points).itertuples(index=False):
        if r.points:
            out[f"engine.{r.exp}.{r.dataset}.{r.config}.identical_fraction"] = r.identical / r.points
    return dict(sorted(out.items()))


# --- the CLI verb -------------------------------------------------------------------------------




def run(a) -> None:
    from ...core.io import read_json, write_csv, write_json

    cfg = read_json(a.run_config)
    kind = (cfg.get("run") or {}).get("kind")
    points = load_points(a.points)
    metrics = engine_metrics(points, kind)
    if a.prompts:
        from ...core.io import read_parquet

        # results/engine/<exp>/prompts/<dataset>.parquet: prompts are per experiment (its target's tokenizer)
        prompts = pd.concat([read_parquet(p).assign(exp=Path(p).parts[-3]) for p in a.prompts], ignore_index=True)
        table = request_bleu(points, prompts)
        metrics.update(bleu_bucket_metrics(table, a.bleu_edges))
        if a.bleu_csv:
            write_csv(a.bleu_csv, table.assign(run_kind=kind), float_format="%.10g")
    if a.speedup_csv:
        write_csv(a.speedup_csv, speedup_points(points).assign(run_kind=kind), float_format="%.10g")
    if a.lossless_csv:
        write_csv(a.lossless_csv, lossless_detail(points).assign(run_kind=kind), float_format="%.10g")
    write_json(a.output, metrics)


def first_errors(points: pd.DataFrame, limit: int = 3) -> list[str]:
    """Distinct errors of failed points, most frequent first (at most ``limit``)."""
    err = points.loc[points["status"] != "ok", "error"].dropna().astype(str)
    counts = err.value_counts()
    return [f"{e} ({n}x)" for e, n in sorted(counts.items(), key=lambda t: (-t[1], t[0]))[:limit]]



def request_bleu(points: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """Per (exp, dataset, request, config, B): BLEU-4 of the no-SD output against its prompt, and throughput.

    ``prompts``: the engine-prompts tables with an ``exp`` column.

    The output is the no-SD run's at the smallest batch size (every SD output equals it when lossless),
    the hypothesis; the prompt token ids are the reference, as in the simulator's Fig. 9.
    """
    ok = points[points["status"] == "ok"]
    base = ok[ok["method"] == "none"].sort_values("batch_size").drop_duplicates(["exp", "dataset", "request_index"])
    pr = prompts.set_index(["exp", "dataset", "request_index"])["prompt_token_ids"]
    scores = {}
    for r in base.itertuples(index=False):
        key = (r.exp, r.dataset, r.request_index)
        if key in pr.index:
            scores[key] = bleu4(list(r.output_token_ids), list(pr.loc[key]))
    out = ok[["exp", "dataset", "request_index", "config", "method", "batch_size", "throughput"]].copy()
    out["bleu4"] = [scores.get((e, d, i)) for e, d, i in zip(out["exp"], out["dataset"], out["request_index"])]
    return out.dropna(subset=["bleu4"]).sort_values(["exp", "dataset", "config", "batch_size", "request_index"]) \
        .reset_index(drop=True)


def bleu_relative_table(bleu: pd.DataFrame, edges) -> pd.DataFrame:
    """Fig. 9 from engine runs: per BLEU-4 bucket and B, n-gram's mean throughput over EAGLE's, minus 1, in %.

    Columns exp, dataset, config, reference, batch_size, bucket, lo, hi, requests, rel_pct, ci_low, ci_high
    (the interval of rel_pct, paired over the bucket's requests). EAGLE = ``eagle-k3`` (else ``eagle3-k3``) of
    the same experiment; a bucket without requests has no row.
    """
    cols = ["exp", "dataset", "config", "reference", "batch_size", "bucket", "lo", "hi", "requests", "rel_pct",
            "ci_low", "ci_high"]
    rows = []
    if bleu.empty:
        return pd.DataFrame(columns=cols)
    t = bleu.assign(bucket=bucket_of(bleu["bleu4"], edges))
    for (exp, ds), g in t.groupby(["exp", "dataset"], sort=True):
        ref = next((c for c in ("eagle-k3", "eagle3-k3") if c in set(g["config"])), None)
        if ref is None:
            continue
        cells = {key: c.drop_duplicates("request_index").set_index("request_index")["throughput"].astype(float)
                 for key, c in g.groupby(["config", "batch_size", "bucket"])}
        for cfg in sorted(c for c in set(g["config"]) if c.startswith("ngram-")):
            for (c_, b, k), tp in sorted((key, v) for key, v in cells.items() if key[0] == cfg):
                if (ref, b, k) in cells:
                    iv = paired_speedup_ci(tp, cells[(ref, b, k)])
                    rows.append({"exp": exp, "dataset": ds, "config": cfg, "reference": ref, "batch_size": int(b),
                                 "bucket": int(k), "lo": edges[k], "hi": edges[k + 1], "requests": int(len(tp)),
                                 "rel_pct": 100.0 * (iv.estimate - 1.0), "ci_low": 100.0 * (iv.low - 1.0),
                                 "ci_high": 100.0 * (iv.high - 1.0)})
    return pd.DataFrame(rows, columns=cols)


def bleu_bucket_metrics(table: pd.DataFrame, edges) -> dict[str, float]:
    """Keys ``engine.<exp>.<dataset>.<ngram config>.rel_to_eagle_pct.bleu<lo>-<hi>.b<B>`` of :func:`bleu_relative_table`
    (with their intervals)."""
    out: dict[str, float] = {}
    for r in bleu_relative_table(table, edges).itertuples(index=False):
        key = f"engine.{r.exp}.{r.dataset}.{r.config}.rel_to_eagle_pct.bleu{r.lo:.1f}-{r.hi:.1f}.b{r.batch_size}"
        out.update(interval_metrics(key, Interval(r.rel_pct, r.ci_low, r.ci_high, r.requests)))
    return out


# --- summaries over points -----------------------------------------------------------------


def speedup_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per (exp, dataset, config, B): mean throughput over requests and speedup over ``none`` (the paper's)."""
    ok = points[points["status"] == "ok"]
    g = ok.groupby(["exp", "model", "dataset", "method", "k", "config", "batch_size"], dropna=False)
    t = g.agg(throughput=("throughput", "mean"), requests=("request_index", "nunique"),
              acceptance_length=("acceptance_length", "mean"), wall_s=("wall_s", "sum")).reset_index()
    base = t[t["method"] == "none"][["exp", "dataset", "batch_size", "throughput"]].rename(
        columns={"throughput": "baseline_throughput"})
    t = t.merge(base, on=["exp", "dataset", "batch_size"], how="left")
    t["speedup"] = t["throughput"] / t["baseline_throughput"]
    return t.sort_values(["exp", "dataset", "config", "batch_size"]).reset_index(drop=True)


def lossless_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per SD configuration: how many of its outputs equal the no-SD output token for token (same point)."""
    ok = points[points["status"] == "ok"]
    base = ok[ok["method"] == "none"].set_index(["exp", "dataset", "request_index", "batch_size"])["output_token_ids"]
    rows = []
    for (exp, cfg), g in ok[ok["method"] != "none"].groupby(["exp", "config"]):
        same = total = 0
        for _, r in g.iterrows():
            key = (exp, r["dataset"], r["request_index"], r["batch_size"])
            if key in base.index:
                total += 1
                same += list(base.loc[key]) == list(r["output_token_ids"])
        rows.append({"exp": exp, "config": cfg, "points": total, "identical": same})
    return pd.DataFrame(rows, columns=["exp", "config", "points", "identical"])


# --- the profiled pass (Fig. 4) and the cost-fit sweep ------------------------------------------
