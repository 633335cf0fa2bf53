"""Issue 21 item 3: the Llama-3.1-8B EAGLE-3 head served with max_position_embeddings raised to the target's
context (engine.run.llm.raised_positions, core.hub.config_view), hand-computed cases."""
from __future__ import annotations

import json

import pytest

from specrepro.core.errors import SpecReproError
from specrepro.core.hub import config_view
from specrepro.engine.run.llm import raised_positions

LLAMA31 = {"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}


def test_raised_positions():
    head = {"max_position_embeddings": 2048}
    assert raised_positions(head, LLAMA31, 8192) == 8192          # the job's max_model_len
    assert raised_positions(head, LLAMA31, None) == 131072        # else the target's own positions
    assert raised_positions(head, LLAMA31, 2048) is None          # the head already covers the context
    assert raised_positions(head, LLAMA31, 1024) is None
    with pytest.raises(SpecReproError, match="yarn"):  # a rope whose angles depend on the field is not raised
        raised_positions({**head, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, LLAMA31, 8192)
    with pytest.raises(SpecReproError, match="max_model_len"):  # a stretched target's context needs max_model_len
        raised_positions(head, {"rope_scaling": {"rope_type": "yarn"}}, None)


def test_config_view_changes_one_field(tmp_path):
    src = tmp_path / "head"
    src.mkdir()
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "max_position_embeddings": 2048, "hidden_size": 4096}
    (src / "config.json").write_text(json.dumps(cfg))
    (src / "model.safetensors").write_bytes(b"weights")
    view = config_view(src, {"max_position_embeddings": 8192}, tmp_path / "view")
    assert json.loads((view / "config.json").read_text()) == {**cfg, "max_position_embeddings": 8192}
    assert (view / "model.safetensors").is_symlink()
    assert (view / "model.safetensors").resolve() == (src / "model.safetensors").resolve()
    assert json.loads((src / "config.json").read_text()) == cfg  # the head itself untouched
    assert config_view(src, {"max_position_embeddings": 8192}, tmp_path / "view") == view  # made again
