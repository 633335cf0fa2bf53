"""Run ONE vLLM engine (CPU) with the plugin's draft hook and print a JSON result; the tests call it as a subprocess.

    python tests/draft_engine.py '{"model": DIR, "prompts": [[ids...], ...], "max_tokens": 24, "batch_size": 1,
                                   "speculative_config": {...}, "plan": {...} | null}'

Each prompt runs ``batch_size`` times in one ``generate`` call. Prints one line
``RESULT {"outputs": [...], "counters": {...}, "drafts": [...], "steps": [...], "summary": {...}}``: the greedy
outputs, vLLM's spec-decode counters (``jobspec.counters.read_counters``), the hook's per-request draft records
and the instrumentation's ``accept`` step records.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path


def main(spec: dict) -> dict:
    work = Path(tempfile.mkdtemp(prefix="specrepro-draft-"))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ["SPECREPRO_INSTRUMENT"] = "accept"
    os.environ["SPECREPRO_INSTRUMENT_DIR"] = str(work)
    if spec.get("plan"):
        (work / "plan.json").write_text(json.dumps(spec["plan"]))
        os.environ["SPECREPRO_DRAFT"] = str(work / "plan.json")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from specrepro.engine.run.drafts import rpc_draft_summary
    from specrepro.jobspec.counters import read_counters

    llm = LLM(model=spec["model"], enforce_eager=True, dtype="float32", gpu_memory_utilization=0.3,
              disable_log_stats=False, max_model_len=1024, seed=0, async_scheduling=False,
              speculative_config=spec.get("speculative_config"))
    sp = SamplingParams(temperature=0.0, max_tokens=spec.get("max_tokens", 24), ignore_eos=True)
    B = int(spec.get("batch_size", 1))
    prompts = [TokensPrompt(prompt_token_ids=p) for p in spec["prompts"] for _ in range(B)]
    outs = llm.generate(prompts, sp, use_tqdm=False)
    summary = llm.collective_rpc(rpc_draft_summary)[0]
    read = lambda name: [json.loads(x) for x in (work / name).read_text().splitlines()] if (work / name).exists() else []  # noqa: E731
    return {"outputs": [list(o.outputs[0].token_ids) for o in outs], "counters": read_counters(llm.get_metrics()),
            "drafts": read("drafts.jsonl"), "steps": read("steps.jsonl"), "summary": summary}


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]))
    print("RESULT " + json.dumps(result), flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip slow engine teardown
