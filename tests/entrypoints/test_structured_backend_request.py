"""Specs that reach a grammar backend: compile errors renamed to the field the client
sent, and strict function tools under tool_choice auto compiled to a structural tag."""

from __future__ import annotations

import json

import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.core.structured_outputs_params import StructuredOutputsError
from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP
from actorllm.entrypoints.openai.structured_request import (
    ToolSettings,
    client_error,
    plan_tools,
    structured_outputs_from_body,
    structured_source,
)
from actorllm.structured_output import GrammarCompiler
from tests.helpers.tokenizers import VOCAB_SIZE, hf_demo_tokenizer

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TOOL = {"type": "function", "function": {"name": "f", "parameters": SCHEMA}}
AUTO = ToolSettings(enable_auto_tool_choice=True, tool_call_parser="hermes")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs.regex"),
        ({"structured_outputs": {"grammar": "root ::= ("}}, "structured_outputs.grammar"),
        ({"guided_regex": "(unclosed"}, "guided_regex"),
        ({"guided_json": {"type": "nope"}}, "guided_json"),
        ({"response_format": {"type": "json_schema",
                              "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
         "response_format"),
    ],
)  # fmt: skip
def test_compile_errors_name_the_field_the_client_sent(body: dict, param: str) -> None:
    """The engine's compile error names ``structured_outputs.<field>``; the server renames
    it to the field of the body it came from."""
    so = structured_outputs_from_body(body)
    assert so is not None
    source = structured_source(body)
    assert source is not None
    compiler = GrammarCompiler(hf_demo_tokenizer(), vocab_size=VOCAB_SIZE, max_workers=1)
    try:
        with pytest.raises(StructuredOutputsError) as info, client_error(source):
            compiler.submit(so.key, so.backend).result()
    finally:
        compiler.shutdown()
    assert info.value.param == param
    assert str(info.value).startswith(param + " ")


STRICT = {"type": "function", "function": {"name": "f", "parameters": SCHEMA, "strict": True}}
LOOSE = {"type": "function", "function": {"name": "g"}}


def test_strict_tools_under_auto_are_forced_once_a_call_starts() -> None:
    """OpenAI's ``"strict": true`` is not dropped: with tool_choice auto the calls the
    model chooses to make are held to the strict function's parameters."""
    assert plan_tools({"tools": [TOOL]}, AUTO).strict_tag is None  # nothing strict
    plan = plan_tools({"tools": [STRICT, LOOSE]}, AUTO)
    assert plan.strict_tag is not None and plan.forced_schema is None
    tag = json.loads(plan.strict_tag)
    assert tag["triggers"] == ["<tool_call>"]
    assert [s["schema"] for s in tag["structures"]] == [SCHEMA, {"type": "object"}]
    compiler = GrammarCompiler(hf_demo_tokenizer(), vocab_size=VOCAB_SIZE, max_workers=1)
    try:
        so = SOP(structural_tag=plan.strict_tag)
        matcher = compiler.matcher(compiler.submit_for(so).result())
        tok = hf_demo_tokenizer()

        def feed(text: str) -> bool:
            return all(matcher.accept(t) for t in tok.encode(text, add_special_tokens=False))

        assert feed("Let me check. ")  # free text: the model may answer without a call
        assert feed('<tool_call>\n{"name": "f", "arguments": {"a": 1')
        matcher.rollback(1)  # '1' was fine; a string is not an integer:
        assert not feed('"x"')
    finally:
        compiler.shutdown()


def test_strict_tools_with_a_format_that_cannot_force_them_are_refused() -> None:
    pythonic = ToolSettings(enable_auto_tool_choice=True, tool_call_parser="pythonic")
    with pytest.raises(InvalidRequestError, match="strict") as info:
        plan_tools({"tools": [STRICT]}, pythonic)
    assert info.value.param == "tools"
    llama = ToolSettings(enable_auto_tool_choice=True, tool_call_parser="llama3_json")
    tag = plan_tools({"tools": [STRICT]}, llama).strict_tag
    assert tag is not None and json.loads(tag)["triggers"] == ['{"name": ']
