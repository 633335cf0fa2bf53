"""The ``vllm.general_plugins`` entry point of specrepro (``specrepro = specrepro.vllm_plugin:register``).

vLLM calls :func:`register` in every engine process (the process that builds the ``LLM``, the engine
core and every worker under tensor parallelism). Without ``SPECREPRO_INSTRUMENT`` in the environment it
returns at once, importing nothing; with it, :mod:`specrepro.engine.run.instrument` wraps the model
runner's phases. Kept free of heavy imports: every vLLM process on a machine with specrepro on its
path loads this module.

The entry point is declared twice: in ``pyproject.toml`` (an installed specrepro) and in the committed
``src/specrepro_vllm_plugin-0.1.0.dist-info/entry_points.txt`` (GPU jobs run this checkout's ``src/``
through ``PYTHONPATH`` only, with no installed copy).
"""

from __future__ import annotations

import os

MODE_ENV = "SPECREPRO_INSTRUMENT"


def register() -> None:
    """Install the instrumentation when the environment asks for it (idempotent)."""
    if not os.environ.get(MODE_ENV):
        return
    from .engine.run import instrument

    instrument.install()
