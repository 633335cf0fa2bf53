"""The claims registry and its evaluation against measured metrics."""

from __future__ import annotations

import math

import pytest
import yaml

from specrepro.claims import NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, evaluate, load_claims, load_metrics
from specrepro.io import SpecReproError, write_json

from conftest import REPO

REGISTRY = REPO / "paper" / "claims.yaml"


def test_registry_loads_and_is_consistent():
    claims = load_claims(REGISTRY)
    assert len(claims) > 100
    ids = [c.id for c in claims]
    assert len(ids) == len(set(ids))
    by_id = {c.id: c for c in claims}
    # spot checks against the paper's values (reference/paper-notes.md)
    assert by_id["F12-instructcoder-combined-b1"].value == 4.90
    assert by_id["F1-llama3.1-8b-gsm8k-eagle-k3-b128"].value == 1.21
    assert by_id["M-qwen3-draft-kv"].value == 1.77
    for c in claims:
        assert c.source and c.unit and c.tolerance(c.value) > 0


def write_registry(tmp_path, entries):
    p = tmp_path / "claims.yaml"
    p.write_text(yaml.safe_dump({"claims": entries}))
    return p


BASE = {"group": "g", "statement": "s", "unit": "x", "source": "Fig. 1"}


def test_statuses(tmp_path):
    reg = write_registry(tmp_path, [
        {**BASE, "id": "a", "value": 2.0, "tolerance": {"abs": 0.1}, "evidence": "trace", "measured_by": "m.a"},
        {**BASE, "id": "b", "value": 2.0, "tolerance": {"rel": 0.05}, "evidence": "trace", "measured_by": "m.b"},
        {**BASE, "id": "c", "value": 1.5, "tolerance": {"abs": 0.1}, "evidence": "engine", "measured_by": "m.c"},
        {**BASE, "id": "d", "value": 1.5, "tolerance": {"abs": 0.1}, "evidence": "simulator", "measured_by": "m.missing"},
        {**BASE, "id": "e", "value": 1.0, "tolerance": {"abs": 0.1}, "evidence": "none"},
    ])
    metrics = {"m.a": 2.1, "m.b": 2.2, "m.c": 1.5}
    cpu = evaluate(load_claims(reg), metrics, "cpu").set_index("id")
    assert cpu.loc["a", "status"] == REPRODUCED  # |2.1 - 2.0| = 0.1 is within the tolerance
    assert cpu.loc["b", "status"] == NOT_REPRODUCED  # 10% off, 5% allowed
    assert cpu.loc["c", "status"] == NOT_MEASURED  # a CPU run never decides an engine claim
    assert math.isnan(cpu.loc["c", "this_run"])
    assert cpu.loc["d", "status"] == NOT_MEASURED
    assert cpu.loc["e", "status"] == NOT_MEASURED
    gpu = evaluate(load_claims(reg), metrics, "gpu").set_index("id")
    assert gpu.loc["c", "status"] == REPRODUCED
    assert cpu.loc["b", "tolerance"] == "±5%"


@pytest.mark.parametrize("entry, message", [
    ({**BASE, "id": "a", "value": 2.0, "tolerance": {"abs": 0.1}, "evidence": "trace"}, "needs 'measured_by'"),
    ({**BASE, "id": "a", "value": "2", "tolerance": {"abs": 0.1}, "evidence": "trace", "measured_by": "m"}, "value must be a number"),
    ({**BASE, "id": "a", "value": 2, "tolerance": {"pct": 1}, "evidence": "trace", "measured_by": "m"}, "tolerance must be"),
    ({**BASE, "id": "a", "value": 2, "tolerance": {"abs": 1}, "evidence": "guess", "measured_by": "m"}, "evidence 'guess'"),
])
def test_malformed_registry(tmp_path, entry, message):
    with pytest.raises(SpecReproError, match=message):
        load_claims(write_registry(tmp_path, [entry]))


def test_metric_defined_twice_is_an_error(tmp_path):
    write_json(tmp_path / "a.json", {"k": 1.0})
    write_json(tmp_path / "b.json", {"k": 2.0})
    with pytest.raises(SpecReproError, match="also defined"):
        load_metrics([tmp_path / "a.json", tmp_path / "b.json"])
