"""Requests -> prompt token ids, in the serving layer (as vLLM's API server does): render the
chat template, tokenize, truncate, and check the context length before the engine sees it.

The engine gets ``{"prompt_token_ids": ids, "prompt": text}``, so what the user asked about
tokenization (``add_special_tokens``, ``truncate_prompt_tokens``, ``continue_final_message``,
``documents``, assistant ``tool_calls``) is decided here, where the request is known, and the
context-length rule is checked with vLLM's message while the request can still be refused.

    >>> fit_max_tokens(10, None, 64, "prompt")
    54
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actorllm.core.chat_template import render_chat as core_render_chat
from actorllm.core.prompt_embeds import PromptEmbeds
from actorllm.engine.api.beam_search import BEAM_EMBEDS_REFUSAL
from actorllm.engine.api.prompt_embeds import CHAT_PLACEHOLDER, decode_prompt_embeds
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.protocol.chat_request import (
    AssistantMessage,
    ChatMessage,
    Content,
    PromptEmbedsContentPart,
    ToolMessage,
)
from actorllm.entrypoints.openai.protocol.completion import prompt_batch


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt as the engine will run it."""

    text: str | None  # None: only token ids were given (or they were truncated)
    token_ids: list[int]  # an embedding prompt: placeholders of its length
    embeds: PromptEmbeds | None = None  # the prompt as embeddings (prompt_embeds)

    def engine_input(self, cache_salt: str | None = None) -> dict[str, Any]:
        out: dict[str, Any]
        if self.embeds is not None:
            out = {"prompt_embeds": self.embeds}
        else:
            out = {"prompt_token_ids": self.token_ids}
        if self.text is not None:
            out["prompt"] = self.text
        if cache_salt is not None:
            out["cache_salt"] = cache_salt  # mixed into the prefix-cache hashes
        return out


def _ids(encoded: Any) -> list[int]:
    """Token ids from what a tokenizer returns (a list, or a BatchEncoding in transformers 5)."""
    if isinstance(encoded, list):
        return [int(t) for t in encoded]
    ids = encoded["input_ids"]
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(t) for t in ids]


def encode(tokenizer: Any, text: str, *, add_special_tokens: bool) -> list[int]:
    return _ids(tokenizer.encode(text, add_special_tokens=add_special_tokens))


def truncate(prompt: Prompt, k: int | None, max_model_len: int, side: str | None = None) -> Prompt:
    """``truncate_prompt_tokens``: keep ``k`` tokens (-1: max_model_len - 1), the last ones,
    or with ``truncation_side="right"`` the first ones (vLLM's ``TokenizeParams``; None is
    the generating tokenizer's default, "left").

        >>> truncate(Prompt("abc", [1, 2, 3]), 2, 64, "right").token_ids
        [1, 2]
    """
    if k is None:
        return prompt
    if k == 0:
        param = "truncate_prompt_tokens"
        raise bad_request(f"{param} must be -1 or at least 1.", param)
    keep = max_model_len - 1 if k == -1 else k
    if len(prompt.token_ids) <= keep:
        return prompt
    ids = prompt.token_ids[:keep] if side == "right" else prompt.token_ids[-keep:]
    return Prompt(text=None, token_ids=ids)


def embeds_prompts(items: str | list[str] | None, spec: tuple[int, Any] | None) -> list[Prompt]:
    """A completion's ``prompt_embeds`` as prompts (each base64 of ``torch.save``), which
    vLLM runs before the text prompts. Errors are a 400 naming ``prompt_embeds``."""
    if items is None:
        return []
    out = []
    for item in [items] if isinstance(items, str) else items:
        embeds = decode_prompt_embeds(item, spec)
        out.append(Prompt(text=None, token_ids=embeds.placeholder_ids(), embeds=embeds))
    return out


def refuse_beside_embeds(truncate_prompt_tokens: int | None, use_beam_search: bool) -> None:
    """What neither a completion's ``prompt_embeds`` nor a chat's ``prompt_embeds`` parts
    can have: truncation (of rows) and beam search (its beams are token-id prompts)."""
    if truncate_prompt_tokens is not None:
        raise bad_request(
            "truncate_prompt_tokens is not supported with prompt_embeds.",
            "truncate_prompt_tokens",
        )
    if use_beam_search:
        raise bad_request(BEAM_EMBEDS_REFUSAL, "prompt_embeds")


def check_vocabulary(ids: Sequence[int], vocab_size: int, param: str) -> None:
    """A 400 naming ``param`` when an id is outside the vocabulary (negative or too large)."""
    if bad := [t for t in ids if not 0 <= t < vocab_size]:
        raise bad_request(f"token ids {bad[:5]} are out of vocabulary (size {vocab_size}).", param)


def completion_prompts(
    prompt: Any, tokenizer: Any, *, add_special_tokens: bool, vocab_size: int
) -> list[Prompt]:
    """A completion's ``prompt`` field as prompts (one per batch entry); token ids must be
    in the vocabulary (the document says so: ``maximum``). None or "": none (the request
    has prompt_embeds: ``request_rules`` refused it otherwise)."""
    if prompt is None or prompt == "":
        return []
    try:
        batch = prompt_batch(prompt)
    except ValueError as exc:
        raise bad_request(str(exc), "prompt") from None
    for p in batch:
        if not isinstance(p, str):
            check_vocabulary(p, vocab_size, "prompt")
    return [
        Prompt(text=p, token_ids=encode(tokenizer, p, add_special_tokens=add_special_tokens))
        if isinstance(p, str)
        else Prompt(text=None, token_ids=p)
        for p in batch
    ]


def content_text(content: Content | None) -> str:
    """Message content as one string: text parts joined with newlines (vLLM's "string"
    content format, which every text-only chat template understands); a ``prompt_embeds``
    part stands as its placeholder, where its rows are spliced after tokenizing."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(
        CHAT_PLACEHOLDER if isinstance(part, PromptEmbedsContentPart) else part.text
        for part in content
    )


def _tool_call(call: Any) -> dict[str, Any]:
    # Chat templates index arguments as a mapping; OpenAI sends them as JSON text.
    try:
        arguments: Any = json.loads(call.function.arguments)
    except ValueError:
        arguments = call.function.arguments
    return {
        "id": call.id,
        "type": call.type,
        "function": {"name": call.function.name, "arguments": arguments},
    }


def messages_for_template(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """OpenAI messages as the dicts Hugging Face chat templates read."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        entry: dict[str, Any] = {
            "role": type(msg).__struct_config__.tag,
            "content": content_text(msg.content),
        }
        if isinstance(msg, ToolMessage):
            entry["tool_call_id"] = msg.tool_call_id
        elif msg.name is not None:
            entry["name"] = msg.name
        if isinstance(msg, AssistantMessage):
            if msg.tool_calls:
                entry["tool_calls"] = [_tool_call(c) for c in msg.tool_calls]
            reasoning = (
                msg.reasoning_content if msg.reasoning_content is not None else msg.reasoning
            )
            if reasoning is not None:
                entry["reasoning_content"] = reasoning
        out.append(entry)
    return out


@functools.cache
def reserved_template_kwargs() -> frozenset[str]:
    """Names ``chat_template_kwargs`` may not use: ``apply_chat_template``'s own parameters
    and the variables it sets itself (they would clash, or change what it returns)."""
    from transformers import PreTrainedTokenizerBase

    params = inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters
    return frozenset(params) - {"self", "kwargs"} | {"messages"}


def render_chat(
    tokenizer: Any,
    messages: Sequence[ChatMessage],
    *,
    add_generation_prompt: bool,
    continue_final_message: bool,
    documents: list[dict[str, str]] | None,
    chat_template_kwargs: dict[str, Any] | None,
    tools: list[dict[str, Any]] | None = None,
    chat_template: str | None = None,
    embeds_parts: bool = False,
) -> str:
    """The prompt text the chat template makes of ``messages`` (400 if it cannot), by the
    engine's own renderer (:mod:`actorllm.core.chat_template`, which ``LLM.chat`` uses too);
    ``tools`` (OpenAI function tools) go to the template, which must render them.
    ``prompt_embeds`` parts render as their placeholder where the caller splices them
    (``embeds_parts``, chat completions); elsewhere they are a 400."""
    if not embeds_parts and any(
        isinstance(part, PromptEmbedsContentPart)
        for msg in messages
        if isinstance(msg.content, list)
        for part in msg.content
    ):
        raise bad_request(
            "prompt_embeds content parts are taken by /v1/chat/completions only.", "messages"
        )
    return core_render_chat(
        tokenizer,
        messages_for_template(messages),
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        documents=documents,
        chat_template_kwargs=chat_template_kwargs,
        tools=tools,
        chat_template=chat_template,
    )


def effort_kwargs(
    template_kwargs: dict[str, Any] | None,
    effort: str | None,
    asked: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """``reasoning_effort`` as vLLM passes it (``build_chat_params``): a template variable
    over ``template_kwargs``, and ``enable_thinking`` (effort other than "none") unless the
    request's own ``chat_template_kwargs`` (``asked``) set it, so templates that need
    thinking switched on (Gemma 4, Qwen 3) follow the effort.

        >>> effort_kwargs({"enable_thinking": False}, "high", {"enable_thinking": False})
        {'enable_thinking': False, 'reasoning_effort': 'high'}
        >>> effort_kwargs(None, "none")
        {'reasoning_effort': 'none', 'enable_thinking': False}
    """
    if effort is None:
        return template_kwargs
    out = {**(template_kwargs or {}), "reasoning_effort": effort}
    if "enable_thinking" not in (asked or {}):
        out["enable_thinking"] = effort != "none"
    return out


def fit_max_tokens(prompt_len: int, max_tokens: int | None, max_model_len: int, param: str) -> int:
    """``max_tokens`` checked against the context length (vLLM's messages), or, when it was
    omitted, the room the prompt leaves. A prompt that alone is too long names ``param``."""
    if prompt_len >= max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_len} input tokens. Please reduce the length of the input.",
            param,
        )
    if max_tokens is None:
        return max_model_len - prompt_len
    if prompt_len + max_tokens > max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_len + max_tokens} tokens ({prompt_len} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or "
            "completion.",
            "max_tokens",
        )
    return max_tokens
