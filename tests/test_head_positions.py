"""Issue 15 item 3: the positions past the EAGLE-3 head's 2048, from the released traces, and what each engine job
of a config does there (figure tab_head_positions)."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import yaml

from conftest import REPO, released_trace
from specrepro import cli
from specrepro.config import validate_schema
from specrepro.figures.head_positions import dataset_rows, engine_rows, positions_past
from specrepro.core.io import write_json, write_parquet
from specrepro.core.traces import load_tables


def _paper():
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    validate_schema(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    return cfg


def test_positions_past_a_limit_by_hand():
    req = pd.DataFrame({"dataset": "d", "request_id": ["a", "b", "c", "d"], "prompt_len": [10, 90, 100, 120],
                        "output_len": [50, 20, 5, 7]})
    got = positions_past(req, 100)
    # a: context 10..59, none; b: 90..109 -> 100..109 = 10; c: prompt already at 100 -> all 5; d: prompt over -> 7
    assert list(got["past"]) == [0, 10, 5, 7] and list(got["reaches"]) == [False, True, True, True]
    assert list(got["prompt_over"]) == [False, False, True, True]


def test_released_traces_counted_as_from_the_jsonl():
    """InstructCoder and CNN/DM: the table's counts equal a direct count over the released JSONL, and the EAGLE
    acceptance before / past 2048 is the mean over the crossing requests' positions."""
    for ds in ("instructcoder", "cnn"):
        path = released_trace(ds)
        requests, positions = load_tables(path, ds)
        (row,) = dataset_rows(requests, positions, 2048).to_dict("records")
        past = reach = over = total = 0
        before, after = [], []
        for line in path.read_text().splitlines():
            r = json.loads(line)
            p, g = len(r["prompt_token_ids"]), len(r["generated_token_ids"])
            n = sum(1 for i in range(g) if p + i >= 2048)
            past, reach, over, total = past + n, reach + (n > 0), over + (p >= 2048), total + g
            if n:
                for i, a in enumerate(r["acc_eagle"]["acc_len"]):
                    (after if p + i >= 2048 else before).append(a)
        assert (row["positions"], row["positions_past"], row["requests_reaching"], row["prompts_over"]) == (
            total, past, reach, over)
        assert row["eagle_acc_before"] == pytest.approx(sum(before) / len(before))
        assert row["eagle_acc_past"] == pytest.approx(sum(after) / len(after))
    # what the report states: a quarter of InstructCoder's positions (6 runaway requests), 4.6 % of CNN/DM's
    assert (row["dataset"], row["positions_past"], row["requests_reaching"]) == ("cnn", 4431, 15)


def test_engine_jobs_and_their_handling():
    cfg = _paper()
    t = engine_rows(cfg).set_index(["exp", "config"])
    raised = "raised: head served with the target's context"  # engine.run.llm.served_drafter, on every engine
    assert t.loc[("llama3.1-8b", "eagle3-k3"), "handling"] == raised
    assert t.loc[("llama3.1-8b", "eagle3-k3"), "engine"] == "vLLM 0.10.1.1"
    assert pd.isna(t.loc[("llama3.1-8b", "eagle3-k3"), "max_model_len"])  # uncapped since issue 21
    assert t.loc[("llama3.1-8b-today", "eagle3-k10-bs"), "handling"] == raised
    assert len(t) == 3  # the EAGLE-1 and AngelSlim heads declare no max_position_embeddings
    old = copy.deepcopy(cfg)  # the head served with its own 2048 positions
    old["models"]["llama3.1-8b"]["drafters"]["eagle3"].pop("raise_max_position_embeddings")
    t = engine_rows(old).set_index(["exp", "config"])
    assert t.loc[("llama3.1-8b", "eagle3-k3"), "handling"].startswith("NOT HANDLED")
    assert t.loc[("llama3.1-8b-today", "eagle3-k10-bs"), "handling"] == "raised by the engine"
    old["experiments"][0]["engine_settings"] = {"max_model_len": 2048}
    assert engine_rows(old).set_index(["exp", "config"]).loc[("llama3.1-8b", "eagle3-k3"), "handling"] == \
        "capped: max_model_len 2048"


def test_table_builds(tmp_path):
    cfg = _paper()
    cfg["trace_sets"] = {"h100-llama3.1-8b": {"label": "released", "datasets": ["cnn"],
                                             "proposers": [["ngram", "n-gram"], ["eagle", "EAGLE"]]}}
    write_json(tmp_path / "rc.json", cfg)
    requests, positions = load_tables(released_trace("cnn"), "cnn")
    write_parquet(tmp_path / "r.parquet", requests)
    write_parquet(tmp_path / "p.parquet", positions)
    out = tmp_path / "t.tex"
    assert cli.main(["figure", "tab_head_positions", "--run-config", str(tmp_path / "rc.json"), "--subject",
                     "h100-llama3.1-8b", "--requests", str(tmp_path / "r.parquet"), "--positions",
                     str(tmp_path / "p.parquet"), "--csv", str(tmp_path / "t.csv"), "-o", str(out)]) == 0
    tex = out.read_text()
    assert r"CNN/DailyMail & 96,856 & 4,431 & 4.6\% & 300 & 15 & 3 & 3.43 / 2.82 \\" in tex
    assert r"llama3.1-8b & eagle3-k3 & vLLM 0.10.1.1 & 2048 & -- & 8192 & raised: head served with the target's context \\" in tex


def test_head_positions_finding_by_hand(tmp_path):
    """The section's finding reads the figure's CSV: before / past M per crossing dataset, the ones none cross."""
    from specrepro.figures.head_positions_figure import finding

    csv = tmp_path / "fig_head_positions-x.csv"
    pd.DataFrame([
        {"dataset": "ic", "label": "InstructCoder", "limit": 2048, "requests": 4, "positions": 400, "positions_past": 100,
         "share_past": 0.25, "requests_reaching": 1, "prompts_over": 0, "eagle_acc_before": 4.5, "eagle_acc_past": 2.0},
        {"dataset": "g", "label": "GSM8K", "limit": 2048, "requests": 2, "positions": 50, "positions_past": 0,
         "share_past": 0.0, "requests_reaching": 0, "prompts_over": 0, "eagle_acc_before": None, "eagle_acc_past": None},
    ]).to_csv(csv, index=False)
    text = finding(csv)
    assert "position 2048" in text and "InstructCoder 4.50 to 2.00 (25.0 % of its output positions" in text
    assert "no GSM8K request crosses it" in text
