"""The engine side of ``actorllm launch render``: what the render, derender and tokenizer
routes read of an engine (names, tokenizer, context length, vocabulary, configuration),
from the checkpoint's config.json and tokenizer only. No weights are loaded, no worker
runs: this is vLLM's GPU-less render server (``vllm launch render``), which turns
requests into token ids for a separate ``/inference/v1/generate`` server and its token ids
back into OpenAI answers.

Only the routes that need nothing more are mounted (``app/routes.py``); every other
engine call is refused by :meth:`RenderOnlyEngine.__getattr__`, naming the call.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from actorllm.core.lora import LoRARequest
from actorllm.engine.actors.startup import build_tokenizer
from actorllm.engine.config import EngineConfig
from actorllm.engine.config.errors import EngineConfigError
from actorllm.worker.rank_config import rank_model_config

logger = logging.getLogger("actorllm.server")


class RenderOnlyError(RuntimeError):
    """An engine call on a server that runs no engine."""


class RenderOnlyEngine:
    """The read side of :class:`~actorllm.entrypoints.openai.engine_client.EngineClient`
    for a render-only server."""

    def __init__(self, config: EngineConfig, tokenizer: Any, max_model_len: int, vocab: int):
        self._config = config
        self._tokenizer = tokenizer
        self._max_model_len = max_model_len
        self._vocab_size = vocab

    @classmethod
    @asynccontextmanager
    async def open(cls, config: EngineConfig) -> AsyncIterator[RenderOnlyEngine]:
        """Read the model's config.json and tokenizer; refuses (by name) what a render-only
        server cannot serve: a pooling model, static LoRA adapters, embedding prompts."""
        if config.pooling_model() is not None:
            raise EngineConfigError(
                "runner", "a render-only server renders generation requests; "
                "a pooling model has nothing to render."
            )  # fmt: skip
        if config.enable_prompt_embeds:
            raise EngineConfigError(
                "enable_prompt_embeds", "a render-only server has no model to embed with."
            )
        checkpoint = rank_model_config(
            config.resolved_model(), max_model_len=config.max_model_len, tp_rank=0,
            tp_size=1, pp_rank=0, pp_size=1, pp_partition=None, pooling=None, lora=None,
            speculative=False,
        )  # fmt: skip
        tokenizer = await build_tokenizer(config)
        logger.info(
            "render-only: no engine runs here; %s renders up to %d tokens",
            config.model_name(),
            checkpoint.max_model_len,
        )
        yield cls(config, tokenizer, checkpoint.max_model_len, checkpoint.vocab_size)

    # -- what the render, derender and tokenizer routes read ------------------------------

    @property
    def config(self) -> EngineConfig:
        return self._config

    @property
    def model_name(self) -> str:
        return self._config.model_name()

    @property
    def model_names(self) -> list[str]:
        return self._config.model_names()

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def prompt_embeds_spec(self) -> None:
        return None

    @property
    def pooling_model(self) -> None:
        return None

    @property
    def is_dead(self) -> bool:
        return False

    def list_loras(self) -> list[LoRARequest]:
        return []

    async def drain(self, timeout_s: float | None = None) -> int:
        """The server's shutdown: no request runs here, none is aborted."""
        return 0

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not defined above: the engine's calls (generate, sleep,
        # get_stats, ...), which no mounted route makes.
        if name.startswith("_"):
            raise AttributeError(name)
        raise RenderOnlyError(f"{name}: this is a render-only server; it runs no engine.")
