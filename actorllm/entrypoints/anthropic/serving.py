"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` on the chat path.

A request becomes a chat request (``to_chat``) and runs through ``serving_chat``
(template, tool and reasoning parsers, structured outputs, the engine's stream); its
answer is shaped as Anthropic's message (:func:`message_of`) or streamed as Anthropic's
events (``events``). ``count_tokens`` renders the chat request as the chat path would
and counts its tokens.

Errors after the body is decoded carry Anthropic's body, as vLLM's routes translate them:
``{"type": "error", "error": {"type": <vLLM's error type>, "message": ...}}``; a body that
does not decode gets the OpenAI-shaped 400 every route sends (vLLM's validation handler).
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, get_args

import anyio
import msgspec
from starlette.responses import Response

from actorllm.entrypoints.anthropic.events import BlockWriter, stop_reason_of
from actorllm.entrypoints.anthropic.protocol import (
    AnthropicContextManagement,
    AnthropicCountTokensRequest,
    AnthropicCountTokensResponse,
    AnthropicMessagesRequest,
    AnthropicMessagesResponse,
    AnthropicTextOut,
    AnthropicThinkingDisabled,
    AnthropicThinkingOut,
    AnthropicToolUseOut,
    AnthropicUsage,
    DisabledThinkingEffort,
    Effort,
    OutBlock,
)
from actorllm.entrypoints.anthropic.to_chat import Conversion, chat_request, count_request
from actorllm.entrypoints.openai.errors import APIError, to_api_error
from actorllm.entrypoints.openai.lora_models import resolve_model
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest
from actorllm.entrypoints.openai.protocol.chat_response import ChatCompletionResponse
from actorllm.entrypoints.openai.protocol.usage import UsageInfo
from actorllm.entrypoints.openai.serving_chat import ChatState, render_chat_request, start_chat
from actorllm.entrypoints.openai.serving_common import ServingContext, json_response
from actorllm.entrypoints.openai.sse import Emit, SSEResponse
from actorllm.entrypoints.openai.streams import PrimedStream, pump, unless_disconnected

logger = logging.getLogger("actorllm.server")


def _configured_effort(option: str) -> DisabledThinkingEffort | None:
    """``--anthropic-disabled-thinking-effort`` as an effort; None for "auto" (probed)."""
    efforts: tuple[DisabledThinkingEffort, ...] = get_args(DisabledThinkingEffort)
    return next((e for e in efforts if e == option), None)


def anthropic_error(err: APIError) -> Response:
    """vLLM's ``translate_error_response``: the status, Anthropic's body."""
    info = err.body().error
    body = {"type": "error", "error": {"type": info.type, "message": info.message}}
    return json_response(body, status=err.status)


def usage_of(info: UsageInfo) -> AnthropicUsage:
    """Anthropic's usage (vLLM's ``_build_anthropic_usage``): ``input_tokens`` are the
    prompt tokens neither read from the prefix cache (``cache_read_input_tokens``) nor
    written to it (``cache_creation_input_tokens``)."""
    details = info.prompt_tokens_details
    if details is None:
        return AnthropicUsage(input_tokens=info.prompt_tokens, output_tokens=info.completion_tokens)
    cached, created = details.cached_tokens, details.created_cache_tokens
    return AnthropicUsage(
        input_tokens=max(0, info.prompt_tokens - cached - created),
        output_tokens=info.completion_tokens,
        cache_read_input_tokens=cached,
        cache_creation_input_tokens=created,
    )


@dataclass(slots=True)
class TemplateFacts:
    """What the conversion learns once from the served chat template (vLLM probes the
    same at start-up): whether inline system messages must be merged into the leading
    one, and the effort ``thinking.type`` "disabled" renders with
    (``--anthropic-disabled-thinking-effort``; "auto" probes it)."""

    disabled_effort_option: str = "auto"  # --anthropic-disabled-thinking-effort
    merge_inline_system: bool | None = None  # None: not probed yet
    disabled_effort: DisabledThinkingEffort | None = None  # None: not resolved yet
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def conversion(self, ctx: ServingContext, thinking_disabled: bool) -> Conversion:
        async with self.lock:
            if self.merge_inline_system is None:
                self.merge_inline_system = await _template_wants_system_first(ctx)
            merge = self.merge_inline_system
            if not thinking_disabled:
                return Conversion(merge)
            if self.disabled_effort is None:
                configured = _configured_effort(self.disabled_effort_option)
                self.disabled_effort = configured or await _probe_effort(ctx)
                logger.info(
                    "Anthropic thinking.type=disabled maps to reasoning_effort=%r",
                    self.disabled_effort,
                )
            return Conversion(merge, self.disabled_effort)


async def _renders(ctx: ServingContext, raw: dict[str, Any]) -> tuple[str, list[int]] | None:
    """The prompt a chat request renders to, as the chat path renders it (None: it
    cannot)."""
    try:
        rendered = await render_chat_request(ctx, msgspec.convert(raw, ChatCompletionRequest))
    except Exception:
        logger.debug("rendering the probe %r failed", raw, exc_info=True)
        return None
    return rendered.text, list(rendered.prompt.token_ids)


async def _template_wants_system_first(ctx: ServingContext) -> bool:
    """vLLM's ``_detect_merge_inline_system``: a template that fails on a system message
    after the first turn (Qwen's ``loop.first`` guard) merges them into the first."""
    roles = ("system", "user", "system", "user")
    probe = {
        "messages": [{"role": r, "content": "t"} for r in roles],
        "add_generation_prompt": False,
    }
    return await _renders(ctx, probe) is None


async def _probe_effort(ctx: ServingContext) -> DisabledThinkingEffort:
    """vLLM's ``_probe_disabled_thinking_effort``: "low" when the template rejects "none"
    or renders it as it renders a thinking effort (it ignores it), else "none"."""

    def probe(effort: str) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": effort}

    none_prompt = await _renders(ctx, probe("none"))
    if none_prompt is None:
        return "low"
    for effort in get_args(Effort):
        if await _renders(ctx, probe(effort)) == none_prompt:
            return "low"
    return "none"


def message_of(chat: ChatCompletionResponse) -> AnthropicMessagesResponse:
    """A finished chat answer as Anthropic's message (vLLM's ``messages_full_converter``)."""
    choice = chat.choices[0]
    m = choice.message
    calls = m.tool_calls if not isinstance(m.tool_calls, msgspec.UnsetType) else []
    content: list[OutBlock] = []
    if m.reasoning_content:
        content.append(
            AnthropicThinkingOut(thinking=m.reasoning_content, signature=uuid.uuid4().hex)
        )
    if m.content:
        content.append(AnthropicTextOut(text=m.content))
    for call in calls:
        args = json.loads(call.function.arguments)
        content.append(AnthropicToolUseOut(id=call.id, name=call.function.name, input=args))
    stop, sequence = stop_reason_of(
        choice.finish_reason, choice.stop_reason, tool_used=bool(calls), tool_complete=bool(calls)
    )
    return AnthropicMessagesResponse(
        id=chat.id,
        # Anthropic's empty answer is one empty text block (clients read content[0]).
        content=content or [AnthropicTextOut(text="")],
        model=chat.model,
        stop_reason=msgspec.UNSET if stop is None else stop,
        stop_sequence=msgspec.UNSET if sequence is None else sequence,
        usage=usage_of(chat.usage),
    )


async def _stream(
    ctx: ServingContext, state: ChatState, streams: list[PrimedStream], emit: Emit
) -> None:
    prompt = AnthropicUsage(input_tokens=state.num_prompt_tokens, output_tokens=0)
    start: dict[str, Any] = {
        "id": state.id,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": state.model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": prompt,
    }
    await emit({"type": "message_start", "message": start})
    writer = BlockWriter()

    async def on_output(_i: int, out: Any) -> None:
        for fragment in state.apply(out, delta=True):
            for event in writer.feed(fragment):
                await emit(event)

    try:
        await pump(streams, on_output)
    except Exception as exc:  # the engine failed mid-stream: vLLM's error event ends it
        err = to_api_error(exc, engine_dead=ctx.is_dead())
        await emit({"type": "error", "error": {"type": "internal_error", "message": err.message}})
        return
    ctx.defaults.log_outputs_of(state.id, state.choices)
    for event in writer.close():
        await emit(event)
    stop, sequence = writer.stop()
    delta = {"stop_reason": stop, "stop_sequence": sequence}
    await emit({"type": "message_delta", "delta": delta, "usage": usage_of(state.usage.info())})
    await emit({"type": "message_stop"})


async def create_message(
    ctx: ServingContext,
    facts: TemplateFacts,
    req: AnthropicMessagesRequest,
    receive: Any,
    request_id: str | None = None,
) -> Response:
    """Serve one Messages request (errors raise; the route gives them Anthropic's body)."""
    ctx.engine.check_admission()  # vLLM's queue limits: a 503 before anything starts
    conv = await facts.conversion(ctx, isinstance(req.thinking, AnthropicThinkingDisabled))
    chat = chat_request(req, conv)
    if request_id:
        chat = msgspec.structs.replace(chat, request_id=request_id)
    state, streams, _ = await start_chat(ctx, chat, receive)
    if req.stream:
        return SSEResponse(
            lambda emit: _stream(ctx, state, streams, emit),
            is_dead=ctx.is_dead,
            named=True,
            keep_alive_s=ctx.defaults.sse_keep_alive_s,
        )
    await unless_disconnected(receive, lambda: pump(streams, state.collect))
    ctx.defaults.log_outputs_of(state.id, state.choices)
    return json_response(message_of(state.response()))


async def count_tokens(
    ctx: ServingContext, facts: TemplateFacts, req: AnthropicCountTokensRequest
) -> AnthropicCountTokensResponse:
    """The prompt's tokens after the chat template, tools included (vLLM's)."""
    conv = await facts.conversion(ctx, isinstance(req.thinking, AnthropicThinkingDisabled))
    chat = count_request(req, conv)
    resolve_model(chat.model, ctx.engine)  # 404 for a name not served
    rendered = await render_chat_request(ctx, chat)
    n = len(rendered.prompt.token_ids)
    return AnthropicCountTokensResponse(
        input_tokens=n, context_management=AnthropicContextManagement(original_input_tokens=n)
    )
