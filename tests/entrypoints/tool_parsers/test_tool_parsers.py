"""Each parser on its family's real output shape, whole and streamed in small pieces: the
streamed deltas rebuild exactly the calls the whole-text parse finds, in OpenAI's shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actorllm.entrypoints.openai.tool_parsers import (
    NamedToolParser,
    RequiredToolParser,
    ToolCallStreamer,
    ToolParser,
    UnknownToolParserError,
    get_tool_parser,
    load_tool_parser_plugin,
    tool_choice_schema,
)
from tests.helpers.tools import TIME, WEATHER

# (parser, recorded output, content, [(name, arguments)])
CASES: list[tuple[str, str, str | None, list[tuple[str, dict[str, Any]]]]] = [
    (
        "hermes",
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
        '"days": 3}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n'
        "</tool_call>",
        "Let me check.\n",
        [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {})],
    ),
    ("hermes", "No tools needed: {braces} are fine.", "No tools needed: {braces} are fine.", []),
    (
        "llama3_json",
        '{"name": "get_weather", "parameters": {"city": "São Paulo", "metric": true}}',
        None,
        [("get_weather", {"city": "São Paulo", "metric": True})],
    ),
    (
        "llama3_json",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome"}}; '
        '{"name": "get_time", "parameters": {}}',
        None,
        [("get_weather", {"city": "Rome"}), ("get_time", {})],
    ),
    (
        "mistral",
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Lyon", "days": 2}}]',
        None,
        [("get_weather", {"city": "Lyon", "days": 2})],
    ),
    (
        "mistral",
        'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Nice"}[TOOL_CALLS]get_time[ARGS]{}',
        "Sure.",
        [("get_weather", {"city": "Nice"}), ("get_time", {})],
    ),
    (
        "qwen3_coder",
        "I'll look it up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n"
        "</parameter>\n<parameter=days>\n5\n</parameter>\n<parameter=metric>\nfalse\n"
        "</parameter>\n</function>\n</tool_call>",
        "I'll look it up.\n",
        [("get_weather", {"city": "New York", "days": 5, "metric": False})],
    ),
    (
        "pythonic",
        '[get_weather(city="Berlin", days=1), get_time()]',
        None,
        [("get_weather", {"city": "Berlin", "days": 1}), ("get_time", {})],
    ),
    (
        "pythonic",
        "<|python_start|>[get_weather(city='Oslo')]<|python_end|>",
        None,
        [("get_weather", {"city": "Oslo"})],
    ),
]


def _parser(name: str) -> ToolParser:
    return get_tool_parser(name)(None, tools=[WEATHER, TIME])


@pytest.mark.parametrize(("name", "text", "content", "calls"), CASES)
def test_extract(name: str, text: str, content: str | None, calls: list) -> None:
    got = _parser(name).extract(text)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in got.tool_calls] == calls
    if calls:
        assert got.content == content
        assert all(c.type == "function" and c.id for c in got.tool_calls)
    else:
        assert got.content == text


@pytest.mark.parametrize("step", [1, 3, 7])
@pytest.mark.parametrize(("name", "text", "content", "calls"), CASES)
def test_stream_rebuilds_the_calls(name: str, text: str, content: str | None, calls: list,
                                   step: int) -> None:  # fmt: skip
    streamer = ToolCallStreamer(_parser(name))
    streamed_content = ""
    rebuilt: dict[int, dict[str, Any]] = {}
    cuts = [*range(step, len(text), step), len(text)]
    for i, cut in enumerate(cuts):
        delta = streamer.update(text[:cut], final=i == len(cuts) - 1)
        streamed_content += delta.content or ""
        for d in delta.tool_calls:
            if d.id is not None:  # the first delta of a call: index, id, type, name
                assert d.index not in rebuilt and d.type == "function"
                assert d.function is not None and d.function.name
                rebuilt[d.index] = {"name": d.function.name, "args": d.function.arguments or ""}
            else:
                assert d.function is not None and d.function.name is None
                rebuilt[d.index]["args"] += d.function.arguments or ""
    assert [(c["name"], json.loads(c["args"])) for _, c in sorted(rebuilt.items())] == calls
    assert streamed_content == (content or "" if calls else text)


def test_wire_shape_of_deltas() -> None:
    import msgspec

    streamer = ToolCallStreamer(_parser("hermes"))
    d = streamer.update('<tool_call>{"name": "get_time", "arguments": {}}</tool_call>', True)
    assert msgspec.to_builtins(d.tool_calls[0]) == {
        "index": 0, "id": d.tool_calls[0].id, "type": "function",
        "function": {"name": "get_time", "arguments": ""},
    }  # fmt: skip
    assert msgspec.to_builtins(d.tool_calls[1]) == {"index": 0, "function": {"arguments": "{}"}}


def test_mistral_ids_are_nine_alphanumerics() -> None:
    call_id = _parser("mistral").new_call_id()
    assert len(call_id) == 9 and call_id.isalnum()


def test_forced_named_and_required() -> None:
    named = NamedToolParser("get_weather").extract('{"city": "Paris"}')
    assert named.tool_calls[0].function.name == "get_weather"
    required = RequiredToolParser().extract(
        '[{"name": "get_time", "parameters": {}}, {"name": "get_weather", '
        '"parameters": {"city": "X"}}]'
    )
    assert [c.function.name for c in required.tool_calls] == ["get_time", "get_weather"]
    schema = tool_choice_schema([WEATHER, TIME], "required")
    assert schema is not None and schema["minItems"] == 1
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert tool_choice_schema([WEATHER], named) == WEATHER["function"]["parameters"]
    assert tool_choice_schema([WEATHER], "auto") is None


def test_unknown_parser_and_plugin(tmp_path: Path) -> None:
    with pytest.raises(UnknownToolParserError, match="hermes"):
        get_tool_parser("nope")
    plugin = tmp_path / "my_parser.py"
    plugin.write_text(
        "from actorllm.entrypoints.openai.tool_parsers import register_tool_parser\n"
        "from actorllm.entrypoints.openai.tool_parsers.hermes import HermesToolParser\n"
        "@register_tool_parser('mine')\n"
        "class Mine(HermesToolParser):\n    pass\n"
    )
    load_tool_parser_plugin(plugin)
    assert get_tool_parser("mine").__name__ == "Mine"
    with pytest.raises(UnknownToolParserError):
        load_tool_parser_plugin(tmp_path / "missing.py")


def test_the_example_plugin(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    load_tool_parser_plugin(root / "examples" / "tool_parser_plugin.py")
    parser = get_tool_parser("call_line")(None)
    got = parser.extract('Checking.\nCALL get_time {"tz": "UTC"}')
    assert got.content == "Checking.\n"
    assert [(c.function.name, c.function.arguments) for c in got.tool_calls] == [
        ("get_time", '{"tz": "UTC"}')
    ]
    streamer = ToolCallStreamer(parser)
    text = 'Hi CALL f {"a": [1, 2]}'
    args = ""
    for cut in range(1, len(text) + 1):
        for d in streamer.update(text[:cut], final=cut == len(text)).tool_calls:
            args += (d.function.arguments or "") if d.function else ""
    assert json.loads(args) == {"a": [1, 2]}
