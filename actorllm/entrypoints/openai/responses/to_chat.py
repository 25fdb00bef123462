"""A Responses request as the chat request the chat path serves.

``input`` items become chat messages as vLLM builds them (``construct_input_messages``):
``instructions`` a system message first, then an earlier turn's messages
(``previous_response_id``), then the items: messages as they are, ``function_call``
items as the assistant's ``tool_calls`` (merged into the assistant message before them),
``function_call_output`` items as ``tool`` messages, ``reasoning`` items as the
assistant's reasoning. Function ``tools`` / ``tool_choice`` take the chat shapes;
``text.format`` becomes ``response_format``.

What the chat path cannot serve is refused here by name (:func:`refuse_unserved`), before
the body is decoded: built-in tools, image and file inputs, prompt templates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.protocol.chat_request import (
    AssistantMessage,
    ChatCompletionRequest,
    ChatMessage,
    Content,
    DeveloperMessage,
    FunctionCall,
    FunctionDefinition,
    NamedFunction,
    NamedToolChoice,
    SystemMessage,
    TextContentPart,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from actorllm.entrypoints.openai.protocol.response_format import (
    JsonObjectFormat,
    JsonSchemaFormat,
    JsonSchemaResponseFormat,
    ResponseFormat,
)
from actorllm.entrypoints.openai.responses.request import (
    ContentPart,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionToolChoice,
    InputItem,
    MessageItem,
    ReasoningItem,
    RefusalContent,
    ResponsesRequest,
    TextFormatJsonObject,
    TextFormatJsonSchema,
)

_ITEMS = ("message", "function_call", "function_call_output", "reasoning")
_PARTS = ("input_text", "output_text", "refusal")
_BUILT_IN = (
    "this server has no built-in tools (web search, file search, computer use, MCP, code "
    "interpreter, image generation, shell); pass function tools"
)
_INCLUDES = ("message.output_text.logprobs", "reasoning.encrypted_content")
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def _refuse(what: str, why: str, param: str) -> None:
    raise bad_request(f"{what} is not supported by this server: {why}.", param)


def refuse_unserved(body: dict[str, Any]) -> None:
    """400 naming the first thing in the raw body the chat path cannot serve."""
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind is not None and kind != "function":
            _refuse(f"The {kind!r} tool", _BUILT_IN, "tools")
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") not in (None, "function"):
        _refuse(f"tool_choice of type {choice.get('type')!r}", _BUILT_IN, "tool_choice")
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind not in _ITEMS:
            _refuse(
                f"The input item type {kind!r}",
                "it serves message, function_call, function_call_output and reasoning items",
                "input",
            )
        if kind == "reasoning" and item.get("encrypted_content"):
            raise bad_request("Encrypted content is not supported.", "input")  # vLLM's words
        content = item.get("content")
        for part in content if kind == "message" and isinstance(content, list) else []:
            part_kind = part.get("type") if isinstance(part, dict) else None
            if part_kind is not None and part_kind not in _PARTS:
                _refuse(f"{part_kind!r} content", "this server serves text models", "input")
    if body.get("prompt") is not None:
        raise bad_request("prompt template is not supported", "prompt")  # vLLM's words
    tier = body.get("service_tier")
    if tier not in (None, "auto", "default"):
        _refuse(f"service_tier {tier!r}", "it has one service tier", "service_tier")
    include = body.get("include")
    for name in include if isinstance(include, list) else []:
        if isinstance(name, str) and name not in _INCLUDES:
            _refuse(f"include {name!r}", "it needs an input or tool this server lacks", "include")
    text = body.get("text")
    if isinstance(text, dict) and text.get("verbosity") is not None:
        _refuse("text.verbosity", "verbosity", "text")


def _text(parts: str | Sequence[ContentPart]) -> str:
    if isinstance(parts, str):
        return parts
    return "".join(p.refusal if isinstance(p, RefusalContent) else p.text for p in parts)


def _parts(content: str | Sequence[ContentPart]) -> Content:
    if isinstance(content, str):
        return content
    return [TextContentPart(text=_text([p])) for p in content]


def _last_assistant(messages: list[ChatMessage]) -> AssistantMessage | None:
    last = messages[-1] if messages else None
    return last if isinstance(last, AssistantMessage) else None


def items_to_messages(items: Sequence[InputItem], messages: list[ChatMessage]) -> None:
    """Append ``items`` to ``messages`` as chat messages (vLLM's merging rules)."""
    for item in items:
        prev = _last_assistant(messages)
        if isinstance(item, MessageItem):
            if item.role == "assistant":
                text = _text(item.content)
                if prev is not None and prev.content is None:
                    prev.content = text
                else:
                    messages.append(AssistantMessage(content=text))
            elif item.role == "system":
                messages.append(SystemMessage(content=_parts(item.content)))
            elif item.role == "developer":
                messages.append(DeveloperMessage(content=_parts(item.content)))
            else:
                messages.append(UserMessage(content=_parts(item.content)))
        elif isinstance(item, FunctionCallItem):
            fn = FunctionCall(name=item.name, arguments=item.arguments)
            call = ToolCall(id=item.call_id, function=fn)
            if prev is not None:
                prev.tool_calls = [*(prev.tool_calls or []), call]
            else:
                messages.append(AssistantMessage(tool_calls=[call]))
        elif isinstance(item, FunctionCallOutputItem):
            output = item.output if isinstance(item.output, str) else _parts(item.output)
            messages.append(ToolMessage(content=output, tool_call_id=item.call_id))
        elif isinstance(item, ReasoningItem):
            text = ""
            if item.content:
                text = item.content[0].text
            elif item.summary:
                text = item.summary[0].text
            if prev is not None and prev.reasoning_content is None:
                prev.reasoning_content = text
            else:
                messages.append(AssistantMessage(reasoning_content=text))


def _continues(items: str | Sequence[InputItem]) -> bool:
    """vLLM: a last assistant message still in progress is continued (vLLM continues a
    reasoning item too; with no answer text there is nothing here to continue)."""
    if isinstance(items, str) or not items:
        return False
    last = items[-1]
    return (
        isinstance(last, MessageItem)
        and last.role == "assistant"
        and last.status in ("in_progress", "incomplete")
    )


def _format(req: ResponsesRequest) -> ResponseFormat | None:
    fmt = req.text.format if req.text is not None else None
    if fmt is not None and req.structured_outputs is not None:
        raise bad_request(
            "Cannot specify both structured_outputs and text.format", "structured_outputs"
        )  # vLLM's words
    if isinstance(fmt, TextFormatJsonObject):
        return JsonObjectFormat()
    if isinstance(fmt, TextFormatJsonSchema):
        spec = JsonSchemaFormat(
            name=fmt.name, description=fmt.description, schema=fmt.schema, strict=fmt.strict
        )
        return JsonSchemaResponseFormat(json_schema=spec)
    return None


def _tool_choice(req: ResponsesRequest) -> Any:
    """vLLM's checks (``check_tool_usage``), with its messages."""
    choice = req.tool_choice
    if not req.tools:
        if choice in ("auto", "none"):
            return "none"
        if choice == "required":
            raise bad_request(
                "Tool choice 'required' must be specified with 'tools' parameter.",
                "tool_choice",
            )
    if isinstance(choice, FunctionToolChoice):
        if all(t.name != choice.name for t in req.tools):
            raise bad_request(
                "Tool choice 'function' not found in 'tools' parameter.", "tool_choice"
            )
        return NamedToolChoice(function=NamedFunction(name=choice.name))
    return choice


def chat_request(
    req: ResponsesRequest,
    earlier: Sequence[ChatMessage],
    *,
    truncate_to: int | None,
) -> ChatCompletionRequest:
    """The chat request serving ``req``; ``earlier``: the previous turn's messages
    (``previous_response_id``) without its system message; ``truncate_to``: the prompt
    tokens kept under ``truncation: "auto"`` (the last ones)."""
    messages: list[ChatMessage] = []
    if req.instructions:
        messages.append(SystemMessage(content=req.instructions))
    messages += [m for m in earlier if not isinstance(m, SystemMessage)]
    if isinstance(req.input, str):
        messages.append(UserMessage(content=req.input))
    else:
        items_to_messages(req.input, messages)
    if not messages:
        raise bad_request("input must not be empty.", "input")
    tools = [
        Tool(
            function=FunctionDefinition(
                name=t.name, description=t.description, parameters=t.parameters, strict=t.strict
            )
        )
        for t in req.tools
    ]
    cont = _continues(req.input)
    logprobs = LOGPROBS_INCLUDE in (req.include or [])
    effort = req.reasoning.effort if req.reasoning is not None else None
    return ChatCompletionRequest(
        messages=messages,
        model=req.model,
        stream=bool(req.stream),
        tools=tools or None,
        tool_choice=_tool_choice(req),
        parallel_tool_calls=req.parallel_tool_calls,
        include_reasoning=req.include_reasoning,
        reasoning_effort=effort,
        add_generation_prompt=not cont,
        continue_final_message=cont,
        chat_template_kwargs=req.chat_template_kwargs,
        logprobs=logprobs,
        top_logprobs=req.top_logprobs if logprobs else None,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        min_p=req.min_p,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=req.repetition_penalty,
        seed=req.seed,
        stop=req.stop,
        stop_token_ids=req.stop_token_ids,
        ignore_eos=req.ignore_eos,
        skip_special_tokens=req.skip_special_tokens,
        include_stop_str_in_output=req.include_stop_str_in_output,
        logit_bias=req.logit_bias,
        priority=req.priority,
        cache_salt=req.cache_salt,
        user=req.user,
        session_id=req.session_id,
        truncate_prompt_tokens=truncate_to,
        response_format=_format(req),
        structured_outputs=req.structured_outputs,
        vllm_xargs=req.vllm_xargs,
        watermarking=req.watermarking,
        # enable_response_messages: the prompt's and the answer's text and token ids
        return_token_ids=req.enable_response_messages,
        return_prompt_text=req.enable_response_messages,
    )
