"""Chat requests on a gpt-oss model: the prompt in harmony (vLLM's
``_make_request_with_harmony``), not through the chat template.

The leading system or developer message becomes the developer message's instructions,
the request's function tools its ``functions`` namespace, ``reasoning_effort`` the
system message's ``Reasoning:`` line; assistant turns are replayed as harmony messages
(reasoning on ``analysis``, tool calls on ``commentary`` to ``functions.NAME``, the reply
on ``final``), tool results as ``functions.NAME`` messages, and the reasoning of turns
the assistant already answered is dropped (harmony's auto-drop). Sampling stops at
``<|return|>`` and ``<|call|>``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actorllm.core.harmony import (
    CALL,
    CHANNEL,
    END,
    RETURN,
    SPECIAL_TOKENS,
    START,
    HarmonyMessage,
    Segment,
    SystemContent,
    render_for_completion,
)
from actorllm.core.harmony.dicts import developer_dict, message_dict, message_from_dict, system_dict
from actorllm.core.harmony.render import EFFORTS, DeveloperContent, FunctionTool, developer_text
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.preprocess import Prompt, content_text
from actorllm.entrypoints.openai.protocol.chat_request import (
    AssistantMessage,
    ChatCompletionRequest,
    ChatMessage,
    DeveloperMessage,
    PromptEmbedsContentPart,
    SystemMessage,
    ToolMessage,
)
from actorllm.entrypoints.openai.structured_request import ToolPlan, ToolSettings, plan_tools
from actorllm.entrypoints.openai.tool_parsers import OpenAIToolParser

# vLLM's VLLM_SYSTEM_START_DATE (pins the system message's date; default: today).
START_DATE_ENV = ("ACTORLLM_SYSTEM_START_DATE", "VLLM_SYSTEM_START_DATE")


def is_harmony_model(model_dir: Path | None) -> bool:
    """vLLM uses harmony for ``model_type: gpt_oss`` checkpoints."""
    if model_dir is None:
        return False
    cfg = Path(model_dir) / "config.json"
    if not cfg.is_file():
        return False
    try:
        return json.loads(cfg.read_text()).get("model_type") == "gpt_oss"
    except (OSError, ValueError):
        return False


def check_tokenizer(tokenizer: Any) -> None:
    """A gpt-oss tokenizer must know harmony's special tokens (checked at start-up)."""
    vocab = tokenizer.get_vocab()
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise ValueError(
            f"this gpt-oss model's tokenizer lacks harmony's special tokens {missing}: "
            "the server cannot render its prompts"
        )


def stop_token_ids(tokenizer: Any) -> list[int]:
    """``<|return|>`` and ``<|call|>``: the model is done, or calls a tool."""
    return [int(tokenizer.convert_tokens_to_ids(t)) for t in (RETURN, CALL)]


# tool_choice "required" (vLLM's OpenAIToolParser): the answer may not start on the final
# channel nor end with <|return|>, so the turn can only end in a call (<|call|>). Analysis
# and preambles stay free. Sequences whose words are not single tokens are left out.
NO_ANSWER = (
    (END, START, "assistant", CHANNEL, "final"),
    (END, START, "assistant", CHANNEL, " final"),
    (END, START, "assistant", CHANNEL, "finally"),
    (RETURN,),
)


def required_call_bans(tokenizer: Any) -> list[list[int]]:
    """``bad_words_token_ids`` for tool_choice "required": :data:`NO_ANSWER`, whose
    pieces are each one token (the input processor adds the request's own ``bad_words``
    beside them)."""
    vocab = tokenizer.get_vocab()
    out: list[list[int]] = []
    for pattern in NO_ANSWER:
        ids = [vocab.get(piece) for piece in pattern]
        if all(i is not None for i in ids):
            out.append([int(i) for i in ids if i is not None])
    return out


def required_plan(body: dict[str, Any], tokenizer: Any) -> ToolPlan:
    """tool_choice "required": the tools checked as for any request, read by the harmony
    parser (no ``--tool-call-parser`` needed, as for "required" on other models)."""
    base = plan_tools({**body, "tool_choice": "none"}, ToolSettings(), tokenizer)
    if not base.template_tools:
        raise bad_request("tool_choice needs tools.", "tool_choice")
    return dataclasses.replace(base, parser=OpenAIToolParser(tokenizer, tools=base.template_tools))


def check_request(req: ChatCompletionRequest) -> None:
    """What harmony prompts have no place for: a 400 naming the field (vLLM's harmony
    path drops these without a word)."""
    unused = {
        "chat_template": req.chat_template is not None,
        "chat_template_kwargs": bool(req.chat_template_kwargs),
        "documents": req.documents is not None,
        "continue_final_message": req.continue_final_message,
        "add_generation_prompt": not req.add_generation_prompt,
        "echo": req.echo,
    }
    for name, asked in unused.items():
        if asked:
            raise bad_request(
                f"{name} is not used by gpt-oss models: their prompts are rendered in the "
                "harmony format, not by a chat template.",
                name,
            )
    if not isinstance(req.tool_choice, str | None):
        raise bad_request(
            "a named function in tool_choice is not supported for gpt-oss (harmony) "
            "models; use 'auto', 'required' or 'none'.",
            "tool_choice",
        )
    effort = req.reasoning_effort
    if effort is not None and effort not in EFFORTS:
        raise bad_request(
            f"reasoning_effort={effort!r} is not supported by harmony; supported values "
            f"are: {', '.join(EFFORTS)}.",
            "reasoning_effort",
        )


@dataclass(frozen=True)
class HarmonyPrompt:
    """A rendered harmony prompt and the messages it was made of."""

    prompt: Prompt
    system: SystemContent
    developer: DeveloperContent | None
    conversation: list[HarmonyMessage]

    def message_dicts(self) -> list[dict[str, Any]]:
        """As vLLM's ``input_messages`` (``openai_harmony``'s ``Message.to_dict()``)."""
        out = [system_dict(self.system)]
        if self.developer is not None:
            out.append(developer_dict(self.developer))
        return out + [message_dict(m) for m in self.conversation]


def render_prompt(
    tokenizer: Any,
    messages: Sequence[ChatMessage],
    *,
    tools: list[dict[str, Any]] | None,
    reasoning_effort: str | None,
    history: Sequence[HarmonyMessage] = (),
) -> HarmonyPrompt:
    """The harmony prompt of a chat, as text (special tokens written out) and token ids.
    ``history``: harmony messages before the chat's own (``previous_input_messages``)."""
    instructions, rest = _peel_instructions(messages)
    function_tools = tuple(_function_tool(t) for t in tools or [])
    system = SystemContent(
        reasoning_effort=reasoning_effort or "medium", conversation_start_date=_start_date()
    )
    developer = None
    if instructions is not None or function_tools:
        developer = DeveloperContent(instructions=instructions, tools=function_tools)
    conversation = _drop_answered_reasoning([*history, *to_harmony(rest)])
    segments = render_for_completion(conversation, system, developer)
    prompt = Prompt("".join(s.text for s in segments), tokenize(tokenizer, segments))
    return HarmonyPrompt(prompt, system, developer, conversation)


def history_from_dicts(raw: Any) -> list[HarmonyMessage]:
    """``previous_input_messages`` (``Message.to_dict()`` objects) as harmony messages; the
    system and developer messages are left out, as vLLM does (this request's own settings
    and tools make them). A 400 naming the field for anything else."""
    if not isinstance(raw, list):
        raise bad_request("previous_input_messages must be a list.", "previous_input_messages")
    out = []
    for i, item in enumerate(raw):
        try:
            msg = message_from_dict(item)
        except ValueError as exc:
            raise bad_request(
                f"previous_input_messages[{i}]: {exc}.", "previous_input_messages"
            ) from None
        if msg.role not in ("system", "developer"):
            out.append(msg)
    return out


def tokenize(tokenizer: Any, segments: Sequence[Segment]) -> list[int]:
    """Each piece on its own, as ``openai_harmony`` does: special tokens by id, text as
    ordinary text (a special token's name in a message stays text)."""
    ids: list[int] = []
    for seg in segments:
        if seg.special:
            ids.append(int(tokenizer.convert_tokens_to_ids(seg.text)))
        elif seg.text:
            ids += tokenizer.encode(seg.text, add_special_tokens=False, split_special_tokens=True)
    return ids


def to_harmony(messages: Sequence[ChatMessage]) -> list[HarmonyMessage]:
    """Chat messages (after the instructions) as harmony messages (vLLM's
    ``parse_chat_inputs_to_harmony_messages``)."""
    names = {
        call.id: call.function.name
        for m in messages
        if isinstance(m, AssistantMessage)
        for call in m.tool_calls or []
    }
    out: list[HarmonyMessage] = []
    for m in messages:
        _check_text(m)
        if isinstance(m, AssistantMessage):
            out += _assistant(m)
        elif isinstance(m, ToolMessage):
            out.append(
                HarmonyMessage(
                    "tool",
                    content_text(m.content),
                    name=f"functions.{names.get(m.tool_call_id, '')}",
                    channel="commentary",
                    recipient="assistant",
                )
            )
        elif isinstance(m, SystemMessage | DeveloperMessage):
            text = developer_text(DeveloperContent(instructions=content_text(m.content)))
            out.append(HarmonyMessage("developer", text))
        else:
            out.append(HarmonyMessage("user", content_text(m.content)))
    return out


def _assistant(m: AssistantMessage) -> list[HarmonyMessage]:
    out = []
    reasoning = m.reasoning_content or m.reasoning
    text = content_text(m.content)
    if m.tool_calls:
        if text:  # a preamble before the calls
            out.append(HarmonyMessage("assistant", text, channel="commentary"))
        if reasoning:
            out.append(HarmonyMessage("assistant", reasoning, channel="analysis"))
        for call in m.tool_calls:
            out.append(
                HarmonyMessage(
                    "assistant",
                    call.function.arguments or "",
                    channel="commentary",
                    recipient=f"functions.{call.function.name}",
                    content_type="json",
                )
            )
        return out
    if reasoning:
        out.append(HarmonyMessage("assistant", reasoning, channel="analysis"))
    if text:
        out.append(HarmonyMessage("assistant", text, channel="final"))
    return out


def _drop_answered_reasoning(msgs: list[HarmonyMessage]) -> list[HarmonyMessage]:
    """Analysis messages before the assistant's last ``final`` message go: the model
    reasoned them for turns it has answered."""
    last = max(
        (i for i, m in enumerate(msgs) if m.role == "assistant" and m.channel == "final"),
        default=-1,
    )
    return [m for i, m in enumerate(msgs) if not (i < last and m.channel == "analysis")]


def _peel_instructions(
    messages: Sequence[ChatMessage],
) -> tuple[str | None, Sequence[ChatMessage]]:
    if messages and isinstance(messages[0], SystemMessage | DeveloperMessage):
        return content_text(messages[0].content), messages[1:]
    return None, messages


def _function_tool(tool: dict[str, Any]) -> FunctionTool:
    fn = tool.get("function") or {}
    params = fn.get("parameters")
    return FunctionTool(
        name=str(fn.get("name", "")),
        description=str(fn.get("description") or ""),
        parameters=params if isinstance(params, dict) else None,
    )


def _check_text(m: ChatMessage) -> None:
    content = getattr(m, "content", None)
    if isinstance(content, list) and any(isinstance(p, PromptEmbedsContentPart) for p in content):
        raise bad_request(
            "prompt_embeds content parts are not supported for gpt-oss (harmony) models.",
            "messages",
        )


def _start_date() -> str:
    for name in START_DATE_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return datetime.date.today().strftime("%Y-%m-%d")
