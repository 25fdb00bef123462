"""What the HTTP layer needs from an engine, as a structural type.

``actorllm.engine.AsyncEngine`` satisfies it; so does the fake the tests use. Keeping the
server on this protocol (not on the concrete class) lets it be tested without a model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from actorllm.core.beam_search import BeamSearchParams
from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import RequestOutput
from actorllm.core.pooling_params import PoolingParams
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.recovery.pause import PauseMode

# What `generate` accepts as a prompt: text, or {"prompt_token_ids": [...], "prompt": text}
# (the serving layer renders chat templates and tokenizes itself: preprocess.py).
EnginePrompt = str | dict[str, Any]


class EngineClient(Protocol):
    @property
    def model_name(self) -> str: ...

    @property
    def model_names(self) -> list[str]: ...  # model_name first, then its aliases

    @property
    def tokenizer(self) -> Any: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def prompt_embeds_spec(self) -> tuple[int, Any] | None: ...

    @property
    def config(self) -> Any: ...  # EngineConfig; the serving layer reads scheduling_policy

    @property
    def is_dead(self) -> bool: ...

    def generate(
        self,
        prompt: EnginePrompt,
        sampling_params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        *,
        lora_request: LoRARequest | None = None,
    ) -> AsyncIterator[RequestOutput]: ...

    def beam_search(
        self,
        prompt: EnginePrompt,
        params: BeamSearchParams,
        request_id: str | None = None,
        *,
        lora_request: LoRARequest | None = None,
        priority: int = 0,
        logprobs: int | None = None,
    ) -> AsyncIterator[RequestOutput]: ...

    @property
    def pooling_model(self) -> Any: ...  # PoolingModel, or None for a generative model

    def encode(
        self,
        prompt: EnginePrompt,
        pooling_params: PoolingParams | None = None,
        request_id: str | None = None,
        priority: int = 0,
        *,
        truncate_prompt_tokens: int | None = None,
    ) -> AsyncIterator[Any]: ...  # PoolingRequestOutput
    def list_loras(self) -> list[LoRARequest]: ...
    async def add_lora(self, request: LoRARequest) -> bool: ...
    async def remove_lora(self, name: str) -> bool: ...

    async def abort(self, request_id: str) -> None: ...
    def check_admission(self, n: int = 1, request_id: str | None = None) -> None: ...
    async def drain(self, timeout_s: float | None = None) -> int: ...
    async def sleep(self, level: int = 1, mode: PauseMode = "keep") -> None: ...
    async def wake_up(self, tags: list[str] | None = None) -> bool: ...
    async def is_sleeping(self) -> bool: ...
    async def release_kv_cache_memory(self) -> None: ...
    async def pause_generation(
        self, *, mode: PauseMode = "abort", clear_cache: bool = True
    ) -> None: ...
    async def resume_generation(self) -> None: ...
    async def is_paused(self) -> bool: ...
    async def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool: ...
    async def set_kv_connector_enabled(self, enabled: bool) -> None: ...
    async def is_kv_connector_enabled(self) -> bool: ...
    async def get_stats(self) -> Any: ...
    async def collective_rpc(
        self,
        method: str,
        timeout: float | None = None,  # noqa: ASYNC109 - vLLM's signature
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]: ...
    async def start_profile(self) -> None: ...
    async def stop_profile(self) -> None: ...
    async def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None: ...
    async def shutdown_weight_transfer_engine(self) -> None: ...
    async def start_weight_update(self) -> None: ...
    async def update_weights(self, update_info: dict[str, Any] | list[dict[str, Any]]) -> None: ...
    async def finish_weight_update(self, weight_version: str | None = None) -> None: ...
    async def update_weight_version(self, new_version: str) -> None: ...
    async def get_weight_version(self) -> str: ...
    def get_world_size(self, include_dp: bool = True) -> int: ...
