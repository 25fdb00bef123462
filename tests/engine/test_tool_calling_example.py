"""examples/tool_calling.py runs as written: a forced call's arguments validate, and the
call and its result reach the chat template."""

import json

import pytest

from tests.engine.test_llm_examples import run_example


@pytest.mark.timeout(240)
def test_tool_calling_example(tiny_model):
    lines = run_example("tool_calling.py", tiny_model).splitlines()
    call = next(line for line in lines if line.startswith("call: get_weather("))
    args = json.loads(call.removeprefix("call: get_weather(").removesuffix(")"))
    assert set(args) >= {"city", "days"} and 1 <= args["days"] <= 7
    assert any(line.startswith("prompt ends:") and "sunny" in line for line in lines)
