"""Harmony prompts as ``openai_harmony`` renders them: the system message (identity,
dates, reasoning effort, channels), the developer message (instructions, function tools
as TypeScript-like types) and the conversation, ready for the assistant's next turn.

    >>> segs = render_for_completion([HarmonyMessage("user", "Hi")])
    >>> "".join(s.text for s in segs)
    '<|start|>user<|message|>Hi<|end|><|start|>assistant'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from actorllm.core.harmony.messages import (
    CALL,
    CHANNEL,
    CONSTRAIN,
    END,
    MESSAGE,
    START,
    HarmonyMessage,
    Segment,
)
from actorllm.core.harmony.schema_ts import schema_to_typescript

IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
KNOWLEDGE_CUTOFF = "2024-06"
CHANNELS = ("analysis", "commentary", "final")
EFFORTS = ("low", "medium", "high")


@dataclass(frozen=True)
class SystemContent:
    """``openai_harmony.SystemContent.new()``'s defaults: medium effort, all three
    channels required."""

    model_identity: str | None = IDENTITY
    reasoning_effort: str | None = "medium"
    conversation_start_date: str | None = None
    knowledge_cutoff: str | None = KNOWLEDGE_CUTOFF
    channels: tuple[str, ...] = CHANNELS
    channel_required: bool = True


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str = ""
    parameters: dict[str, Any] | None = None


@dataclass(frozen=True)
class DeveloperContent:
    instructions: str | None = None
    tools: tuple[FunctionTool, ...] = field(default_factory=tuple)


def system_text(sys: SystemContent, *, function_tools: bool) -> str:
    """The system message's text; ``function_tools``: the conversation defines functions
    (the channels line then says where calls go)."""
    sections = []
    top = [sys.model_identity] if sys.model_identity else []
    if sys.knowledge_cutoff:
        top.append(f"Knowledge cutoff: {sys.knowledge_cutoff}")
    if sys.conversation_start_date:
        top.append(f"Current date: {sys.conversation_start_date}")
    if top:
        sections.append("\n".join(top))
    if sys.reasoning_effort:
        sections.append(f"Reasoning: {sys.reasoning_effort}")
    if sys.channels:
        header = f"# Valid channels: {', '.join(sys.channels)}."
        if sys.channel_required:
            header += " Channel must be included for every message."
        if function_tools:
            header += "\nCalls to these tools must go to the commentary channel: 'functions'."
        sections.append(header)
    return "\n\n".join(sections)


def developer_text(dev: DeveloperContent) -> str:
    sections = []
    if dev.instructions is not None:
        sections += ["# Instructions", dev.instructions]
    if dev.tools:
        sections.append(_tools_section("functions", dev.tools))
    return "\n\n".join(sections)


def _tools_section(namespace: str, tools: Sequence[FunctionTool]) -> str:
    lines = [f"## {namespace}\n", f"namespace {namespace} {{\n"]
    for tool in tools:
        lines += [f"// {line}" for line in tool.description.splitlines()]
        if tool.parameters is not None:
            params = schema_to_typescript(tool.parameters)
            lines.append(f"type {tool.name} = (_: {params}) => any;\n")
        else:
            lines.append(f"type {tool.name} = () => any;\n")
    lines.append(f"}} // namespace {namespace}")
    return "# Tools\n\n" + "\n".join(lines)


def render_message(msg: HarmonyMessage, content: str | None = None) -> list[Segment]:
    """One message; ``content`` overrides ``msg.content`` (system / developer text)."""
    out = [Segment(START, special=True)]
    if msg.role == "tool":
        if not msg.name:
            raise ValueError("a harmony tool message needs its tool's name")
        out.append(Segment(msg.name))
    else:
        out.append(Segment(msg.role + (f":{msg.name}" if msg.name else "")))
    if msg.recipient and msg.recipient != "all":
        out.append(Segment(f" to={msg.recipient}"))
    if msg.channel:
        out += [Segment(CHANNEL, special=True), Segment(msg.channel)]
    if msg.content_type:
        if msg.content_type.startswith(CONSTRAIN):
            out += [Segment(" "), Segment(CONSTRAIN, special=True)]
            rest = msg.content_type[len(CONSTRAIN) :]
            if rest:
                out.append(Segment(rest))
        else:
            out.append(Segment(f" {msg.content_type}"))
    out.append(Segment(MESSAGE, special=True))
    out.append(Segment(msg.content if content is None else content))
    to_tool = msg.role == "assistant" and msg.recipient is not None
    out.append(Segment(CALL if to_tool else END, special=True))
    return out


def render_for_completion(
    messages: Sequence[HarmonyMessage],
    system: SystemContent | None = None,
    developer: DeveloperContent | None = None,
) -> list[Segment]:
    """The system and developer messages (when given), the conversation, then the start
    of the assistant's turn."""
    out: list[Segment] = []
    if system is not None:
        tools = developer is not None and bool(developer.tools)
        out += render_message(HarmonyMessage("system"), system_text(system, function_tools=tools))
    if developer is not None:
        out += render_message(HarmonyMessage("developer"), developer_text(developer))
    for msg in messages:
        out += render_message(msg)
    return [*out, Segment(START, special=True), Segment("assistant")]
