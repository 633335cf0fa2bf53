"""k by batch size: vLLM's ``num_speculative_tokens_per_batch_size`` schedules (their validation and the k a batch
gets) and the ``k-schedule`` files that hold them; used by the config's checks, the bench and the simulator."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import SpecReproError
from ..core.io import read_json


def check_schedule(schedule) -> tuple[tuple[int, int, int], ...]:
    """A ``num_speculative_tokens_per_batch_size`` schedule, validated and sorted as vLLM does.

    Entries are inclusive batch-size ranges ``(start, end, k)``; ranges must not overlap and the first
    must start at 1 (vLLM 0.34.0, ``vllm/v1/spec_decode/dynamic/utils.py``).
    """
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise SpecReproError(f"k-by-batch-size schedule must be a non-empty list of [start, end, k], got {schedule!r}")
    out = []
    for entry in schedule:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise SpecReproError(f"k-by-batch-size entry {entry!r}: expected [start, end, k]")
        a, b, k = (int(x) for x in entry)
        if a <= 0 or b <= 0 or a > b or k < 0:
            raise SpecReproError(f"k-by-batch-size entry {list(entry)}: need 1 <= start <= end and k >= 0")
        out.append((a, b, k))
    out.sort()
    prev_end = 0
    for a, b, _ in out:
        if a <= prev_end:
            raise SpecReproError(f"k-by-batch-size schedule {schedule!r}: ranges overlap")
        prev_end = b
    if out[0][0] != 1:
        raise SpecReproError(f"k-by-batch-size schedule {schedule!r}: the first range must start at 1")
    return tuple(out)


def schedule_k(schedule, batch_size: int, k_max: int | None = None) -> int:
    """k of a batch of ``batch_size`` requests under vLLM's schedule semantics: a batch size between two
    ranges, or past the last, takes the k of the range before it; every k is capped at ``k_max``
    (vLLM's ``num_speculative_tokens``; default: the schedule's largest k)."""
    sched = check_schedule(schedule)
    cap = max(k for _, _, k in sched) if k_max is None else int(k_max)
    k = sched[0][2]
    for a, _, kk in sched:
        if a > batch_size:
            break
        k = kk
    return min(k, cap)


def schedules_for(path: str | Path, dataset: str, mode: str = "held-out") -> dict[str, list]:
    """{proposer: schedule} from a ``k-schedule`` file: the held-out schedule of ``dataset``, or the pooled one."""
    doc = read_json(path)
    out = {}
    for p, entry in (doc.get("proposers") or {}).items():
        held = entry.get("held_out") or {}
        out[p] = held[dataset] if mode == "held-out" and dataset in held else entry["schedule"]
    if not out:
        raise SpecReproError(f"{path}: no schedules (expected the output of `specrepro k-schedule`)")
    return out
