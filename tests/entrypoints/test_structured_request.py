"""Request fields -> structured outputs and tool plans (pure functions)."""

from __future__ import annotations

import pytest

from actorllm.core.chat_template import messages_for_template
from actorllm.core.errors import InvalidRequestError
from actorllm.entrypoints.openai.structured_request import (
    ToolSettings,
    plan_tools,
    structured_outputs_from_body,
)
from actorllm.entrypoints.openai.tool_parsers import (
    HermesToolParser,
    NamedToolParser,
    RequiredToolParser,
)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TOOL = {"type": "function", "function": {"name": "f", "parameters": SCHEMA}}


@pytest.mark.parametrize(
    ("body", "kind", "extra"),
    [
        ({"response_format": {"type": "text"}}, None, {}),
        ({"response_format": {"type": "json_object"}}, "json_object", {}),
        (
            {"response_format": {"type": "json_schema",
                                 "json_schema": {"name": "x", "schema": SCHEMA, "strict": True}}},
            "json", {"disable_additional_properties": True},
        ),
        ({"structured_outputs": {"regex": "a+", "disable_any_whitespace": True}}, "regex",
         {"disable_any_whitespace": True}),
        ({"guided_json": SCHEMA, "guided_decoding_backend": "guidance"}, "json",
         {"backend": "guidance"}),
        ({"guided_regex": "[0-9]+"}, "regex", {}),
        ({"guided_choice": ["a", "b"]}, "choice", {}),
        ({"guided_grammar": 'root ::= "x"', "guided_whitespace_pattern": " "}, "grammar",
         {"whitespace_pattern": " "}),
        ({"structured_outputs": {"regex": "a", "disable_fallback": True}}, "regex",
         {"disable_fallback": True}),
        ({"response_format": {"type": "structural_tag", "triggers": ["<f>"], "structures": [
            {"begin": "<f>", "schema": SCHEMA, "end": "</f>"}]}}, "structural_tag", {}),
    ],
)  # fmt: skip
def test_fields_map_to_params(body: dict, kind: str | None, extra: dict) -> None:
    so = structured_outputs_from_body(body)
    if kind is None:
        assert so is None
        return
    assert so is not None and so.kind == kind
    for k, v in extra.items():
        assert getattr(so, k) == v


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"guided_json": SCHEMA, "guided_regex": "a"}, "guided_json"),
        ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "response_format"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
         "response_format"),
        ({"guided_choice": []}, "guided_choice"),
        ({"guided_choice": "abc"}, "guided_choice"),
        ({"guided_json": [1]}, "guided_json"),
        ({"structured_outputs": {"regex": "a", "oops": 1}}, "structured_outputs.oops"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
        ({"structured_outputs": {"regex": ""}}, "structured_outputs.regex"),
        ({"structured_outputs": {"regex": "a", "backend": "x"}}, "structured_outputs.backend"),
        ({"structured_outputs": {"regex": "a", "grammar": "b"}}, "structured_outputs"),
        ({"structured_outputs": 3}, "structured_outputs"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": "{no"}}},
         "response_format"),
        ({"guided_regex": "a", "guided_whitespace_pattern": 3}, "guided_whitespace_pattern"),
        ({"guided_regex": "a", "guided_decoding_backend": "outlines"}, "guided_decoding_backend"),
        ({"guided_decoding_backend": "xgrammar"}, "guided_decoding_backend"),
    ],
)  # fmt: skip
def test_bad_requests_name_the_field(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        structured_outputs_from_body(body)
    assert info.value.param == param
    assert str(info.value).startswith(param) or param in str(info.value)


AUTO = ToolSettings(enable_auto_tool_choice=True, tool_call_parser="hermes")


def test_tool_plans() -> None:
    assert plan_tools({}, AUTO).parser is None
    plan = plan_tools({"tools": [TOOL]}, AUTO)  # auto is the default with tools
    assert isinstance(plan.parser, HermesToolParser) and plan.forced_schema is None
    assert plan_tools({"tools": [TOOL], "tool_choice": "none"}, AUTO).parser is None
    req = plan_tools({"tools": [TOOL], "tool_choice": "required", "parallel_tool_calls": False},
                     ToolSettings())  # fmt: skip
    assert isinstance(req.parser, RequiredToolParser)
    assert req.forced_schema is not None and req.forced_schema["maxItems"] == 1
    named = plan_tools(
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}}},
        ToolSettings(),
    )
    assert isinstance(named.parser, NamedToolParser) and named.forced_schema == SCHEMA


@pytest.mark.parametrize(
    ("body", "settings"),
    [
        ({"tools": [TOOL]}, ToolSettings()),  # auto without --enable-auto-tool-choice
        ({"tool_choice": "required"}, AUTO),  # no tools
        ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}}, AUTO),
        ({"tools": [{"type": "function"}]}, AUTO),
        ({"tools": [TOOL], "tool_choice": "sometimes"}, AUTO),
    ],
)
def test_bad_tool_requests(body: dict, settings: ToolSettings) -> None:
    with pytest.raises(InvalidRequestError) as info:
        plan_tools(body, settings)
    assert info.value.param in ("tools", "tool_choice")


def test_tool_call_arguments_become_objects_for_templates() -> None:
    msgs = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]}, {"role": "tool", "tool_call_id": "call_1", "content": "2"}]  # fmt: skip
    out = messages_for_template(msgs)
    assert out[0]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert out[1] == msgs[1]
    assert msgs[0]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'  # not mutated
