"""An Anthropic Messages request as the chat request the chat path serves (vLLM's
``AnthropicServingMessages.to_chat_completion_request``).

* ``system`` (a string or text blocks) is the leading system message; text blocks starting
  ``x-anthropic-billing-header`` (Claude Code's per-request hash) are dropped so the prefix
  cache still hits. Inline ``system`` messages stay where they are, or are merged into
  the leading one when the chat template wants the system message first.
* ``text`` blocks are content, ``thinking`` blocks the assistant's reasoning,
  ``redacted_thinking`` blocks are skipped (their content is opaque), ``tool_use`` blocks
  the assistant's ``tool_calls``; a user's ``tool_result`` block is a ``tool`` message
  (its text blocks joined by newlines) placed before the rest of that user message, an
  assistant's a text part ``Tool result: ...``.
* ``tool_addition`` / ``tool_removal`` blocks (system messages only) change the tools in
  effect at the end of the conversation.
* ``max_tokens``, ``stop_sequences``, ``temperature``, ``top_p``, ``top_k`` are the chat
  fields of those names; ``output_config.format`` is ``response_format``,
  ``output_config.effort`` ``reasoning_effort``; ``thinking.type`` "disabled" renders
  with the server's disabled-thinking effort, "adaptive" pins nothing, "enabled" makes
  its ``budget_tokens`` the ``thinking_token_budget`` (a 400 naming that field where the
  server has no reasoning parser or config, as vLLM).

Refused by name (400): images (this server serves text models), deferred tools
(``defer_loading``, ``tool_reference``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import msgspec

from actorllm.entrypoints.anthropic.protocol import (
    AnthropicContentBlock,
    AnthropicCountTokensRequest,
    AnthropicMessage,
    AnthropicMessagesRequest,
    AnthropicThinkingDisabled,
    AnthropicThinkingEnabled,
    AnthropicTool,
    AnthropicToolDefinition,
    DisabledThinkingEffort,
)
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest

_BILLING_HEADER = "x-anthropic-billing-header"
_TEXT_ONLY = "this server serves text models"
_DEFERRED = "deferred tool loading (defer_loading, tool_reference)"


# Anthropic's fields that ask for a service this server does not run ({field: what it
# asks}): refused by name when set, where vLLM ignores them.
UNSERVED = {
    "mcp_servers": "remote MCP servers",
    "container": "a code-execution container",
    "context_management": "server-side context editing",
}


def refuse_unserved(body: dict[str, Any]) -> None:
    """400 naming the first field of :data:`UNSERVED` the raw body sets."""
    for name, what in UNSERVED.items():
        if body.get(name) not in (None, [], {}):
            _refuse(f"`{name}`", f"it has no {what}", name)


def _refuse(what: str, why: str, param: str) -> None:
    raise bad_request(f"{what} is not supported by this server: {why}.", param)


@dataclass(frozen=True, slots=True)
class Conversion:
    """What the conversion needs to know about the served chat template."""

    merge_inline_system: bool = False  # the template wants one system message, first
    disabled_thinking_effort: DisabledThinkingEffort = "none"


def _system_text(content: str | list[AnthropicContentBlock]) -> str | None:
    """A system message's text, billing headers dropped (None when nothing is left)."""
    if isinstance(content, str):
        return None if content.startswith(_BILLING_HEADER) else content
    parts = [
        b.text
        for b in content
        if b.type == "text" and b.text and not b.text.startswith(_BILLING_HEADER)
    ]
    return "".join(parts) if parts else None


def _system_message(req: AnthropicCountTokensRequest, merge: bool) -> list[dict[str, Any]]:
    parts: list[str] = []
    if isinstance(req.system, str) and req.system:
        parts.append(req.system)  # vLLM keeps a string system prompt whole
    elif isinstance(req.system, list) and (text := _system_text(req.system)):
        parts.append(text)
    if merge:
        for msg in req.messages:
            if msg.role == "system" and (text := _system_text(msg.content)):
                parts.append(text)
    return [{"role": "system", "content": "".join(parts)}] if parts else []


def _tool_result(block: AnthropicContentBlock, out: list[dict[str, Any]]) -> None:
    """A user's tool_result block: a ``tool`` message."""
    text = ""
    if isinstance(block.content, str):
        text = block.content
    elif isinstance(block.content, list):
        texts = []
        for item in block.content:
            kind = item.get("type")
            if kind == "text":
                texts.append(str(item.get("text", "")))
            elif kind == "image":
                _refuse("An image in a tool_result", _TEXT_ONLY, "messages")
            elif kind == "tool_reference":
                _refuse("A tool_reference block", _DEFERRED, "messages")
        text = "\n".join(texts)
    out.append({"role": "tool", "tool_call_id": block.tool_use_id or "", "content": text})


def _blocks(
    msg: AnthropicMessage, blocks: list[AnthropicContentBlock], out: list[dict[str, Any]]
) -> None:
    """A message of blocks, appended to ``out`` after the tool messages it holds."""
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for b in blocks:
        if b.type == "text" and b.text:
            parts.append({"type": "text", "text": b.text})
        elif b.type == "image":
            _refuse("An image content block", _TEXT_ONLY, "messages")
        elif b.type == "thinking" and b.thinking is not None:
            reasoning.append(b.thinking)
        elif b.type == "tool_use":
            fn = {"name": b.name or "", "arguments": json.dumps(b.input or {})}
            calls.append({"id": b.id or f"call_{int(time.time())}", "function": fn})
        elif b.type == "tool_result":
            if msg.role == "user":
                _tool_result(b, out)
            else:  # vLLM's: the result's Python text, as an assistant's text part
                shown = str(b.content) if b.content else ""
                parts.append({"type": "text", "text": f"Tool result: {shown}"})
        elif b.type == "tool_reference":
            _refuse("A tool_reference block", _DEFERRED, "messages")
        # redacted_thinking: opaque, skipped; a text or thinking block without its text
        # has nothing to say (vLLM skips both).
    message: dict[str, Any] = {"role": msg.role}
    if reasoning:
        message["reasoning"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    if parts:
        only_text = len(parts) == 1
        message["content"] = parts[0]["text"] if only_text else parts
    if msg.role == "user" and "content" not in message:
        return  # only tool results: they are the turn
    out.append(message)


def _messages(req: AnthropicCountTokensRequest, merge: bool) -> list[dict[str, Any]]:
    out = _system_message(req, merge)
    for msg in req.messages:
        if msg.role == "system":
            if not merge and (text := _system_text(msg.content)):
                out.append({"role": "system", "content": text})
        elif isinstance(msg.content, str):
            out.append({"role": msg.role, "content": msg.content})
        else:
            _blocks(msg, msg.content, out)
    return out


def _resolved_tools(req: AnthropicCountTokensRequest) -> list[AnthropicTool] | None:
    """``tools`` as the tool_addition / tool_removal blocks leave them (vLLM's
    ``_resolve_tools``): the tools in effect at the end of the conversation."""
    changes = [
        b
        for msg in req.messages
        if not isinstance(msg.content, str)
        for b in msg.content
        if b.type in ("tool_addition", "tool_removal")
    ]
    if not changes:
        return req.tools
    tools = {t.name: t for t in req.tools or []}
    removed: set[str] = set()
    for b in changes:
        change = b.tool
        assert change is not None  # the protocol requires it
        if isinstance(change, AnthropicToolDefinition):
            name = change.definition.name
            tools[name] = change.definition
        else:
            name = change.name
            if name not in tools:
                raise bad_request(
                    f"{b.type} references tool {name!r}, which is not declared in tools",
                    "messages",
                )
            if b.type == "tool_addition":
                tools[name] = msgspec.structs.replace(tools[name], defer_loading=None)
        if b.type == "tool_removal":
            removed.add(name)
        else:
            removed.discard(name)
    return [t for name, t in tools.items() if name not in removed]


def _tools(req: AnthropicCountTokensRequest, chat: dict[str, Any]) -> None:
    choice = req.tool_choice
    if choice is not None:
        chat["parallel_tool_calls"] = not choice.disable_parallel_tool_use
        named = {"type": "function", "function": {"name": choice.name}}
        by_type = {"auto": "auto", "any": "required", "none": "none", "tool": named}
        chat["tool_choice"] = by_type[choice.type]
    tools = _resolved_tools(req)
    if tools is None:
        return
    if any(t.defer_loading for t in tools):
        _refuse("A tool with defer_loading", _DEFERRED, "tools")
    chat["tools"] = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
                "strict": t.strict,
            },
        }
        for t in tools
    ]
    chat.setdefault("tool_choice", "auto")


def _output_and_thinking(
    req: AnthropicCountTokensRequest, chat: dict[str, Any], conv: Conversion
) -> None:
    oc = req.output_config
    if oc is not None and oc.format is not None and oc.format.json_schema:
        chat["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": oc.format.type, "schema": oc.format.json_schema},
        }
    if oc is not None and oc.effort is not None:
        chat["reasoning_effort"] = oc.effort
    thinking = req.thinking  # adaptive pins nothing: the model chooses its depth
    if isinstance(thinking, AnthropicThinkingDisabled):
        chat["reasoning_effort"] = conv.disabled_thinking_effort
    elif isinstance(thinking, AnthropicThinkingEnabled) and isinstance(
        req, AnthropicMessagesRequest
    ):
        # Counting tokens needs no budget (nor its check of the server's reasoning config).
        chat["thinking_token_budget"] = thinking.budget_tokens


def count_request(req: AnthropicCountTokensRequest, conv: Conversion) -> ChatCompletionRequest:
    """The chat request whose prompt ``count_tokens`` counts."""
    chat: dict[str, Any] = {
        "model": req.model,
        "messages": _messages(req, conv.merge_inline_system),
        "chat_template_kwargs": req.chat_template_kwargs,
    }
    _output_and_thinking(req, chat, conv)
    _tools(req, chat)
    return msgspec.convert(chat, ChatCompletionRequest)


def chat_request(req: AnthropicMessagesRequest, conv: Conversion) -> ChatCompletionRequest:
    """The chat request a Messages request runs as. Raises APIError (400) for what the
    chat path cannot serve, msgspec.ValidationError (400) for a value it refuses."""
    chat: dict[str, Any] = {
        "model": req.model,
        "messages": _messages(req, conv.merge_inline_system),
        "max_tokens": req.max_tokens,
        "max_completion_tokens": req.max_tokens,
        "stop": req.stop_sequences,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "cache_salt": req.cache_salt,
        "vllm_xargs": req.vllm_xargs,
        "chat_template_kwargs": req.chat_template_kwargs,
        "watermarking": req.watermarking,
    }
    if req.stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    _output_and_thinking(req, chat, conv)
    _tools(req, chat)
    return msgspec.convert(chat, ChatCompletionRequest)
