"""The simulator's names (proposers, policies, batching and pairing modes) and the paper's constants: no numpy,
so a verb's arguments (``specrepro simulate --help``) need nothing heavy."""

from __future__ import annotations

import argparse

PROPOSERS = ("ngram", "eagle", "combined", "suffix", "combined3")
PAPER_POLICIES = ("fixed-1", "fixed-3", "fixed-5", "oracle")
POLICIES = PAPER_POLICIES + ("adaptive", "batch-schedule", "ngram-first")
#: proposers a batch-schedule policy (k by batch size) can drive
SCHEDULED_PROPOSERS = ("ngram", "eagle", "suffix")
COMBINE_COSTS = ("ngram", "winner", "both")  #: "ngram" = the paper's accounting
BATCHING = ("replicate", "continuous")  #: "replicate" = the paper's B copies of one request
PAIRING = ("index", "equal-length")  #: "index" = the paper's, all requests

#: the released simulator's chance that n-gram finds a match where its trace says 1 token
NGRAM_MATCH_PROB = {"sharegpt": 0.2, "cnn": 0.4, "gsm8k": 0.2, "instructcoder": 0.8}

#: the authors' simulator draws 300 requests with seed 42: a run with this draw computes the paper's values
#: on the paper's own requests (see :func:`metrics_from_summaries`)
PAPER_DRAW = {"num_requests": 300, "seed": 42}

#: the k a k-by-batch-size schedule chooses from (``specrepro engine-simulate --k-candidates``)
DEFAULT_K_CANDIDATES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)


def is_policy(name: str) -> bool:
    """``fixed-<k>`` (k >= 1), ``oracle``, ``adaptive``, ``batch-schedule`` or ``ngram-first``."""
    if name in POLICIES:
        return True
    head, _, k = name.partition("-")
    return head == "fixed" and k.isdigit() and int(k) >= 1 and str(int(k)) == k


def policy_arg(name: str) -> str:
    """argparse type of ``--policy``: a policy name or a one-line error."""
    if not is_policy(name):
        raise argparse.ArgumentTypeError(
            f"unknown policy {name!r} (fixed-<k> with k >= 1, oracle, adaptive, batch-schedule)")
    return name
