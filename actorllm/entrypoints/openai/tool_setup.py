"""The server's tool-calling and reasoning setup, read once from the engine's config at
start-up: ``--tool-parser-plugin`` is imported, ``--tool-call-parser`` and
``--reasoning-parser`` are checked (a bad name fails start-up, not a request)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actorllm.entrypoints.openai.structured_request import ToolSettings
from actorllm.entrypoints.openai.tool_parsers import get_tool_parser, load_tool_parser_plugin
from actorllm.reasoning import ReasoningParser, get_reasoning_parser


@dataclass(frozen=True)
class ChatSetup:
    tools: ToolSettings
    reasoning_parser: type[ReasoningParser] | None

    @classmethod
    def from_config(cls, config: Any) -> ChatSetup:
        plugin = getattr(config, "tool_parser_plugin", None)
        if plugin:
            load_tool_parser_plugin(plugin)
        name = getattr(config, "tool_call_parser", None)
        if name:
            get_tool_parser(name)  # raises UnknownToolParserError
        reasoning = getattr(config, "reasoning_parser", None)
        return cls(
            tools=ToolSettings(
                enable_auto_tool_choice=bool(getattr(config, "enable_auto_tool_choice", False)),
                tool_call_parser=name,
            ),
            reasoning_parser=get_reasoning_parser(reasoning) if reasoning else None,
        )


NO_SETUP = ChatSetup(tools=ToolSettings(), reasoning_parser=None)
