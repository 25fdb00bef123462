"""Tool-call parsers by name (``--tool-call-parser``), and user plugins
(``--tool-parser-plugin path/to/parser.py``, whose classes register themselves with
:func:`register_tool_parser`).

    >>> {"hermes", "llama3_json", "llama4_json"} <= set(TOOL_PARSERS)
    True
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from actorllm.entrypoints.openai.tool_parsers.base import (
    DeltaFunctionCall,
    DeltaToolCall,
    ExtractedToolCalls,
    FunctionCall,
    Parsed,
    PartialCall,
    StreamDelta,
    ToolCall,
    ToolCallStreamer,
    ToolParser,
)
from actorllm.entrypoints.openai.tool_parsers.forced import (
    NamedToolParser,
    RequiredToolParser,
    strict_tools_tag,
    tool_choice_schema,
)
from actorllm.entrypoints.openai.tool_parsers.hermes import HermesToolParser
from actorllm.entrypoints.openai.tool_parsers.llama3_json import Llama3JsonToolParser
from actorllm.entrypoints.openai.tool_parsers.mistral import MistralToolParser
from actorllm.entrypoints.openai.tool_parsers.openai import OpenAIToolParser
from actorllm.entrypoints.openai.tool_parsers.pythonic import PythonicToolParser
from actorllm.entrypoints.openai.tool_parsers.qwen3_xml import Qwen3XmlToolParser

__all__ = [
    "TOOL_PARSERS",
    "DeltaFunctionCall",
    "DeltaToolCall",
    "ExtractedToolCalls",
    "FunctionCall",
    "NamedToolParser",
    "OpenAIToolParser",
    "Parsed",
    "PartialCall",
    "RequiredToolParser",
    "StreamDelta",
    "ToolCall",
    "ToolCallStreamer",
    "ToolParser",
    "UnknownToolParserError",
    "get_tool_parser",
    "load_tool_parser_plugin",
    "register_tool_parser",
    "strict_tools_tag",
    "tool_choice_schema",
]

# {name: parser class}; names as vLLM's --tool-call-parser choices.
TOOL_PARSERS: dict[str, type[ToolParser]] = {
    "hermes": HermesToolParser,
    "llama3_json": Llama3JsonToolParser,
    "llama4_json": Llama3JsonToolParser,
    "mistral": MistralToolParser,
    "openai": OpenAIToolParser,
    "qwen3_coder": Qwen3XmlToolParser,
    "qwen3_xml": Qwen3XmlToolParser,
    "pythonic": PythonicToolParser,
    "llama4_pythonic": PythonicToolParser,
}


class UnknownToolParserError(ValueError):
    """``--tool-call-parser`` names no registered parser."""


def register_tool_parser(name: str) -> Callable[[type[ToolParser]], type[ToolParser]]:
    """Class decorator for plugins: ``@register_tool_parser("mine")``."""

    def register(cls: type[ToolParser]) -> type[ToolParser]:
        TOOL_PARSERS[name] = cls
        return cls

    return register


def get_tool_parser(name: str) -> type[ToolParser]:
    try:
        return TOOL_PARSERS[name]
    except KeyError:
        raise UnknownToolParserError(
            f"unknown tool call parser {name!r}; choose one of {', '.join(sorted(TOOL_PARSERS))} "
            "(or load your own with --tool-parser-plugin)"
        ) from None


def load_tool_parser_plugin(path: str | Path) -> None:
    """Import the Python file at ``path``; its parsers register themselves by name."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"actorllm_tool_plugin_{path.stem}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise UnknownToolParserError(f"tool parser plugin {str(path)!r} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
