"""Chat with tools: tools and tool calls reach the chat template; a forced call's
arguments validate against the function's parameters; templates without tools refuse."""

from __future__ import annotations

import json

import jsonschema
import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP
from actorllm.entrypoints.openai.tool_parsers import tool_choice_schema
from actorllm.testing.engine_harness import demo_tokenizer, open_test_engine
from tests.helpers.tools import TOOLS_TEMPLATE, WEATHER

pytestmark = pytest.mark.anyio


def _tokenizer():
    import copy

    tok = copy.deepcopy(demo_tokenizer())
    tok.chat_template = TOOLS_TEMPLATE
    return tok


async def test_tools_and_tool_calls_reach_the_template_and_forced_args_validate() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 1}'},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "content": "And Rome?"},
    ]  # fmt: skip
    choice = {"type": "function", "function": {"name": "get_weather"}}
    schema = tool_choice_schema([WEATHER], choice)
    params = SamplingParams(
        max_tokens=60, structured_outputs=SOP(json=schema, disable_any_whitespace=True)
    )
    async with open_test_engine(tokenizer=_tokenizer()) as engine:
        last = None
        async for out in engine.chat(messages, params, tools=[WEATHER]):
            last = out
    assert last is not None
    assert '<tools>{"type": "function"' in (last.prompt or "")
    assert '"arguments": {"city": "Paris", "days": 1}' in (last.prompt or "")  # an object
    jsonschema.validate(json.loads(last.outputs[0].text), WEATHER["function"]["parameters"])


async def test_a_template_without_tools_refuses_them() -> None:
    async with open_test_engine() as engine:
        with pytest.raises(InvalidRequestError) as info:
            async for _ in engine.chat([{"role": "user", "content": "hi"}], tools=[WEATHER]):
                pass
        assert info.value.param == "tools"
