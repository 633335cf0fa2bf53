"""The verbs that run engines (``bench``, ``sglang-bench``, ...): their arguments, with the heavy modules they
drive imported inside each verb's body, so a verb's ``--help`` needs nothing but argparse."""

from __future__ import annotations


def sweep_arguments(p, spec_help: str = "the configuration (JSON, written by the workflow)") -> None:
    """The arguments every engine sweep verb takes (``bench``, ``sglang-bench``)."""
    p.add_argument("--spec", required=True, help=spec_help)
    p.add_argument("--prompts", nargs="+", required=True, help="prompt tables (engine-prompts), one per dataset")
    p.add_argument("--target-manifest", required=True)
    p.add_argument("--drafter-manifest")
    p.add_argument("--config-hash", default="")
    p.add_argument("--repo", default=".", help="checkout whose git commit is recorded")
    p.add_argument("--retry-failed", action="store_true", help="rerun points recorded as failed")
    p.add_argument("-o", "--output", required=True, help="points table (Parquet); <output>.json gets the run's metadata")
