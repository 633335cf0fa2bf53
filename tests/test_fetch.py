"""Verified inputs: local copy, download (file:// URL, same code path as https), checksum and offline errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specrepro.core.fetch import fetch_verified, resolve_source
from specrepro.core.io import SpecReproError, sha256_file

from conftest import REPO, released_trace

GSM8K_SHA = "6d6bfb9993f4a540ff73cb330bdd4348dc3e6a6c77a111d3e35b96caf83c26f1"


def test_local_copy_is_verified_and_recorded(tmp_path):
    src = released_trace("gsm8k")
    out = tmp_path / "out" / "gsm8k.jsonl"
    prov = tmp_path / "out" / "gsm8k.source.json"
    got = fetch_verified("https://example.invalid/x.jsonl", GSM8K_SHA, out, src.parent, src.name, provenance=prov)
    assert got.kind == "local"
    assert sha256_file(out) == GSM8K_SHA
    rec = json.loads(prov.read_text())
    assert rec["source"] == "local" and rec["sha256"] == GSM8K_SHA and rec["file"] == src.name


def test_download_path_verifies(tmp_path):
    src = released_trace("gsm8k")
    out = tmp_path / "gsm8k.jsonl"
    got = fetch_verified(src.as_uri(), GSM8K_SHA, out, local_dir=None)
    assert got.kind == "download"
    assert sha256_file(out) == GSM8K_SHA


def test_checksum_mismatch_leaves_nothing(tmp_path):
    src = released_trace("gsm8k")
    bad = tmp_path / "copy"
    bad.mkdir()
    lines = src.read_text().splitlines(keepends=True)
    lines[41] = lines[41][: len(lines[41]) // 2] + "\n"  # truncate line 42
    (bad / src.name).write_text("".join(lines))
    out = tmp_path / "out" / "gsm8k.jsonl"
    cmd = [sys.executable, "-m", "specrepro", "fetch-trace", "--url", "https://example.invalid/x", "--sha256", GSM8K_SHA,
           "--filename", src.name, "--local-dir", str(bad), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    msg = proc.stderr.strip()
    assert "\n" not in msg
    assert "SHA-256 mismatch" in msg and "first problem: line:42: not valid JSON" in msg
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # no temporary file left behind


def test_missing_file_in_local_dir_is_an_error(tmp_path):
    with pytest.raises(SpecReproError, match="trace file not found in traces_dir"):
        resolve_source("https://example.invalid/x", tmp_path, "combined_cnn.jsonl", offline=False)


def test_absent_local_dir_falls_back_to_download_unless_offline(tmp_path):
    missing = tmp_path / "nope"
    assert resolve_source("https://e.invalid/x", missing, "f.jsonl", offline=False).kind == "download"
    with pytest.raises(SpecReproError, match="offline mode forbids downloading"):
        resolve_source("https://e.invalid/x", missing, "f.jsonl", offline=True)
    with pytest.raises(SpecReproError, match="offline mode forbids downloading"):
        resolve_source("https://e.invalid/x", None, "f.jsonl", offline=True)


def test_unreachable_url_is_one_line(tmp_path):
    with pytest.raises(SpecReproError, match=r"download of .* failed") as exc:
        fetch_verified((tmp_path / "absent.jsonl").as_uri(), GSM8K_SHA, tmp_path / "o.jsonl")
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "o.jsonl").exists()
