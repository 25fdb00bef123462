"""A Cohere v2 chat request as the chat request the chat path serves (vLLM's
``CohereServingChatV2.to_chat_completion_request``).

* ``system`` messages: their text (blocks joined); ``user`` messages: their text, or
  text parts; ``assistant`` messages: text blocks are the content, ``thinking`` blocks and
  ``tool_plan`` the reasoning, ``tool_calls`` the calls (arguments default to ``{}``);
  ``tool`` messages: their text, a ``document`` block as its JSON text.
* ``max_tokens``, ``stop_sequences``, ``temperature``, ``seed``, ``frequency_penalty``,
  ``presence_penalty``, ``priority`` are the chat fields of those names, ``k`` and ``p``
  ``top_k`` and ``top_p``; ``logprobs`` asks for the sampled tokens' logprobs and ids.
* ``response_format`` ``json_object`` is a JSON-schema constraint when it carries
  ``json_schema``, else any JSON object; ``tools`` are function tools (``strict`` when
  ``strict_tools``); ``tool_choice`` REQUIRED / NONE are "required" / "none", and tools
  without it "auto".
* ``documents`` go to the chat template as its ``documents`` (each ``{"id", "data"}``, a
  string as ``{"text": ...}``, ids ``doc_<i>`` where missing); ``safety_mode`` (lower
  case), ``citation_options`` and ``thinking`` go to it as variables of those names
  unless the request's ``chat_template_kwargs`` set them.

Refused by name (400): images (this server serves text models), and the citations of an
earlier assistant turn (only Cohere's own prompt renderer, ``--tokenizer-mode cohere``,
writes them into a prompt; it is not built here, and they are not dropped silently).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from actorllm.entrypoints.cohere.protocol import (
    CohereAssistantMessage,
    CohereChatRequest,
    CohereDocument,
    CohereImageContent,
    CohereJsonFormat,
    CohereMessage,
    CohereSystemMessage,
    CohereText,
    CohereThinking,
    CohereToolMessage,
    CohereUserMessage,
)
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest

SCHEMA_NAME = "cohere_v2_json_schema"  # vLLM's name for the response_format's schema


def _refuse(param: str, why: str) -> None:
    """A 400 naming the field in its message (Cohere's error body has no ``param``)."""
    raise bad_request(f"`{param}` is not supported by this server: {why}.", param)


def _user(msg: CohereUserMessage, i: int) -> dict[str, Any]:
    if isinstance(msg.content, str):
        return {"role": "user", "content": msg.content}
    parts: list[dict[str, Any]] = []
    for block in msg.content:
        if isinstance(block, CohereImageContent):
            _refuse(f"messages[{i}].content (image_url)", "this server serves text models")
        else:
            parts.append({"type": "text", "text": block.text})
    if len(parts) == 1:
        return {"role": "user", "content": parts[0]["text"]}
    return {"role": "user", "content": parts}


def _assistant(msg: CohereAssistantMessage, i: int) -> dict[str, Any]:
    if msg.citations:
        _refuse(
            f"messages[{i}].citations",
            "only Cohere's prompt renderer (--tokenizer-mode cohere, not built) writes an "
            "earlier answer's citations into a prompt; send the message without them",
        )
    texts: list[str] = []
    thoughts: list[str] = []
    if isinstance(msg.content, str):
        texts.append(msg.content)
    elif msg.content is not None:
        for block in msg.content:
            if isinstance(block, CohereThinking):
                thoughts.append(block.thinking)
            else:
                texts.append(block.text)
    if msg.tool_plan:  # the plan before the calls is the turn's reasoning
        thoughts.append(msg.tool_plan)
    out: dict[str, Any] = {"role": "assistant"}
    if texts:
        out["content"] = "".join(texts)
    if thoughts:
        out["reasoning"] = "".join(thoughts)
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": (call.function.name if call.function else None) or "",
                    "arguments": (call.function.arguments if call.function else None) or "{}",
                },
            }
            for call in msg.tool_calls
        ]
    return out


def _tool(msg: CohereToolMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "tool", "tool_call_id": msg.tool_call_id}
    if isinstance(msg.content, str):
        return {**out, "content": msg.content}
    parts = [
        {"type": "text", "text": block.text}
        if isinstance(block, CohereText)
        else {"type": "text", "text": json.dumps(msgspec.to_builtins(block.document))}
        for block in msg.content
    ]
    return {**out, "content": parts}


def _message(msg: CohereMessage, i: int) -> dict[str, Any]:
    if isinstance(msg, CohereSystemMessage):
        text = msg.content
        if not isinstance(text, str):
            text = "".join(block.text for block in text)
        return {"role": "system", "content": text}
    if isinstance(msg, CohereUserMessage):
        return _user(msg, i)
    if isinstance(msg, CohereAssistantMessage):
        return _assistant(msg, i)
    return _tool(msg)


def documents_of(req: CohereChatRequest) -> list[dict[str, Any]] | None:
    """The ``documents`` the chat template sees (vLLM's shape)."""
    if not req.documents:
        return None
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(req.documents):
        if isinstance(doc, CohereDocument):
            out.append({"id": doc.id or f"doc_{i}", "data": doc.data})
        else:
            out.append({"id": f"doc_{i}", "data": {"text": doc}})
    return out


def _template_kwargs(req: CohereChatRequest) -> dict[str, Any] | None:
    kwargs = dict(req.chat_template_kwargs or {})
    if req.safety_mode is not None:
        kwargs.setdefault("safety_mode", req.safety_mode.lower())
    if req.citation_options is not None:
        kwargs.setdefault("citation_options", msgspec.to_builtins(req.citation_options))
    if req.thinking is not None:
        kwargs.setdefault("thinking", msgspec.to_builtins(req.thinking))
    return kwargs or None


def _response_format(req: CohereChatRequest) -> dict[str, Any] | None:
    rf = req.response_format
    if not isinstance(rf, CohereJsonFormat):
        return None
    if rf.json_schema:
        return {
            "type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "schema": rf.json_schema},
        }
    return {"type": "json_object"}


def _tools(req: CohereChatRequest, chat: dict[str, Any]) -> None:
    if req.tools:
        strict = {"strict": True} if req.strict_tools else {}
        chat["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.function.name,
                    "description": t.function.description,
                    "parameters": t.function.parameters,
                    **strict,
                },
            }
            for t in req.tools
        ]
    if req.tool_choice is not None:
        chat["tool_choice"] = req.tool_choice.lower()  # REQUIRED / NONE
    elif req.tools:
        chat["tool_choice"] = "auto"  # Cohere's free choice when tools are given


def chat_request(req: CohereChatRequest) -> ChatCompletionRequest:
    """The chat request a Cohere v2 request runs as. Raises APIError (400) for what the
    chat path cannot serve, msgspec.ValidationError (400) for a value it refuses."""
    fields: dict[str, Any] = {
        "model": req.model,
        "messages": [_message(m, i) for i, m in enumerate(req.messages)],
        "max_tokens": req.max_tokens,
        "max_completion_tokens": req.max_tokens,
        "stop": req.stop_sequences,
        "temperature": req.temperature,
        "top_p": req.p,
        "top_k": req.k,
        "seed": req.seed,
        "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty,
        "logprobs": req.logprobs,
        "return_token_ids": req.logprobs,  # a logprob item carries its token's id
        "priority": req.priority,
        "chat_template_kwargs": _template_kwargs(req),
        "response_format": _response_format(req),
        "watermarking": req.watermarking,
    }
    chat = {k: v for k, v in fields.items() if v is not None}
    if req.stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    _tools(req, chat)
    converted = msgspec.convert(chat, ChatCompletionRequest)
    documents = documents_of(req)
    if documents is None:
        return converted
    # Cohere's documents hold nested data (the chat field declares flat string maps):
    # set past validation, they go to the template as they are, as vLLM's do.
    return msgspec.structs.replace(converted, documents=documents)
