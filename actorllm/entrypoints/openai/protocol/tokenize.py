"""vLLM's ``/tokenize`` and ``/detokenize``: requests and responses."""

from __future__ import annotations

from typing import Any

import msgspec

from actorllm.entrypoints.openai.protocol.bounds import NonEmptyStr, TokenId
from actorllm.entrypoints.openai.protocol.chat_request import Messages, Tool


class TokenizeRequest(msgspec.Struct, kw_only=True):
    """Exactly one of ``prompt`` / ``messages``; the template fields are chat's."""

    model: str | None = None
    prompt: str | msgspec.UnsetType = msgspec.UNSET
    messages: Messages | msgspec.UnsetType = msgspec.UNSET
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool | None = None  # None: True for a prompt, False for messages
    documents: list[dict[str, str]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    chat_template: NonEmptyStr | None = None  # as chat's (--trust-request-chat-template)
    tools: list[Tool] | None = None  # rendered by the chat template, as chat's
    return_token_strs: bool = False  # also the tokens as strings


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    tokens: list[TokenId]


class TokenizeResponse(msgspec.Struct, kw_only=True):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None  # with return_token_strs


class DetokenizeResponse(msgspec.Struct, kw_only=True):
    prompt: str
