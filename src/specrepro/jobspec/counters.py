"""vLLM's speculative-decoding counters (``LLM.get_metrics()``): snapshots, deltas, consistency."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

COUNTERS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"

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
    # n-gram and suffix propose only where the context repeats; a drafter model proposes at every step
    # (k = 0: a k-by-batch-size schedule turned drafting off at this batch size)
    if d["num_drafts"] <= 0 and method not in ("ngram", "suffix") and k != 0:
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
