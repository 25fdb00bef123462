"""The checks of :class:`EngineConfig` (run by its ``__post_init__``): each numeric setting's
range, and what one setting is not built with, given the others, refused by name
(``EngineConfigError``).

Written as functions of the config (``self``) so engine_config.py keeps to its fields."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from typing import TYPE_CHECKING

from actorllm.core.histogram_buckets import check_custom_buckets
from actorllm.core.watermark_config import WatermarkConfig, WatermarkConfigError
from actorllm.engine.config.errors import EngineConfigError

if TYPE_CHECKING:
    from actorllm.engine.config.engine_config import EngineConfig

# vLLM's --kv-cache-dtype values this engine stores (CacheDType, v0.32); fp8 is e4m3, as
# vLLM on CUDA. The two others vLLM knows name formats of other hardware and models.
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
_KV_CACHE_DTYPES_REFUSED = {
    "fp8_inc": "Intel Gaudi's fp8 format",
    "fp8_ds_mla": "DeepSeek's fp8 MLA cache layout (no supported model has MLA)",
}


def check_limits(self: EngineConfig) -> None:
    """Each numeric setting within its range (sizes, limits, fractions, timeouts)."""
    if self.block_size is not None and self.block_size not in (1, 2, 4, 8, 16, 32, 64, 128):
        raise EngineConfigError(
            "block_size", f"must be a power of two up to 128, got {self.block_size}."
        )
    if self.max_num_seqs < 1:
        raise EngineConfigError("max_num_seqs", f"must be at least 1, got {self.max_num_seqs}.")
    if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes < 0:
        raise EngineConfigError(
            "kv_cache_memory_bytes", f"must be non-negative, got {self.kv_cache_memory_bytes}."
        )
    if type(self.stream_interval) is not int or self.stream_interval < 1:
        raise EngineConfigError(
            "stream_interval",
            f"must be an integer of at least 1, got {self.stream_interval!r}.",
        )
    if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
        raise EngineConfigError("max_num_batched_tokens", "must be at least 1.")
    if self.max_model_len is not None and self.max_model_len < 2:
        raise EngineConfigError("max_model_len", "must be at least 2.")
    if type(self.max_logprobs) is not int or self.max_logprobs < -1:
        raise EngineConfigError(
            "max_logprobs", f"must be -1 (no limit) or non-negative, got {self.max_logprobs!r}."
        )
    if not 0.0 < self.gpu_memory_utilization <= 1.0:
        raise EngineConfigError("gpu_memory_utilization", "must be in (0, 1].")
    if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override < 2:
        raise EngineConfigError(
            "num_gpu_blocks_override", "must be at least 2 (block 0 is the null block)."
        )
    if self.long_prefill_token_threshold < 0:
        raise EngineConfigError("long_prefill_token_threshold", "must be non-negative.")
    if self.custom_histogram_buckets is not None:
        try:
            check_custom_buckets(self.custom_histogram_buckets)
        except ValueError as exc:
            raise EngineConfigError("custom_histogram_buckets", str(exc)) from None
    if not 0.0 <= self.watermark < 1.0:
        raise EngineConfigError("watermark", f"must be in [0, 1), got {self.watermark}.")
    if self.max_restarts < 0 or self.restart_window_s <= 0:
        raise EngineConfigError("max_restarts", "must be non-negative, with a positive window.")
    if self.data_parallel_size < 1:
        raise EngineConfigError("data_parallel_size", "must be at least 1.")
    for name in ("actor_message_deadline_s", "step_timeout_s"):
        value = getattr(self, name)
        if value is not None and not value > 0:
            raise EngineConfigError(name, f"must be positive or None, got {value}.")
    if not self.actor_shutdown_timeout_s >= 0:
        raise EngineConfigError(
            "actor_shutdown_timeout_s",
            f"must be non-negative, got {self.actor_shutdown_timeout_s}.",
        )
    for name in ("max_num_queued_reqs", "max_num_queued_tokens"):
        value = getattr(self, name)
        if value is not None and value < 0:
            raise EngineConfigError(name, f"must be at least 0 or None, got {value}.")
    for name in ("max_waiting_requests", "max_stream_backlog"):
        value = getattr(self, name)
        if value is not None and value < 1:
            raise EngineConfigError(name, f"must be at least 1 or None, got {value}.")
    if self.gc_gen0_threshold is not None and self.gc_gen0_threshold < 1:
        raise EngineConfigError("gc_gen0_threshold", "must be at least 1 or None.")
    if self.switch_interval_s is not None and not self.switch_interval_s > 0:
        raise EngineConfigError("switch_interval_s", "must be positive or None.")
    if self.shutdown_timeout < 0:
        raise EngineConfigError("shutdown_timeout", "must be non-negative.")


def check_kv_cache_dtype(self: EngineConfig) -> None:
    value = self.kv_cache_dtype
    if value in _KV_CACHE_DTYPES_REFUSED:
        raise EngineConfigError(
            "kv_cache_dtype",
            f"{value!r} ({_KV_CACHE_DTYPES_REFUSED[value]}) is not supported; use one of "
            f"{', '.join(KV_CACHE_DTYPES)}.",
        )
    if value not in KV_CACHE_DTYPES:
        raise EngineConfigError(
            "kv_cache_dtype", f"must be one of {', '.join(KV_CACHE_DTYPES)}, got {value!r}."
        )


def check_prompt_embeds(self: EngineConfig) -> None:
    """Prompt embeddings reach tensor- and pipeline-parallel ranks with each step
    (worker/tp_step.py); not a draft model's proposer."""
    if not self.enable_prompt_embeds:
        return
    if self.speculative_config:
        raise EngineConfigError("enable_prompt_embeds", "is not built with speculative_config yet.")


def check_speculative(self: EngineConfig) -> None:
    spec = self.speculative()  # raises naming the key at fault
    if spec is not None and self.async_scheduling:
        raise EngineConfigError(
            "async_scheduling",
            "is not supported with speculative_config: a speculative step needs the "
            "previous step's accepted tokens on the host to propose drafts. Leave "
            "async_scheduling unset (the default turns it off here) or set it off.",
        )
    if spec is not None and self.tensor_parallel_size > 1:
        raise EngineConfigError(
            "speculative_config", "is not built for tensor_parallel_size > 1 yet."
        )
    if spec is not None and self.distributed_executor_backend == "ray":
        raise EngineConfigError(
            "speculative_config", "is not built for distributed_executor_backend ray yet."
        )


def check_watermark(self: EngineConfig) -> None:
    """``watermark_config`` normalised to its fields' dict (from a ``WatermarkConfig`` or
    JSON), checked field by field, and vLLM's refusals of what cannot be watermarked."""
    value = self.watermark_config
    if value is None:
        return
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise EngineConfigError("watermark_config", f"is not valid JSON: {exc}.") from None
    try:
        config = WatermarkConfig.from_value(value)
    except WatermarkConfigError as exc:
        raise EngineConfigError("watermark_config", str(exc)) from None
    self.watermark_config = dataclasses.asdict(config)
    if self.speculative_config:
        # vLLM's first refusal for any speculative method: its watermarked verification
        # needs probabilistic drafts, which are not built here (drafts are greedy).
        raise EngineConfigError(
            "watermark_config",
            "Speculative decoding with watermarking requires "
            "draft_sample_method='probabilistic' (vLLM's rule; actorllm's drafts are greedy, "
            "so watermarking runs without speculative_config).",
        )


def check_sampling_mask(self: EngineConfig) -> None:
    """``return_sampling_mask`` and ``logprobs_mode``: vLLM's rules for sampling
    distribution replay, and by name what this engine does not build with it."""
    modes = ("raw_logprobs", "processed_logprobs")
    if self.logprobs_mode not in modes:
        raise EngineConfigError(
            "logprobs_mode",
            f"must be one of {list(modes)} here (raw_logits and processed_logits are not "
            f"built), got {self.logprobs_mode!r}.",
        )
    if not self.return_sampling_mask:
        if self.logprobs_mode == "processed_logprobs":
            raise EngineConfigError(
                "logprobs_mode",
                "processed_logprobs is built only with return_sampling_mask "
                "(the sampler's masked path computes them).",
            )
        return
    if self.logprobs_mode != "processed_logprobs":
        raise EngineConfigError(
            "return_sampling_mask",
            "sampling distribution replay requires logprobs_mode='processed_logprobs' so "
            "that returned logprobs are normalized over the same nucleus as the sampling "
            "mask",
        )
    if self.logits_processors:
        raise EngineConfigError(
            "return_sampling_mask",
            "sampling distribution replay does not support custom logits processors",
        )
    if self.speculative_config:
        raise EngineConfigError(
            "return_sampling_mask",
            "is not built with speculative_config here (vLLM's needs its V2 model "
            "runner's fixed verification boundaries).",
        )
    if self.watermark_config is not None:
        raise EngineConfigError("return_sampling_mask", "is not built with watermark_config here.")


def check_lora(self: EngineConfig) -> None:
    if self.max_loras < 1:
        raise EngineConfigError("max_loras", f"must be at least 1, got {self.max_loras}.")
    if self.max_lora_rank < 1:
        raise EngineConfigError("max_lora_rank", f"must be at least 1, got {self.max_lora_rank}.")
    if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
        raise EngineConfigError(
            "max_cpu_loras",
            f"({self.max_cpu_loras}) must be >= max_loras ({self.max_loras}).",
        )
    if self.lora_dtype not in ("auto", "float16", "half", "bfloat16", "float32", "float"):
        raise EngineConfigError(
            "lora_dtype",
            f"must be auto, float16, bfloat16 or float32, got {self.lora_dtype!r}.",
        )


def check_parallel(self: EngineConfig) -> None:
    _check_pipeline(self)
    tp = self.tensor_parallel_size
    if tp < 1:
        raise EngineConfigError("tensor_parallel_size", f"must be at least 1, got {tp}.")
    if tp > 1 and self.device == "cuda":
        raise EngineConfigError(
            "tensor_parallel_size", "> 1 runs on CPU (gloo) only so far; NCCL is not built."
        )
    if tp > 1 and self.kv_connector is not None:
        raise EngineConfigError(
            "kv_connector",
            "the offload connector saves and loads rank 0's KV cache only; it is not "
            "built for tensor_parallel_size > 1.",
        )
    _check_data_parallel_backend(self)
    backend = self.distributed_executor_backend
    if backend not in (None, "mp", "ray"):
        raise EngineConfigError(
            "distributed_executor_backend", f"must be mp or ray, got {backend!r}."
        )
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        raise EngineConfigError(
            "distributed_executor_backend",
            "ray needs Ray, which is not installed: pip install 'actorllm[ray]'.",
        )
    if backend == "ray" and self.kv_connector is not None:
        raise EngineConfigError(
            "kv_connector",
            "the offload connector's store works beside the scheduler, on the KV cache "
            "of this process; with distributed_executor_backend ray every replica's "
            "worker (and its KV cache) is a Ray actor. It is not built for ray.",
        )
    if self.tp_collective_timeout_s <= 0:
        raise EngineConfigError("tp_collective_timeout_s", "must be positive.")


def _check_pipeline(self: EngineConfig) -> None:
    """pipeline_parallel_size, and what it is not built with (refused by name)."""
    pp = self.pipeline_parallel_size
    if pp < 1:
        raise EngineConfigError("pipeline_parallel_size", f"must be at least 1, got {pp}.")
    if pp == 1:
        return
    not_built = [
        ("tensor_parallel_size", self.tensor_parallel_size > 1, "> 1"),
        ("data_parallel_size", self.data_parallel_size > 1, "> 1"),
        ("device", self.device == "cuda", "cuda (NCCL is not built)"),
        ("enable_lora", self.enable_lora, "on"),
        ("speculative_config", bool(self.speculative_config), "set"),
        ("kv_connector", self.kv_connector is not None, "set"),
        (
            "async_scheduling",
            self.async_scheduling,
            "on (the pipeline keeps pipeline_parallel_size batches of different "
            "requests in flight instead)",
        ),
    ]
    for name, hit, what in not_built:
        if hit:
            raise EngineConfigError(
                name, f"{what} is not built with pipeline_parallel_size > 1 yet."
            )


def _check_data_parallel_backend(self: EngineConfig) -> None:
    """data_parallel_backend="ray" is distributed_executor_backend="ray" for every
    replica's ranks (set here, so one field says where ranks run)."""
    dp_backend = self.data_parallel_backend
    if dp_backend not in ("mp", "ray"):
        raise EngineConfigError("data_parallel_backend", f"must be mp or ray, got {dp_backend!r}.")
    if dp_backend == "mp":
        return
    if self.distributed_executor_backend == "mp":
        raise EngineConfigError(
            "data_parallel_backend",
            "ray places each replica's ranks with Ray, and distributed_executor_backend "
            "is mp: give one of them.",
        )
    self.distributed_executor_backend = "ray"
