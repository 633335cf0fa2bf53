"""Hub inputs: a fake Hugging Face cache, a local stand-in Hub that refuses a token, manifests."""

import hashlib
import http.server
import json
import os
import threading

import pytest

from _infra import REPO
from specrepro.core import hub
from specrepro.core.io import SpecReproError

REV = "0123456789abcdef0123456789abcdef01234567"
CONFIG = b'{"architectures": ["LlamaForCausalLM"]}\n'
WEIGHTS = b"\x00\x01 not really safetensors" * 100


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def fake_cache(root, repo="org/tiny", rev=REV, kind="models", files=None):
    """The layout huggingface_hub writes: blobs named by etag, snapshot links, refs/main."""
    files = files or {"config.json": (CONFIG, git_sha1(CONFIG)), "model.safetensors": (WEIGHTS, hashlib.sha256(WEIGHTS).hexdigest())}
    base = root / f"{kind}--{repo.replace('/', '--')}"
    (base / "blobs").mkdir(parents=True)
    snap = base / "snapshots" / rev
    snap.mkdir(parents=True)
    for rel, (data, etag) in files.items():
        (base / "blobs" / etag).write_bytes(data)
        (snap / rel).parent.mkdir(parents=True, exist_ok=True)
        (snap / rel).symlink_to(os.path.relpath(base / "blobs" / etag, (snap / rel).parent))
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(rev)
    return snap


def test_offline_hit_writes_the_manifest(tmp_path):
    snap = fake_cache(tmp_path / "hub")
    out = tmp_path / "resources/models/tiny/manifest.json"
    m = hub.fetch_model("tiny", {"repo": "org/tiny", "revision": REV}, str(tmp_path / "hub"), str(out), offline=True)
    assert json.loads(out.read_text()) == m
    assert m["source"] == "hf" and m["repo"] == "org/tiny" and m["revision"] == REV and m["path"] == str(snap)
    assert m["files"] == {"config.json": hashlib.sha256(CONFIG).hexdigest(),
                          "model.safetensors": hashlib.sha256(WEIGHTS).hexdigest()}
    assert m["bytes"] == len(CONFIG) + len(WEIGHTS) and m["kind"] == "model"


def test_unpinned_revision_resolves_and_is_recorded(tmp_path):
    fake_cache(tmp_path / "hub")
    m = hub.fetch_model("t/drafters/eagle", {"repo": "org/tiny", "revision": None}, str(tmp_path / "hub"),
                        str(tmp_path / "m.json"), offline=True)
    assert m["revision"] == REV and m["requested_revision"] is None and m["kind"] == "drafter"


def test_offline_miss_is_one_line_and_never_downloads(tmp_path, monkeypatch):
    fake_cache(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SpecReproError) as err:
        hub.fetch_model("tiny", {"repo": "org/tiny", "revision": "f" * 40}, str(tmp_path / "hub"),
                        str(tmp_path / "m.json"), offline=True)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"model tiny: offline and org/tiny@{'f' * 40} is not (completely) in the cache")
    assert not (tmp_path / "m.json").exists()


def test_damaged_cache_file_stops(tmp_path):
    snap = fake_cache(tmp_path / "hub")
    (snap / "model.safetensors").resolve().write_bytes(WEIGHTS[:-10])  # truncated download
    with pytest.raises(SpecReproError, match=r"model.safetensors: content does not match .* delete .* and rerun"):
        hub.fetch_model("tiny", {"repo": "org/tiny", "revision": REV}, str(tmp_path / "hub"),
                        str(tmp_path / "m.json"), offline=True)


def test_gated_without_token_stops_before_any_request(tmp_path):
    def no_network(*a, **k):
        raise AssertionError("the Hub was contacted")

    with pytest.raises(SpecReproError) as err:
        hub.fetch_model("llama3.1-8b", {"repo": "meta-llama/Llama-3.1-8B-Instruct", "revision": REV, "gated": True},
                        str(tmp_path), str(tmp_path / "m.json"), token=None, download=no_network)
    assert str(err.value) == (
        "model llama3.1-8b: meta-llama/Llama-3.1-8B-Instruct is gated and no token is set: accept its licence on "
        "huggingface.co, create a token at https://huggingface.co/settings/tokens and export HF_TOKEN"
    )


class _GatedHub(http.server.BaseHTTPRequestHandler):
    """Answers every request the way the Hub answers a token without access to a gated repository."""

    def _refuse(self):
        body = b'{"error": "Access to model meta-llama/Llama-3.1-8B-Instruct is restricted."}'
        self.send_response(403)
        self.send_header("X-Error-Code", "GatedRepo")
        self.send_header("X-Error-Message", "Access to model meta-llama/Llama-3.1-8B-Instruct is restricted.")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = _refuse

    def log_message(self, *args):
        pass


def test_rejected_token_is_one_line(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GatedHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(SpecReproError) as err:
            hub.fetch_model("llama3.1-8b", {"repo": "meta-llama/Llama-3.1-8B-Instruct", "revision": REV, "gated": True},
                            str(tmp_path), str(tmp_path / "m.json"), token="hf_not_granted",
                            endpoint=f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("model llama3.1-8b: the Hub rejected the token for gated repository meta-llama/Llama-3.1-8B-Instruct")


def test_dataset_manifests_and_run_manifest(tmp_path):
    data = b"question,answer\n1+1,2\n"
    fake_cache(tmp_path / "hub", repo="openai/gsm8k", kind="datasets",
               files={"main/train-00000-of-00001.parquet": (data, hashlib.sha256(data).hexdigest())})
    src = {"hf": {"repo": "openai/gsm8k", "revision": REV, "subset": "main", "split": "train"}}
    d = hub.fetch_dataset("gsm8k", src, str(tmp_path / "hub"), str(tmp_path / "gsm8k.json"), offline=True,
                          sampling={"num_samples": 500, "seed": 42})
    assert d["revision"] == REV and d["split"] == "train" and d["seed"] == 42 and d["num_samples"] == 500
    prompts = tmp_path / "config/prompts/cnn.jsonl"
    prompts.parent.mkdir(parents=True)
    prompts.write_text('{"id": 0, "prompt": "hi"}\n')
    p = hub.fetch_dataset("cnn", {"prompts_file": "config/prompts/cnn.jsonl"}, "unused", str(tmp_path / "cnn.json"),
                          repo_root=str(tmp_path))
    assert p["source"] == "file" and p["files"] == {"cnn.jsonl": hashlib.sha256(prompts.read_bytes()).hexdigest()}
    trace = tmp_path / "cnn.source.json"
    trace.write_text(json.dumps({"file": "combined_cnn.jsonl", "source": "local", "location": "/x/combined_cnn.jsonl",
                                 "url": "https://example/combined_cnn.jsonl", "sha256": "a" * 64}))
    run = hub.run_manifest([trace, tmp_path / "gsm8k.json", tmp_path / "cnn.json"])["inputs"]
    assert [(e["kind"], e["name"]) for e in run] == [("dataset", "cnn"), ("dataset", "gsm8k"), ("trace", "combined_cnn.jsonl")]
    assert run[1]["sha256"] == hub.tree_digest(d["files"]) and run[1]["revision"] == REV
    assert run[2]["sha256"] == "a" * 64 and run[2]["location"] == "/x/combined_cnn.jsonl"


def test_input_rules_cover_every_paper_model():
    """Each target and drafter the paper's experiments use has a pinned (or recorded) revision and a size."""
    import yaml

    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    for name, m in cfg["models"].items():
        for src in [m["source"]] + [d["source"] for d in (m.get("drafters") or {}).values() if "source" in d]:
            assert "size_gb" in src["hf"], name
