"""Transitional: :mod:`specrepro.core.io` under its old name, for ``digitise.py`` only until it moves to
``specrepro.analysis.digitise`` (remove this module then)."""

from .core.io import *  # noqa: F401,F403
from .core.io import SpecReproError, sha256_file, write_csv  # noqa: F401 - the names digitise.py imports
