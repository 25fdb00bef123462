"""The server's start-up reading of --tool-parser-plugin, --tool-call-parser and
--reasoning-parser: a plugin's parser serves auto tool choice; a bad name fails start-up."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from actorllm.entrypoints.openai.structured_request import plan_tools
from actorllm.entrypoints.openai.tool_parsers import UnknownToolParserError
from actorllm.entrypoints.openai.tool_setup import ChatSetup
from actorllm.reasoning import UnknownReasoningParserError
from tests.helpers.tools import WEATHER

PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "tool_parser_plugin.py"


def _config(**kw: object) -> SimpleNamespace:
    base = {"tool_parser_plugin": None, "tool_call_parser": None, "reasoning_parser": None,
            "enable_auto_tool_choice": False}  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def test_a_plugin_parser_serves_auto_tool_choice() -> None:
    setup = ChatSetup.from_config(
        _config(tool_parser_plugin=str(PLUGIN), tool_call_parser="call_line",
                enable_auto_tool_choice=True, reasoning_parser="qwen3")
    )  # fmt: skip
    assert setup.reasoning_parser is not None
    plan = plan_tools({"tools": [WEATHER]}, setup.tools)
    assert plan.parser is not None
    got = plan.parser.extract('Checking.\nCALL get_weather {"city": "Rome"}')
    assert [c.function.name for c in got.tool_calls] == ["get_weather"]


@pytest.mark.parametrize(
    ("kw", "error"),
    [
        ({"tool_call_parser": "nope"}, UnknownToolParserError),
        ({"tool_parser_plugin": "/no/such/parser.py"}, UnknownToolParserError),
        ({"reasoning_parser": "nope"}, UnknownReasoningParserError),
    ],
)
def test_bad_names_fail_start_up(kw: dict, error: type[Exception]) -> None:
    with pytest.raises(error):
        ChatSetup.from_config(_config(**kw))
