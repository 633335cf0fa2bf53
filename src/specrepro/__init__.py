"""specrepro: reproduce "Speculative Decoding: Performance or Illusion?" (arXiv 2601.11580).

Modules follow the paper's concepts: ``traces`` (per-position acceptance traces),
``acceptance`` (their statistics), ``figures`` (one module per figure), ``claims``
(the paper's values against this run's), ``report`` (the LaTeX report), ``config``
(the run configuration), ``fetch`` (verified inputs), ``io`` (atomic outputs).
"""

__version__ = "0.1.0"
