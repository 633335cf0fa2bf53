"""Prompts of the engine runs: a dataset (Hub snapshot or prompts file) → the paper's prompt per request.

Construction follows the paper's setup (``paper-notes.md``, "Datasets"): one template per workload,
the target's chat template on top, ``random.Random(seed).sample`` of the eligible records.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from .io import SpecReproError, read_parquet

#: ShareGPT prompts outside this token range are dropped (the paper's filter).
SHAREGPT_TOKENS = (4, 1024)


def _instructcoder(r: Mapping[str, Any]) -> str | None:
    if not r.get("instruction"):
        return None
    body = f"{r.get('input') or ''}\n\n{r['instruction']}".strip()
    return f"{body}\n\nOutput only the complete edited code, nothing else."


def _cnn(r: Mapping[str, Any]) -> str | None:
    if not r.get("article"):
        return None
    return (
        "Summarize the following news article in a few sentences. Reuse the article's own wording where "
        f"possible.\n\n{r['article']}"
    )


def _sharegpt(r: Mapping[str, Any]) -> str | None:
    conv = r.get("conversations") or []
    if len(conv) < 2 or conv[0].get("from") != "human" or not conv[0].get("value"):
        return None
    return conv[0]["value"]


def _gsm8k(r: Mapping[str, Any]) -> str | None:
    return r.get("question") or None


def _aime(r: Mapping[str, Any]) -> str | None:
    p = r.get("problem")
    return f"{p}\n\nPut your final answer within \\boxed{{}}." if p else None


def _gpqa(r: Mapping[str, Any], rng: random.Random) -> str | None:
    q = r.get("Question")
    if not q:
        return None
    choices = [r["Correct Answer"], r["Incorrect Answer 1"], r["Incorrect Answer 2"], r["Incorrect Answer 3"]]
    rng.shuffle(choices)
    lines = "\n".join(f"{'ABCD'[i]}) {str(c).strip()}" for i, c in enumerate(choices))
    return f"{q.strip()}\n\n{lines}\n\nAnswer with the letter of the correct choice."


def _raw(r: Mapping[str, Any]) -> str | None:
    """A prompts file of ready prompts: the record's ``prompt`` (or ``text``) field as is."""
    return r.get("prompt") or r.get("text") or None


TEMPLATES: dict[str, Callable[..., str | None]] = {
    "raw": _raw,
    "instructcoder": _instructcoder, "cnn": _cnn, "sharegpt": _sharegpt, "gsm8k": _gsm8k,
    "aime": _aime, "gpqa": _gpqa,
}


def _read_any(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        return pd.read_parquet(path).to_dict("records")
    if path.suffix == ".csv":
        return pd.read_csv(path).to_dict("records")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        return data if isinstance(data, list) else data.get("data", [])
    raise SpecReproError(f"{path}: unsupported dataset file type")


def dataset_files(manifest: Mapping[str, Any]) -> list[Path]:
    """The data files of a dataset manifest: the named file, else the split's files (subset folder first)."""
    root = Path(manifest["path"])
    files = sorted(manifest.get("files") or {})
    if manifest.get("source") == "file" or manifest.get("file"):
        names = [manifest["file"]] if manifest.get("file") else files
        return [root / n for n in names]
    data = [f for f in files if Path(f).suffix in (".parquet", ".json", ".jsonl", ".csv")]
    subset, split = manifest.get("subset"), manifest.get("split") or "train"
    if subset:
        data = [f for f in data if subset in Path(f).parts or Path(f).name.startswith(str(subset))] or data
    picked = [f for f in data if split in Path(f).name or split in Path(f).parts]
    if not picked:
        raise SpecReproError(
            f"dataset {manifest.get('name')}: no {split!r} data file (parquet/json/jsonl/csv) in {root}"
            f" (subset {subset!r}); files: {', '.join(files[:8]) or 'none'}"
        )
    return [root / f for f in picked]


def read_records(manifest: Mapping[str, Any]) -> list[dict]:
    out: list[dict] = []
    for f in dataset_files(manifest):
        if not f.is_file():
            raise SpecReproError(f"dataset {manifest.get('name')}: {f} is missing (rerun its download)")
        out += _read_any(f)
    return out


def build_prompts(
    records: Sequence[Mapping[str, Any]], template: str, *, num_samples: int, seed: int,
    tokenize: Callable[[str], list[int]], max_prompt_tokens: int | None = None,
) -> pd.DataFrame:
    """Eligible records → ``num_samples`` prompts (seeded sample, file order kept): request_id, text, token ids."""
    if template not in TEMPLATES:
        raise SpecReproError(f"unknown prompt template {template!r}; known: {', '.join(TEMPLATES)}")
    fn = TEMPLATES[template]
    rows = []
    for i, r in enumerate(records):
        text = fn(r, random.Random(f"{seed}:{i}")) if template == "gpqa" else fn(r)
        if not text:
            continue
        ids = tokenize(text)
        lo, hi = SHAREGPT_TOKENS if template == "sharegpt" else (1, None)
        if len(ids) < lo or (hi and len(ids) > hi) or (max_prompt_tokens and len(ids) > max_prompt_tokens):
            continue
        rid = str(r.get("id", i))
        rows.append({"request_id": rid, "source_index": i, "prompt_text": text, "prompt_token_ids": ids})
    if not rows:
        raise SpecReproError(f"no eligible {template} prompts in {len(records)} records")
    if len(rows) > num_samples:
        picked = sorted(random.Random(seed).sample(range(len(rows)), num_samples))
        rows = [rows[i] for i in picked]
    df = pd.DataFrame(rows)
    df.insert(0, "request_index", range(len(df)))
    return df


def chat_tokenizer(model_dir: str, thinking: bool | None = None) -> Callable[[str], list[int]]:
    """user text → token ids of the chat-templated prompt (generation prompt added), as the paper's runs."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    kwargs = {} if thinking is None else {"enable_thinking": bool(thinking)}

    def encode(text: str) -> list[int]:
        msgs = [{"role": "user", "content": text}]
        if tok.chat_template:
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, **kwargs)
            if isinstance(ids, Mapping) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            return [int(t) for t in ids]
        return [int(t) for t in tok(text)["input_ids"]]

    return encode


def read_prompt_tables(paths: Sequence[str]) -> dict[str, pd.DataFrame]:
    """Prompt tables (``engine-prompts`` outputs) by their dataset; an empty table is an error."""
    out = {}
    for p in paths:
        t = read_parquet(p)
        if t.empty:
            raise SpecReproError(f"{p}: no prompts")
        out[str(t["dataset"].iloc[0])] = t
    return out
