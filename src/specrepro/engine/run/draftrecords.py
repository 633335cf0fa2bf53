"""The draft hook's records as tables: per request and step what was proposed, scheduled and accepted; choice
shares, departures and the check against vLLM's counters (pure; the records of :mod:`specrepro.engine.run.drafts`
and the instrumentation's ``accept`` records of the same engine)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd

STEP_COLUMNS = ["step", "req", "g", "batch", "source", "proposed", "own", "drafter_k", "ngram_len", "departed",
                "scheduled_drafts", "accepted"]


def _resolve(internal: str, known: set[str]) -> str | None:
    if internal in known:
        return internal
    head = internal.rsplit("-", 1)[0]
    return head if head in known else None


def draft_steps(drafts: Iterable[Mapping], steps: Iterable[Mapping]) -> pd.DataFrame:
    """One row per request and verified step: the hook's draft (``proposed`` tokens, its ``source``; ``own``: the
    tokens vLLM's drafter proposed, ``drafter_k``: how many the hybrid let it draft, 0 where it ran as configured) joined with
    the step that verified it (``scheduled_drafts``, ``accepted`` = tokens produced - 1).

    The join is on (request, output position ``g``): a step record with ``c`` tokens computed, ``n`` scheduled,
    ``d`` drafts belongs to ``g = c + n - d - P`` (``P``: prompt tokens), the position the draft was made at."""
    verified: dict[tuple[str, int], tuple[int, int]] = {}
    for rec in steps:
        q = rec.get("req")
        if not q:
            continue
        for rid, c, n, d, v, P in zip(q["id"], q["computed"], q["scheduled"], q["drafts"], q["valid"], q["prompt_len"]):
            if d > 0 and P >= 0:
                verified[(rid, c + n - d - P)] = (int(d), int(v) - 1)
    rows = []
    for r in drafts:
        d, a = verified.get((r["req"], r["g"]), (0, None))
        rows.append({"step": int(r.get("step", -1)), "req": r["req"], "g": int(r["g"]), "batch": int(r.get("batch", 1)),
                     "source": r["source"], "proposed": int(r["n"]), "own": int(r.get("own", 0)),
                     # tokens the model drafter drafted that step when the hybrid limited it (0: as configured)
                     "drafter_k": int(r.get("drafter_k") or 0), "ngram_len": int(r.get("ngram_len", 0)),
                     "departed": bool(r.get("departed", False)), "scheduled_drafts": d, "accepted": a})
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def draft_summary(table: pd.DataFrame, counters: Mapping[str, Any] | None = None) -> dict:
    """Choice shares over verified steps, departed requests, and whether the plugin's records reproduce vLLM's
    counters (drafts, draft tokens, accepted tokens) of the same engine (None: no counters given)."""
    v = table[table["accepted"].notna() & (table["scheduled_drafts"] > 0)]
    n = len(v)
    share = {s: (float((v["source"] == s).sum()) / n if n else None) for s in ("ngram", "drafter", "reference",
                                                                                 "controlled")}
    mine = {"num_drafts": n, "num_draft_tokens": int(v["scheduled_drafts"].sum()),
            "num_accepted_tokens": int(v["accepted"].sum())}
    lim = table[table["drafter_k"] > 0].drop_duplicates("step")
    out = {"steps": n, "share_ngram": share["ngram"], "share_drafter": share["drafter"],
           # engine steps where the hybrid let the model drafter run its first pass only (None: never limited)
           "first_pass_steps": (float((lim["drafter_k"] == 1).mean()) if len(lim) else None),
           "share_reference": share["reference"], "departed_requests": int(table.loc[table["departed"], "req"].nunique()),
           "plugin_counters": mine, "counters_agree": None}
    if counters is not None:
        out["counters_agree"] = all(int(counters[k]) == mine[k] for k in mine)
    return out


def trace_mismatches(table: pd.DataFrame, acc: Mapping[str, list]) -> tuple[int, int]:
    """(verified steps, steps whose accepted tokens differ from the traces') of an oracle's steps of one request:
    at position ``g`` it must accept ``min(max_m acc_m[g] - 1, drafts scheduled)`` (``acc``: method -> acc_len;
    the oracle of one method passes that method's alone). Positions past a trace's end expect 0."""
    v = table[table["accepted"].notna() & (table["scheduled_drafts"] > 0)]
    bad = 0
    for g, d, a in zip(v["g"], v["scheduled_drafts"], v["accepted"]):
        best = max((int(t[g]) - 1 if g < len(t) else 0) for t in acc.values())
        bad += int(a) != min(best, int(d))
    return len(v), bad
