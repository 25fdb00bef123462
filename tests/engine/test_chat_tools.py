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

pytestmark = pytest.mark.anyio

# A Hermes-style template (the shape Qwen2.5 / Hermes templates render).
TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    '{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{"name": '
    '{{ c.function.name | tojson }}, "arguments": {{ c.function.arguments | tojson }}}'
    "</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 8},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}


def _tokenizer():
    import copy

    tok = copy.deepcopy(demo_tokenizer())
    tok.chat_template = TEMPLATE
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
