"""Drafters trained by the pipeline: the files they write are read by the trace code (whose rule is
checked against vLLM's counters) exactly as the training module computed them; split and config checks."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specrepro.config import config_problems
from specrepro.core.errors import SpecReproError
from specrepro.engine.models import drafters as D

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random Llama target, four sequences and its normed hidden states (teacher forced)."""
    torch = pytest.importorskip("torch")
    from specrepro.engine.models.standins import build_model
    from specrepro.engine.models.oracle import _Model, llama_forward

    out = tmp_path_factory.mktemp("tiny") / "target"
    build_model("tiny-llama", out, seed=0, corpus=[REPO / "config" / "prompts" / "cnn.jsonl"])
    rng = np.random.default_rng(0)
    V = _Model(out).config["vocab_size"]
    rows = []
    for i in range(4):
        rows.append({"request_id": f"r{i}", "workload": "w", "split": "heldout" if i == 3 else "train",
                     "prompt_token_ids": rng.integers(4, V, 7).tolist(), "output_token_ids": rng.integers(4, V, 12).tolist()})
    df = pd.DataFrame(rows)
    m = _Model(out)
    with torch.inference_mode():
        states = [llama_forward(m, s)[1].numpy() for s in D.sequences(df)]
    return out, df, states


def test_heldout_split_is_stratified_and_seeded():
    w = ["a"] * 5 + ["b"] * 10 + ["c"]
    s = D.heldout_split(w, 0.2, seed=3)
    assert s == D.heldout_split(w, 0.2, seed=3)
    assert [sum(1 for x, y in zip(w, s) if x == k and y == "heldout") for k in "abc"] == [1, 2, 0]


def _stages(fn, *args, **kw):
    """Run a trainer and keep the state of each stage (untrained, closed form, trained)."""
    out = {}
    rec = fn(*args, on_stage=lambda n, s: out.__setitem__(n, {k: v.detach().clone() for k, v in s.items()}), **kw)
    return out, rec


def test_eagle_head_file_drafts_what_the_training_module_computes(tiny, tmp_path):
    import torch

    from specrepro.engine.models.oracle import _EagleHead, _Model

    target, df, states = tiny
    st, rec = _stages(D.train_eagle, str(target), df, states, seed=0, epochs=1, lr=1e-3)
    assert rec["train_sequences"] == 3 and rec["epoch_loss"][0] > 0
    assert list(st) == list(D.STAGES)
    for a, b in (("untrained", "closed_form"), ("closed_form", "trained")):
        assert any(not torch.equal(st[a][k], st[b][k]) for k in st[b])
    _, w = D._load_target(str(target))
    _, EagleHead, _ = D._torch_modules()
    for stage in D.STAGES:
        D.write_eagle(tmp_path / stage, st[stage], str(target))
        mod = EagleHead(_Model(target).config, w["model.embed_tokens.weight"])
        mod.load_state_dict(st[stage], strict=True)
        head = _EagleHead(_Model(tmp_path / stage), _Model(target), eagle3=False)
        with torch.inference_mode():
            for i in range(len(df)):
                p = np.asarray(df["prompt_token_ids"][i])
                o = np.asarray(df["output_token_ids"][i])
                s, h = D.sequences(df)[i], torch.as_tensor(states[i])
                drafts = head.drafts(p, o, 1, hidden=h[:-1])[:, 0]
                f = mod(torch.as_tensor(s[1:])[None], h[:-1][None])[0]
                want = torch.nn.functional.linear(f, w["lm_head.weight"]).argmax(-1).numpy()[np.arange(len(o)) + len(p) - 2]
                assert np.array_equal(drafts, want)


def test_untrained_head_guesses_the_verified_token_again(tiny):
    """The untrained head passes the target's hidden state through: its first draft is the token the
    target just chose (what the held-out 'untrained' acceptance measures)."""
    import torch

    target, df, states = tiny
    head, cfg, w = D.eagle_init(str(target))
    s, h = D.sequences(df)[0], torch.as_tensor(states[0])
    with torch.inference_mode():
        f = head(torch.as_tensor(s[1:])[None], h[:-1][None])[0]
    assert torch.allclose(f, h[:-1], atol=1e-5)


def test_draft_model_file_computes_what_the_training_module_computes(tiny, tmp_path):
    import torch

    from specrepro.engine.models.oracle import _Model, llama_forward

    target, df, states = tiny
    st, rec = _stages(D.train_draft, str(target), df, states, layers=[1], seed=0, epochs=1, lr=1e-3)
    assert "target layers [1]" in rec["init"]
    _, w = D._load_target(str(target))
    _, _, Llama = D._torch_modules()
    s = D.sequences(df)[0]
    for stage in D.STAGES:
        D.write_draft(tmp_path / stage, st[stage], str(target), w["model.embed_tokens.weight"], w["lm_head.weight"])
        mod = Llama(_Model(target).config, w["model.embed_tokens.weight"], 1)
        mod.load_state_dict(st[stage], strict=True)
        with torch.inference_mode():
            logits, _, _ = llama_forward(_Model(tmp_path / stage), s)
            want = torch.nn.functional.linear(mod(torch.as_tensor(s)[None])[0], w["lm_head.weight"])
        assert torch.allclose(logits, want, atol=1e-4)


def test_target_states_are_the_trace_codes_hidden_states(tiny):
    """train-states (torch, batched, right-padded) gives the teacher-forced normed hidden states."""
    import torch

    from specrepro.engine.models.oracle import _Model, llama_forward

    target, df, states = tiny
    got, _ = D.target_states(str(target), D.sequences(df), dtype="float32", batch=3)
    assert np.allclose(got, np.concatenate(states), atol=1e-4)
    seqs = [D.sequences(df)[0][:n] for n in (5, 19, 11)]  # padded batches of unequal lengths
    got, _ = D.target_states(str(target), seqs, dtype="float32", batch=2)
    with torch.inference_mode():
        want = np.concatenate([llama_forward(_Model(target), q)[1].numpy() for q in seqs])
    assert np.allclose(got, want, atol=1e-4)


def test_bad_draft_layers_are_one_line(tiny):
    target, df, states = tiny
    with pytest.raises(Exception, match="each must be a layer of the target"):
        D.train_draft(str(target), df, states, layers=[7], seed=0, epochs=0, lr=1e-3)


def _cpu_config():
    import yaml

    return yaml.safe_load((REPO / "config" / "cpu.yaml").read_text())


def test_trained_drafters_need_train_data_and_matching_kind():
    cfg = _cpu_config()
    assert not [p for p in config_problems(cfg) if "train" in p]
    bad = copy.deepcopy(cfg)
    del bad["models"]["smollm2-135m"]["train_data"]
    assert any("has no train_data" in p for p in config_problems(bad))
    bad = copy.deepcopy(cfg)
    bad["models"]["smollm2-135m"]["drafters"]["eagle"]["source"]["train"]["kind"] = "draft_model"
    assert any(p.startswith("config error: models.smollm2-135m.drafters.eagle.source.train.kind") for p in config_problems(bad))
    bad = copy.deepcopy(cfg)
    bad["models"]["smollm2-135m"]["train_data"]["workload_datasets"]["code"] = "smol_cod"
    assert [p for p in config_problems(bad) if "workload_datasets" in p] == [
        'config error: models.smollm2-135m.train_data.workload_datasets.code = "smol_cod": no such dataset (datasets: '
        + ", ".join(cfg["datasets"]) + ")"]


def test_smollm2_engine_jobs_use_its_engine_settings():
    """Bench, profile and trace jobs of the SmolLM2 experiment run its own dtype and n-gram lookup."""
    from specrepro.config import validate_schema
    from specrepro.jobspec.jobs import bench_spec, trace_spec

    cfg = _cpu_config()
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    own = next(x for x in cfg["experiments"] if x["name"] == "smollm2")["engine_settings"]
    for spec in (bench_spec(cfg, "smollm2", "ngram-k3"), bench_spec(cfg, "smollm2", "ngram-k3", profile=True),
                 trace_spec(cfg, "smollm2", "ngram")):
        assert spec["engine"]["dtype"] == own["dtype"]
        assert spec["engine"]["ngram"] == own["ngram"]
    assert trace_spec(cfg, "smollm2", "ngram")["engine"]["env"]["OMP_NUM_THREADS"] == "1"  # engine.trace_env kept


@pytest.mark.parametrize("precision", D.PRECISIONS)
@pytest.mark.parametrize("kind", ["eagle", "draft_model"])
def test_training_lowers_the_loss(tiny, kind, precision):
    """The shared training loop (D._fit) fits both drafters in either precision: the mean loss falls from epoch to
    epoch, and the record says which precision trained it."""
    import torch

    out, df, states = tiny
    torch.manual_seed(0)
    if kind == "eagle":
        rec = D.train_eagle(str(out), df, states, seed=0, epochs=3, lr=3e-3, batch=2, precision=precision)
    else:
        rec = D.train_draft(str(out), df, states, layers=[0, 1], seed=0, epochs=3, lr=3e-3, batch=2,
                            precision=precision)
    loss = rec["epoch_loss"]
    assert len(loss) == 3 and loss[0] > loss[1] > loss[2], loss
    assert rec["precision"] == precision
    assert rec["train_sequences"] == 3 and rec["train_positions"] == 3 * 19


def test_heldout_acceptance_records_each_request(tiny, tmp_path):
    """The held-out record keeps each request's steps and tokens (the unit of tab_trends' interval over requests);
    pooled they give mean_step_length."""
    target, df, states = tiny
    module, _, _ = D.eagle_init(str(target))
    D.write_eagle(tmp_path / "head", module.state_dict(), str(target))
    rec = D.heldout_acceptance("eagle", tmp_path / "head", str(target), df, states)
    per = rec["per_request"]
    assert len(per) == rec["requests"] == 1  # one held-out row
    assert sum(r["tokens"] for r in per) / sum(r["steps"] for r in per) == pytest.approx(rec["mean_step_length"])
    # 12 output tokens, the first from the prefill: the walk covers the other 11 (its last step may overrun)
    assert 11 <= per[0]["tokens"] <= 11 + D.EVAL_K


def test_unknown_training_precision_is_one_line(tiny):
    out, df, states = tiny
    with pytest.raises(SpecReproError, match="training precision 'fp8': use one of float32, bfloat16"):
        D.train_draft(str(out), df, states, layers=[0], seed=0, epochs=1, lr=1e-3, precision="fp8")
