"""The ``vllm.general_plugins`` entry point of specrepro (``specrepro = specrepro.vllm_plugin:register``).

vLLM calls :func:`register` in every engine process (the process that builds the ``LLM``, the engine
core and every worker under tensor parallelism). Without ``SPECREPRO_INSTRUMENT`` in the environment it
(nor ``SPECREPRO_DRAFT``) returns at once, importing nothing; with it, :mod:`specrepro.engine.run.instrument` wraps the model
runner's phases. Kept free of heavy imports: every vLLM process on a machine with specrepro on its
path loads this module.

The entry point is declared twice: in ``pyproject.toml`` (an installed specrepro) and in the committed
``src/specrepro_vllm_plugin-0.1.0.dist-info/entry_points.txt`` (GPU jobs run this checkout's ``src/``
through ``PYTHONPATH`` only, with no installed copy).
"""

from __future__ import annotations

import os

MODE_ENV = "SPECREPRO_INSTRUMENT"
#: a draft plan (JSON path) switches the draft-substitution hook on (specrepro.engine.run.drafts)
DRAFT_ENV = "SPECREPRO_DRAFT"


def register() -> None:
    """Install the instrumentation and the draft hook when the environment asks for them (idempotent)."""
    if os.environ.get(MODE_ENV):
        from .engine.run import instrument

        instrument.install()
    if os.environ.get(DRAFT_ENV):
        from .engine.run import drafts

        drafts.install()
