"""``POST /cohere/v2/chat`` on the chat path.

A request becomes a chat request (``to_chat``) and runs through ``serving_chat``
(template, tool and reasoning parsers, structured outputs, the engine's stream); its
answer is shaped as Cohere's (:func:`response_of`) or streamed as Cohere's events
(``events``).

Reasoning is a ``thinking`` content block. A server started with
``--no-cohere-is-reasoning-model`` (older Command models, which plan before they call
tools) answers a turn that calls tools with its reasoning as ``tool_plan`` instead, and
streams reasoning as ``tool-plan-delta`` events (vLLM's rule for each).

Every error carries Cohere's body, ``{"message": ..., "id": <the caller's X-Request-Id>}``,
with vLLM's status: 400 for a body it refuses, 404 for a model not served, 501 where the
model cannot chat.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response

from actorllm.entrypoints.cohere.events import EventWriter, message_failed, message_start
from actorllm.entrypoints.cohere.outcome import finish_reason_of, usage_of
from actorllm.entrypoints.cohere.protocol import (
    CohereAssistantOut,
    CohereChatRequest,
    CohereChatResponse,
    CohereError,
    CohereLogprob,
    CohereTextOut,
    CohereThinkingOut,
    CohereToolCallFunction,
    CohereToolCallOut,
)
from actorllm.entrypoints.cohere.to_chat import chat_request
from actorllm.entrypoints.openai.errors import APIError, to_api_error
from actorllm.entrypoints.openai.protocol.chat_response import ChatChoice, ChatCompletionResponse
from actorllm.entrypoints.openai.serving_chat import ChatState, start_chat
from actorllm.entrypoints.openai.serving_common import ServingContext, json_response
from actorllm.entrypoints.openai.sse import Emit, SSEResponse
from actorllm.entrypoints.openai.streams import PrimedStream, pump, unless_disconnected

NOT_A_CHAT_MODEL = "The model does not support the Cohere v2 chat API."
# The headers an error's status comes with (a 503's Retry-After, a 401's challenge).
_ERROR_HEADERS = ("retry-after", "www-authenticate", "connection")


def cohere_error(err: APIError, request_id: str | None = None) -> Response:
    """vLLM's ``_error_response``: the status, Cohere's body."""
    response = json_response(CohereError(message=err.message, id=request_id), status=err.status)
    for name, value in err.response().headers.items():
        if name.lower() in _ERROR_HEADERS:
            response.headers[name] = value
    return response


def _logprobs(choice: ChatChoice) -> list[CohereLogprob] | None:
    """One item per output token: its text, id and logprob."""
    entries = choice.logprobs.content if choice.logprobs is not None else None
    if not entries or choice.token_ids is None:
        return None
    return [
        CohereLogprob(text=e.token, token_ids=[tid], logprobs=[e.logprob])
        for e, tid in zip(entries, choice.token_ids, strict=True)
    ]


def response_of(chat: ChatCompletionResponse, reasoning_model: bool) -> CohereChatResponse:
    """A finished chat answer as Cohere's (vLLM's ``_chat_completion_to_v2``)."""
    choice = chat.choices[0]
    m = choice.message
    tool_calls = m.tool_calls if not isinstance(m.tool_calls, msgspec.UnsetType) else []
    calls = [
        CohereToolCallOut(
            id=c.id,
            function=CohereToolCallFunction(name=c.function.name, arguments=c.function.arguments),
        )
        for c in tool_calls
    ]
    plan = m.reasoning_content if calls and not reasoning_model else None
    content: list[CohereTextOut | CohereThinkingOut] = []
    if m.reasoning_content and plan is None:
        content.append(CohereThinkingOut(thinking=m.reasoning_content))
    if m.content:
        content.append(CohereTextOut(text=m.content))
    return CohereChatResponse(
        id=chat.id,
        finish_reason=finish_reason_of(choice.finish_reason, choice.stop_reason),
        message=CohereAssistantOut(
            role="assistant", tool_calls=calls or None, tool_plan=plan, content=content or None
        ),
        usage=usage_of(chat.usage),
        logprobs=_logprobs(choice),
    )


async def _stream(
    ctx: ServingContext,
    state: ChatState,
    streams: list[PrimedStream],
    emit: Emit,
    reasoning_model: bool,
) -> None:
    await emit(message_start(state.id))
    writer = EventWriter(reasoning_model=reasoning_model)

    async def on_output(_i: int, out: Any) -> None:
        for fragment in state.apply(out, delta=True):
            for event in writer.feed(fragment):
                await emit(event)

    try:
        await pump(streams, on_output)
    except Exception as exc:  # the engine failed mid-stream: vLLM's failed message-end
        await emit(message_failed(to_api_error(exc, engine_dead=ctx.is_dead()).message))
        return
    ctx.defaults.log_outputs_of(state.id, state.choices)
    for event in writer.end(state.id, state.usage.info()):
        await emit(event)


async def create_chat(
    ctx: ServingContext,
    req: CohereChatRequest,
    receive: Any,
    *,
    reasoning_model: bool = True,
    request_id: str | None = None,
) -> Response:
    """Serve one Cohere v2 chat request (errors raise; the route gives them Cohere's
    body). ``reasoning_model``: ``--cohere-is-reasoning-model``."""
    if ctx.engine.pooling_model is not None:
        raise APIError(501, NOT_A_CHAT_MODEL, kind="NotImplementedError")
    ctx.engine.check_admission()  # vLLM's queue limits: a 503 before anything starts
    chat = chat_request(req)
    if request_id:
        chat = msgspec.structs.replace(chat, request_id=request_id)
    state, streams, _ = await start_chat(ctx, chat, receive)
    if req.stream:
        return SSEResponse(
            lambda emit: _stream(ctx, state, streams, emit, reasoning_model),
            is_dead=ctx.is_dead,
            keep_alive_s=ctx.defaults.sse_keep_alive_s,
        )
    await unless_disconnected(receive, lambda: pump(streams, state.collect))
    ctx.defaults.log_outputs_of(state.id, state.choices)
    return json_response(response_of(state.response(), reasoning_model))
