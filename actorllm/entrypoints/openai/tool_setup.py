"""The server's tool-calling and reasoning setup, read once at start-up from the server's
settings (``--tool-parser-plugin`` is imported, ``--tool-call-parser`` checked) and the
engine's ``--reasoning-parser``: a bad name fails start-up, not a request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from actorllm.entrypoints.openai.structured_request import ToolSettings
from actorllm.entrypoints.openai.tool_parsers import get_tool_parser, load_tool_parser_plugin
from actorllm.reasoning import ReasoningParser, get_reasoning_parser


class ChatConfig(Protocol):
    """What the chat setup reads: the server's tool settings and the engine's reasoning
    parser (:class:`ChatOptions` gathers them)."""

    @property
    def tool_parser_plugin(self) -> str | None: ...
    @property
    def tool_call_parser(self) -> str | None: ...
    @property
    def enable_auto_tool_choice(self) -> bool: ...
    @property
    def reasoning_parser(self) -> str | None: ...


@dataclass(frozen=True)
class ChatOptions:
    """The :class:`ChatConfig` of a server: tool settings from ``AppSettings``, the
    reasoning parser from the engine's ``EngineConfig``."""

    tool_parser_plugin: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    reasoning_parser: str | None = None


@dataclass(frozen=True)
class ChatSetup:
    tools: ToolSettings
    reasoning_parser: type[ReasoningParser] | None
    # A gpt-oss model: chats are rendered and parsed in harmony (harmony_chat.py).
    harmony: bool = False

    @classmethod
    def from_config(cls, config: ChatConfig, *, harmony: bool = False) -> ChatSetup:
        """``harmony``: the model is gpt-oss, whose outputs only the ``openai`` tool
        parser and the ``openai_gptoss`` reasoning parser can read."""
        if config.tool_parser_plugin:
            load_tool_parser_plugin(config.tool_parser_plugin)
        name = config.tool_call_parser
        if name:
            get_tool_parser(name)  # raises UnknownToolParserError
        reasoning = config.reasoning_parser
        if harmony and name not in (None, "openai"):
            raise ValueError(
                f"--tool-call-parser {name} cannot read gpt-oss's harmony output; use "
                "--tool-call-parser openai"
            )
        if harmony and reasoning not in (None, "openai_gptoss"):
            raise ValueError(
                f"--reasoning-parser {reasoning} cannot read gpt-oss's harmony output; use "
                "--reasoning-parser openai_gptoss (or none: the channels are split anyway)"
            )
        return cls(
            tools=ToolSettings(
                enable_auto_tool_choice=bool(config.enable_auto_tool_choice),
                tool_call_parser=name,
            ),
            reasoning_parser=get_reasoning_parser(reasoning) if reasoning else None,
            harmony=harmony,
        )


NO_SETUP = ChatSetup(tools=ToolSettings(), reasoning_parser=None)
