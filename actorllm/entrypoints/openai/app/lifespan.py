"""The engine's lifetime: opened when the server starts, closed when it stops.

If the engine (or the chat setup, or the generation config) fails to start, startup fails
and ``AppState.startup_error`` holds why; if the engine dies while serving, ``/health``
has said so already and shutting down is all that is left.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from starlette.applications import Starlette

from actorllm.engine.api.stats_logger import log_stats_forever
from actorllm.engine.metrics.prometheus import ServerMetrics
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.app.state import AppState
from actorllm.entrypoints.openai.engine_client import EngineClient
from actorllm.entrypoints.openai.fingerprint import system_fingerprint
from actorllm.entrypoints.openai.harmony_chat import check_tokenizer, is_harmony_model
from actorllm.entrypoints.openai.lora_models import load_adapter, parse_lora_modules
from actorllm.entrypoints.openai.serving_common import ServingContext, ServingDefaults
from actorllm.entrypoints.openai.tool_setup import ChatOptions, ChatSetup
from actorllm.models.hub import ModelNotFoundError

logger = logging.getLogger("actorllm.server")

EngineFactory = Callable[[], AbstractAsyncContextManager[EngineClient]]
Lifespan = Callable[[Starlette], AbstractAsyncContextManager[None]]


def default_template_kwargs(settings: AppSettings) -> dict[str, Any]:
    """``--default-chat-template-kwargs`` with ``--cohere-format``'s ``cohere_format``
    beneath it (vLLM's ``resolve_default_chat_template_kwargs``)."""
    kwargs = dict(settings.default_chat_template_kwargs or {})
    if settings.cohere_format:
        kwargs.setdefault("cohere_format", settings.cohere_format)
    return kwargs


def serving_defaults(
    settings: AppSettings,
    sampling: dict[str, float] | None = None,
    fingerprint: str | None = None,
) -> ServingDefaults:
    return ServingDefaults(
        sampling=dict(sampling or {}),
        return_tokens_as_token_ids=settings.return_tokens_as_token_ids,
        force_include_usage=settings.enable_force_include_usage,
        chat_template_kwargs=default_template_kwargs(settings),
        exclude_tools_when_tool_choice_none=settings.exclude_tools_when_tool_choice_none,
        trust_request_chat_template=settings.trust_request_chat_template,
        log_outputs=settings.enable_log_outputs,
        max_log_len=settings.max_log_len,
        sse_keep_alive_s=settings.sse_keep_alive_interval,
        prompt_tokens_details=settings.enable_prompt_tokens_details,
        system_fingerprint=fingerprint,
    )


def serving_context(engine: EngineClient, settings: AppSettings) -> ServingContext:
    """What the handlers serve with, for ``engine`` and the frontend ``settings``: the
    server's lifespan and ``actorllm run-batch`` build it here, so both answer a body alike.
    Raises for a bad tool parser, parser plugin or generation config."""
    harmony = is_harmony_model(_model_dir(engine))
    if harmony:
        check_tokenizer(engine.tokenizer)
    chat = ChatSetup.from_config(
        ChatOptions(
            tool_parser_plugin=settings.tool_parser_plugin,
            tool_call_parser=settings.tool_call_parser,
            enable_auto_tool_choice=settings.enable_auto_tool_choice,
            reasoning_parser=engine.config.reasoning_parser,
        ),
        harmony=harmony,
    )
    # The engine's generation_config / override_generation_config
    # (engine/config/generation_config.py, shared with LLM and AsyncEngine).
    sampling = engine.config.get_diff_sampling_param()
    return ServingContext(
        engine=engine,
        metrics=ServerMetrics(
            engine.model_name,
            prefix=settings.metrics_prefix,
            cache_config=engine.config,
            max_model_len=engine.max_model_len,
        ),
        chat=chat,
        response_role=settings.response_role,
        defaults=serving_defaults(
            settings,
            sampling,
            system_fingerprint(
                engine.config, settings.fingerprint_mode, settings.fingerprint_value
            ),
        ),
        input_limiter=anyio.CapacityLimiter(settings.renderer_num_workers),
    )


def _model_dir(engine: EngineClient) -> Path | None:
    """The served checkpoint's directory, when the engine names one (not the demo)."""
    if engine.config.model is None:
        return None
    try:
        return Path(engine.config.resolved_model())
    except ModelNotFoundError:  # a name the hub cache does not hold: no config to read
        return None


async def load_static_loras(engine: EngineClient, settings: AppSettings) -> None:
    """``--lora-modules``: loaded before the server takes requests; a bad one stops it."""
    for m in parse_lora_modules(settings.lora_modules):
        await load_adapter(
            engine, m.name, m.path,
            base_model_name=m.base_model_name, is_3d_lora_weight=m.is_3d_lora_weight,
        )  # fmt: skip
        logger.info("serving LoRA adapter %r from %s", m.name, m.path)


def engine_lifespan(engine_factory: EngineFactory, state: AppState) -> Lifespan:
    """The app's lifespan: enters ``engine_factory()`` and sets ``state.ctx`` while the
    server runs (with the stats logger beside it)."""
    settings = state.settings

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with AsyncExitStack() as stack:
                try:
                    engine = await stack.enter_async_context(engine_factory())
                except Exception as exc:
                    state.startup_error = exc
                    raise
                try:
                    state.ctx = serving_context(engine, settings)
                    await load_static_loras(engine, settings)
                except Exception as exc:  # a bad parser, plugin, generation config, adapter
                    state.startup_error = exc
                    raise
                async with anyio.create_task_group() as tg:
                    if settings.log_interval_s > 0 and not settings.render_only:
                        tg.start_soon(log_stats_forever, engine, settings.log_interval_s)
                    state.background.attach(tg)  # background responses run here
                    try:
                        yield
                    finally:
                        state.background.attach(None)
                        tg.cancel_scope.cancel()
        except Exception as exc:
            if state.startup_error is not None:
                raise
            # The engine died while serving (its context manager re-raises that on exit):
            # /health already said so; shutting down is all that is left to do.
            logger.error("the engine stopped with an error: %s", exc)

    return lifespan
