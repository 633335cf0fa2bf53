"""Damaged results are found, moved aside and rebuilt; readers refuse them, so nothing plots them."""

import json
import shutil

import pandas as pd
import pytest

from _infra import REPO, snakemake
from specrepro.core import integrity
from specrepro.core.io import SpecReproError, read_json, read_parquet, write_json, write_parquet


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    write_parquet(root / "traces" / "t.parquet", pd.DataFrame({"a": range(100), "b": [0.5] * 100}))
    write_json(root / "metrics" / "m.json", {"x": 1.0})
    return root


def test_complete_files_pass(results):
    assert integrity.scan([results]) == []


@pytest.mark.parametrize("damage", ["truncate", "empty", "garbage"])
def test_damaged_parquet_is_found_and_refused(results, damage):
    p = results / "traces" / "t.parquet"
    data = p.read_bytes()
    p.write_bytes({"truncate": data[: len(data) // 2], "empty": b"", "garbage": b"PAR1" + b"x" * 40 + b"PAR1"}[damage])
    [(path, why)] = integrity.scan([results])
    assert path == p and why
    with pytest.raises(SpecReproError, match="unreadable Parquet file"):
        read_parquet(p)


def test_damaged_json_is_found_and_refused(results):
    p = results / "metrics" / "m.json"
    p.write_text('{"x": 1.')
    assert [q for q, _ in integrity.scan([results])] == [p]
    with pytest.raises(SpecReproError, match="not valid JSON"):
        read_json(p)


def test_quarantine_moves_aside(results):
    p = results / "metrics" / "m.json"
    p.write_text("")
    lines = integrity.quarantine(integrity.scan([results]))
    assert lines == [f"damaged output {p}: empty; moved to m.json.damaged, it will be rebuilt"]
    assert not p.exists() and (results / "metrics" / "m.json.damaged").exists()


def test_workflow_rebuilds_a_truncated_table(tmp_path):
    """A truncated trace table in a finished CPU run: the next run moves it aside and rebuilds it (and what reads it)."""
    work = tmp_path / "w"
    work.mkdir()
    args = ("--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "--configfile",
            str(REPO / "config" / "cpu.yaml"), "--cores", "1")
    target = "results/traces/h100-llama3.1-8b/gsm8k.positions.parquet"
    proc = snakemake(*args, target)
    assert proc.returncode == 0, proc.stderr[-2000:]
    good = (work / target).read_bytes()
    (work / target).write_bytes(good[:100])
    dry = snakemake(*args, "-n", target)
    assert dry.returncode == 0
    assert f"damaged output {target}: " in dry.stderr and "trace_tables" in dry.stdout
    proc = snakemake(*args, target)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (work / target).read_bytes() == good


def test_atomic_dir_replaces_only_on_success(tmp_path):
    from specrepro.core.io import atomic_dir

    final = tmp_path / "model"
    final.mkdir()
    (final / "old").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_dir(final) as tmp:
            (tmp / "new").write_text("new")
            raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"] and (final / "old").exists()
    with atomic_dir(final) as tmp:
        (tmp / "new").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"] and sorted(p.name for p in final.iterdir()) == ["new"]
