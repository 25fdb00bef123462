"""The cross-field checks of :class:`EngineConfig` (run by its ``__post_init__``): what one
setting is not built with, given the others, refused by name (``EngineConfigError``).

Written as functions of the config (``self``) so engine_config.py keeps to its fields."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

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
