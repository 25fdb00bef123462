"""Render for the APIs that run on the chat path: ``/v1/messages/render`` (Anthropic's),
``/v1/responses/render`` and ``/cohere/v2/chat/render``. Each converts its request to a
chat request exactly as its own route does, then renders that (vLLM's order too)."""

from __future__ import annotations

import msgspec

from actorllm.entrypoints.anthropic.protocol import (
    AnthropicMessagesRequest,
    AnthropicThinkingDisabled,
)
from actorllm.entrypoints.anthropic.serving import TemplateFacts
from actorllm.entrypoints.anthropic.to_chat import chat_request as messages_to_chat
from actorllm.entrypoints.cohere.protocol import CohereChatRequest
from actorllm.entrypoints.cohere.to_chat import chat_request as cohere_to_chat
from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.responses.events import new_id
from actorllm.entrypoints.openai.responses.request import ResponsesRequest
from actorllm.entrypoints.openai.responses.to_chat import chat_request as responses_to_chat
from actorllm.entrypoints.openai.serving_chat import OutputBudget
from actorllm.entrypoints.openai.serving_common import ServingContext
from actorllm.entrypoints.scale_out.protocol import GenerateRequest
from actorllm.entrypoints.scale_out.render import render_chat


async def render_messages(
    ctx: ServingContext,
    facts: TemplateFacts,
    req: AnthropicMessagesRequest,
    request_id: str | None = None,
) -> GenerateRequest:
    conv = await facts.conversion(ctx, isinstance(req.thinking, AnthropicThinkingDisabled))
    chat = messages_to_chat(req, conv)
    if request_id:
        chat = msgspec.structs.replace(chat, request_id=request_id)
    return await render_chat(ctx, chat)


async def render_responses(ctx: ServingContext, req: ResponsesRequest) -> GenerateRequest:
    """Stateless: ``previous_response_id`` (a stored conversation) is refused by name, as
    vLLM's render does; the id is the request's (``resp_...``)."""
    if req.previous_response_id is not None:
        raise APIError(
            400,
            "previous_response_id is not supported by the stateless render endpoint.",
            "previous_response_id",
            kind="invalid_request_error",
        )
    truncate_to = None
    if req.truncation == "auto":  # keep the prompt's last tokens, room for the answer
        truncate_to = max(1, ctx.engine.max_model_len - (req.max_output_tokens or 1))
    chat = responses_to_chat(req, [], truncate_to=truncate_to)
    budget = OutputBudget(asked=req.max_output_tokens, param="input")
    rid = req.request_id or new_id("resp")
    return await render_chat(ctx, chat, request_id=rid, budget=budget)


async def render_cohere(
    ctx: ServingContext, req: CohereChatRequest, request_id: str | None = None
) -> GenerateRequest:
    chat = cohere_to_chat(req)
    if request_id:
        chat = msgspec.structs.replace(chat, request_id=request_id)
    return await render_chat(ctx, chat)
