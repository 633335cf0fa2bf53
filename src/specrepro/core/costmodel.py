"""Step-time cost models of a target model and its proposers on one GPU, as data files.

A cost model is a YAML file (see ``data/cost_models/llama3.1-8b-h100.yaml``)::

    target: {c_kv, c_compute, c_fixed}      T(kv, n) = c_kv*kv + c_compute*n + c_fixed
    eagle:  {d_kv, d_spec, d_fixed}         EAGLE draft time = d_kv*kv + d_spec*input_len + d_fixed
            optional d_tok                  + d_tok * batch_tokens (the tokens the drafter's k passes take over the
                                            batch, B * input_len for B copies; absent: 0, the paper's form)
    ngram:  {draft_fraction}                n-gram draft time = draft_fraction * T(kv, n)
    overhead_per_step                       added to every request's latency at every step
    overhead_per_token                      optional: added per token a decode step schedules (B at the prefill:
                                            the sampled positions' logits, sampler and bookkeeping); absent: 0
    overhead_by_method: {<method>: s}       optional: the overhead of a step under SD with that method (the
                                            baseline keeps overhead_per_step)

All times in seconds. Built-in models are found by name; any other file by path. A file fitted to one
experiment (:mod:`specrepro.engine.results.modelfit`) has a ``drafters`` section with one drafter's
``{d_kv, d_spec, d_fixed}`` per method; ``load_cost_model(path, drafter=m)`` takes drafter ``m``'s in place of
``eagle``'s, and ``overhead_by_method[m]`` (``overhead_of``, default ``drafter``) as the overhead of SD steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from .errors import SpecReproError

BUILTIN_DIR = Path(__file__).resolve().parents[1] / "data" / "cost_models"

#: (section, key) of every coefficient a cost model file must define
COEFFICIENTS = (
    ("target", "c_kv"),
    ("target", "c_compute"),
    ("target", "c_fixed"),
    ("eagle", "d_kv"),
    ("eagle", "d_spec"),
    ("eagle", "d_fixed"),
    ("ngram", "draft_fraction"),
    (None, "overhead_per_step"),
)


@dataclass(frozen=True)
class CostModel:
    """Coefficients of the step-time model (seconds)."""

    name: str
    c_kv: float
    c_compute: float
    c_fixed: float
    d_kv: float
    d_spec: float
    d_fixed: float
    ngram_fraction: float
    overhead: float
    #: the per-step overhead of SD steps (a method's own, fitted on its profiled steps); None: ``overhead``
    sd_overhead: float | None = None
    #: drafting time per drafter token over the batch (``input_len`` summed over the drafting requests; 0: the
    #: paper's form, where drafting depends on B only through ``kv``); fitted where profiled passes span several k
    #: and batch sizes
    d_tok: float = 0.0
    #: overhead per token a decode step schedules (its sampled positions: logits, rejection sampler, bookkeeping), on
    #: top of ``overhead`` / ``sd_overhead``; a prefill step is charged it per request; 0: the paper's form
    overhead_per_token: float = 0.0

    @property
    def step_overhead(self) -> float:
        """Overhead of one SD step (the baseline's steps take ``overhead``)."""
        return self.overhead if self.sd_overhead is None else self.sd_overhead

    def overhead_at(self, tokens, sd: bool = True):
        """Overhead of one step that samples ``tokens`` positions (a decode step's scheduled tokens, one per request at
        the prefill): an SD step's (``sd``) or the baseline's constant, plus ``overhead_per_token`` each."""
        return (self.step_overhead if sd else self.overhead) + self.overhead_per_token * tokens

    def target(self, kv, n):
        """Time of one target forward pass over ``n`` tokens with ``kv`` tokens cached."""
        return kv * self.c_kv + n * self.c_compute + self.c_fixed

    def eagle_draft(self, kv, input_len, batch_tokens=None):
        """EAGLE drafting time of a step whose requests verify ``input_len`` tokens each, ``kv`` tokens cached over
        the batch; ``batch_tokens``: ``input_len`` summed over the batch's drafting requests (default
        ``input_len``: one request), charged ``d_tok`` each."""
        bt = input_len if batch_tokens is None else batch_tokens
        return kv * self.d_kv + input_len * self.d_spec + self.d_fixed + bt * self.d_tok

    def ngram_draft(self, verify_time):
        """n-gram drafting time: a fixed share of the step's verification time."""
        return verify_time * self.ngram_fraction


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def resolve(name_or_path: str) -> Path:
    """A built-in model's file by name, else the given path."""
    builtin = BUILTIN_DIR / f"{name_or_path}.yaml"
    if builtin.exists():
        return builtin
    path = Path(name_or_path)
    if path.exists():
        return path
    raise SpecReproError(
        f"cost model {name_or_path!r}: neither a built-in model ({', '.join(builtin_names())}) nor an existing file"
    )


def _non_negative(path: Path, label: str, v) -> float:
    """``v`` as a float, or the one-line error naming the file and ``label``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SpecReproError(f"{path}: {label} must be a non-negative number, got {v!r}")
    return float(v)


def load_cost_model(name_or_path: str, drafter: str | None = None, overhead_of: str | None = None) -> CostModel:
    """Read and check a cost model; a missing or non-numeric coefficient is a one-line error. ``drafter``: use
    ``drafters.<drafter>`` as the drafting coefficients (``eagle`` without a ``drafters`` section is the file's own).
    ``overhead_of`` (default ``drafter``): the method whose ``overhead_by_method`` entry SD steps take, where the
    file has one."""
    path = resolve(name_or_path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecReproError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise SpecReproError(f"{path}: expected a mapping of cost-model sections")
    if drafter is not None and not (drafter == "eagle" and "drafters" not in doc):
        section = (doc.get("drafters") or {}).get(drafter)
        if not isinstance(section, dict):
            known = ", ".join(sorted(doc.get("drafters") or {})) or "none"
            raise SpecReproError(f"{path}: no drafter {drafter!r} in its 'drafters' section (has: {known})")
        doc = {**doc, "eagle": section}
    values = {}
    for section, key in COEFFICIENTS:
        where = f"{section}.{key}" if section else key
        holder = doc if section is None else doc.get(section)
        if not isinstance(holder, dict) or key not in holder:
            raise SpecReproError(f"{path}: missing coefficient '{where}'")
        values[where] = _non_negative(path, f"coefficient '{where}'", holder[key])
    sd_overhead = None
    by_method = doc.get("overhead_by_method") or {}
    if (overhead_of or drafter) in by_method:
        sd_overhead = _non_negative(path, f"'overhead_by_method.{overhead_of or drafter}'",
                                    by_method[overhead_of or drafter])
    # optional (the paper's form has none); the loop above made sure doc["eagle"] is a mapping
    d_tok = _non_negative(path, "coefficient 'eagle.d_tok'", doc["eagle"].get("d_tok", 0.0))
    o_tok = _non_negative(path, "coefficient 'overhead_per_token'", doc.get("overhead_per_token", 0.0))
    return CostModel(
        name=str(doc.get("name", path.stem)) + (f"/{drafter}" if drafter and "drafters" in doc else ""),
        c_kv=values["target.c_kv"],
        c_compute=values["target.c_compute"],
        c_fixed=values["target.c_fixed"],
        d_kv=values["eagle.d_kv"],
        d_spec=values["eagle.d_spec"],
        d_fixed=values["eagle.d_fixed"],
        ngram_fraction=values["ngram.draft_fraction"],
        overhead=values["overhead_per_step"],
        sd_overhead=sd_overhead,
        d_tok=d_tok,
        overhead_per_token=o_tok,
    )
