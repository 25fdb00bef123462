"""What the scheduler reports after each step (scheduler -> output processor)."""

from __future__ import annotations

import enum

import msgspec

from actorllm.core.model_runner_output import TokenLogprobs
from actorllm.core.pooling_params import PooledData
from actorllm.core.routed_experts import RoutedExperts


class FinishReason(enum.StrEnum):
    """Why a request finished; the string is OpenAI's ``finish_reason``."""

    STOP = "stop"  # EOS, a stop token id or a stop string
    LENGTH = "length"  # max_tokens or max_model_len
    ABORT = "abort"  # the caller went away or asked to abort
    ERROR = "error"  # the engine failed this request (e.g. a poison request)
    REPETITION = "repetition"  # the output repeats an N-gram (repetition_detection, vLLM's)


class EngineCoreOutput(msgspec.Struct, frozen=True, kw_only=True):
    req_id: str
    # Tokens accepted this step: 0 or 1, or with speculative decoding up to k + 1.
    new_token_ids: list[int]
    new_logprobs: list[TokenLogprobs] | None = None
    new_prompt_logprobs: list[TokenLogprobs] | None = None
    # --return-sampling-mask: one list of surviving token ids per new token.
    new_sampling_mask: list[list[int]] | None = None
    finish_reason: FinishReason | None = None
    # The stop token id that ended the request (a stop *string* is found downstream).
    stop_reason: int | str | None = None
    # Prompt tokens served from the prefix cache or the KV connector (first output only).
    num_cached_tokens: int = 0
    # Prompt tokens this request computed and wrote to the prefix cache: those in its full
    # hashed blocks minus the ones it found there (first output only; vLLM's
    # ``PrefillStats.num_cache_creation_tokens``).
    num_cache_creation_tokens: int = 0
    # When the request was first scheduled (time.monotonic(); first output only): metrics.
    scheduled_time: float | None = None
    # Times the request was preempted so far, on its first output after a preemption (0:
    # unchanged since its last output): vLLM's request_num_preemptions.
    num_preemptions: int = 0
    # A pooling request's result (its only output, which finishes it).
    pooled: PooledData | None = None
    # --enable-return-routed-experts: a finished request's routed experts (final output only).
    routed_experts: RoutedExperts | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class SchedulerStats(msgspec.Struct, kw_only=True):
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    # Of those waiting, the ones deferred by a transient constraint rather than waiting for
    # capacity (vLLM's num_requests_waiting_by_reason{reason="deferred"}): grammar still
    # compiling, or passed over by the last admission pass (tokens in flight, preempted in
    # that step, max_loras).
    num_deferred_reqs: int = 0
    kv_cache_usage: float = 0.0  # fraction of non-null blocks in use, 0..1
    prefix_cache_queries: int = 0  # cumulative tokens looked up
    prefix_cache_hits: int = 0  # cumulative tokens found
    connector_queries: int = 0
    connector_hits: int = 0
    num_preemptions: int = 0  # cumulative
    num_scheduled_tokens: int = 0  # this step
    # Speculative decoding, cumulative (vLLM's SpecDecodingStats): requests' steps that
    # verified drafts, draft tokens verified, drafts accepted, and accepted per position.
    spec_num_drafts: int = 0
    spec_num_draft_tokens: int = 0
    spec_num_accepted_tokens: int = 0
    spec_accepted_per_pos: list[int] = msgspec.field(default_factory=list)
    # LoRA (vLLM's SchedulerStats): {adapter name: requests} running / waiting; empty
    # without LoRA.
    running_lora_adapters: dict[str, int] = msgspec.field(default_factory=dict)
    waiting_lora_adapters: dict[str, int] = msgspec.field(default_factory=dict)


class EngineCoreOutputs(msgspec.Struct, frozen=True, kw_only=True):
    step_id: int
    outputs: list[EngineCoreOutput]
    stats: SchedulerStats | None = None
    timestamp: float = 0.0
    # The version of the weights this step ran on (finish_weight_update's weight_version;
    # "default" until one is set); None: not known (replays after a restart).
    weight_version: str | None = None
    # vLLM's ``iteration_tokens``: the prompt tokens computed (cached ones aside) by the
    # requests whose prefill ended this step, plus the tokens generated.
    iteration_tokens: int = 0
