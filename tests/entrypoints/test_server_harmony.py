"""gpt-oss chats over HTTP: prompts rendered in harmony, outputs split by channel into
reasoning, content and tool calls (chat completions, streamed or not, and the Responses
API through the ``openai`` client), and what harmony cannot take refused by name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from actorllm.entrypoints.openai.app.lifespan import serving_context
from actorllm.entrypoints.openai.app.settings import AppSettings
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.harmony import gpt_oss_dir, harmony_tokenizer

THINK = "<|channel|>analysis<|message|>User wants weather.<|end|>"
ANSWER = "<|start|>assistant<|channel|>final<|message|>It is sunny."
CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}'
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(autouse=True)
def _pinned_date(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTORLLM_SYSTEM_START_DATE", "2026-01-02")


Served = tuple[FakeEngine, ServerThread]


def _server(tmp: Path, script: str, **settings: Any) -> Served:
    engine = FakeEngine(
        script=script, tokenizer=harmony_tokenizer(), model=str(gpt_oss_dir(tmp)),
        max_model_len=1024,
    )  # fmt: skip
    return engine, start_server(engine, **settings)


@pytest.fixture(scope="module")
def answering(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    engine, srv = _server(tmp_path_factory.mktemp("oss"), THINK + ANSWER)
    yield engine, srv
    srv.stop()
    assert srv.error is None


@pytest.fixture(scope="module")
def calling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    engine, srv = _server(
        tmp_path_factory.mktemp("oss-tools"), THINK + CALL,
        enable_auto_tool_choice=True, tool_call_parser="openai",
    )  # fmt: skip
    yield engine, srv
    srv.stop()
    assert srv.error is None


def _prompt_ids(engine: FakeEngine) -> list[int]:
    assert engine.last_request is not None
    prompt = engine.last_request[0]
    assert isinstance(prompt, dict)
    return list(prompt["prompt_token_ids"])


def chat(srv: ServerThread, **body: object) -> httpx.Response:
    body = {"model": "fake-model", **body}
    return httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=30)


def test_prompt_is_harmony_and_sampling_stops_at_its_stop_tokens(answering: Served) -> None:
    engine, srv = answering
    r = chat(srv, messages=[{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Weather?"}],
             reasoning_effort="low")  # fmt: skip
    assert r.status_code == 200, r.text
    assert engine.last_request is not None
    params = engine.last_request[1]
    text = engine.tokenizer.decode(_prompt_ids(engine))
    assert text == (
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI."
        "\nKnowledge cutoff: 2024-06\nCurrent date: 2026-01-02\n\nReasoning: low\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every "
        "message.<|end|><|start|>developer<|message|># Instructions\n\nBe brief.<|end|>"
        "<|start|>user<|message|>Weather?<|end|><|start|>assistant"
    )
    tok = engine.tokenizer
    assert set(params.stop_token_ids or []) >= {
        tok.convert_tokens_to_ids("<|return|>"),
        tok.convert_tokens_to_ids("<|call|>"),
    }
    assert params.skip_special_tokens is False
    msg = r.json()["choices"][0]["message"]
    assert (msg["reasoning_content"], msg["content"]) == ("User wants weather.", "It is sunny.")
    assert "tool_calls" not in msg  # none: left out, as vLLM


def test_stream_deltas_add_up_to_the_message(answering: Served) -> None:
    _, srv = answering
    reasoning, content = "", ""
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", timeout=30, json={
        "model": "fake-model", "stream": True,
        "messages": [{"role": "user", "content": "Weather?"}],
    }) as r:  # fmt: skip
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            reasoning += delta.get("reasoning_content") or ""
            content += delta.get("content") or ""
    assert (reasoning, content) == ("User wants weather.", "It is sunny.")
    assert "<|" not in reasoning + content


def test_tool_call_with_the_openai_parser(calling: Served) -> None:
    engine, srv = calling
    r = chat(srv, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER])
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert choice["message"]["reasoning_content"] == "User wants weather."
    assert choice["message"]["content"] is None
    prompt = engine.tokenizer.decode(_prompt_ids(engine))
    assert "Calls to these tools must go to the commentary channel: 'functions'." in prompt
    assert "type get_weather = (_: {\ncity: string,\n}) => any;" in prompt


def test_tool_call_streamed(calling: Served) -> None:
    _, srv = calling
    name, args, finish = None, "", None
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", timeout=30, json={
        "model": "fake-model", "stream": True, "tools": [WEATHER],
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
    }) as r:  # fmt: skip
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            choice = json.loads(line[6:])["choices"][0]
            finish = choice.get("finish_reason") or finish
            for tc in choice["delta"].get("tool_calls") or []:
                name = tc["function"].get("name") or name
                args += tc["function"].get("arguments") or ""
    assert (name, json.loads(args), finish) == ("get_weather", {"city": "Paris"}, "tool_calls")


def test_history_with_tool_results_is_replayed_in_harmony(calling: Served) -> None:
    engine, srv = calling
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "reasoning_content": "Need the tool.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]  # fmt: skip
    assert chat(srv, messages=messages, tools=[WEATHER]).status_code == 200
    prompt = engine.tokenizer.decode(_prompt_ids(engine))
    assert prompt.endswith(
        "<|start|>user<|message|>Weather in Paris?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json"
        '<|message|>{"city": "Paris"}<|call|>'
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|>"
        "<|start|>assistant"
    )


def test_tool_choice_required_bans_the_answer_but_not_the_call(calling: Served) -> None:
    engine, srv = calling
    r = chat(
        srv, messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER],
        tool_choice="required", bad_words=["rain"],
    )  # fmt: skip
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert engine.last_request is not None
    tok, bans = engine.tokenizer, engine.last_request[1].bad_words_token_ids or []
    assert [tok.convert_tokens_to_ids("<|return|>")] in bans  # no ending the turn
    # The request's own bad_words ride along; the input processor adds them beside these
    # (tests/core/test_input_processor.py).
    assert engine.last_request[1].bad_words == ["rain"]


def test_responses_api_items(calling: Served) -> None:
    _, srv = calling
    tool = {"type": "function", **WEATHER["function"]}  # type: ignore[dict-item]
    with openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0) as client:
        r = client.responses.create(model="fake-model", input="Weather?", tools=[tool])  # type: ignore[list-item]
    assert [o.type for o in r.output] == ["reasoning", "function_call"]
    assert r.output[0].content[0].text == "User wants weather."  # type: ignore[union-attr, index]
    call = r.output[1]
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}


def test_response_messages_round_trip(calling: Served) -> None:
    engine, srv = calling
    tool = {"type": "function", **WEATHER["function"]}  # type: ignore[dict-item]
    body = {"model": "fake-model", "input": "Weather?", "tools": [tool],
            "enable_response_messages": True}  # fmt: skip
    r = httpx.post(f"{srv.url}/v1/responses", json=body, timeout=30).json()
    system, developer, user = r["input_messages"]
    assert system["role"] == "system" and system["content"][0]["type"] == "system_content"
    assert system["content"][0]["reasoning_effort"] == "Medium"
    tools = developer["content"][0]["tools"]["functions"]["tools"]
    assert [t["name"] for t in tools] == ["get_weather"]
    assert user == {"role": "user", "name": None, "content": [{"type": "text", "text": "Weather?"}]}
    think, call = r["output_messages"]
    assert think["channel"] == "analysis" and think["content"][0]["text"] == "User wants weather."
    assert (call["recipient"], call["content_type"]) == (
        "functions.get_weather", "<|constrain|>json",
    )  # fmt: skip
    # The next turn continues from them, the tool's answer added.
    result = {"role": "tool", "name": "functions.get_weather", "recipient": "assistant",
              "channel": "commentary", "content": [{"type": "text", "text": "sunny"}]}  # fmt: skip
    history = [user, think, call, result]
    body = {"model": "fake-model", "input": [], "tools": [tool],
            "previous_input_messages": history}  # fmt: skip
    r2 = httpx.post(f"{srv.url}/v1/responses", json={**body, "input": "And now?"}, timeout=30)
    assert r2.status_code == 200, r2.text
    prompt = engine.tokenizer.decode(_prompt_ids(engine))
    assert prompt.endswith(
        "<|start|>user<|message|>Weather?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>User wants weather.<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>'
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|>"
        "<|start|>user<|message|>And now?<|end|><|start|>assistant"
    )
    bad = httpx.post(f"{srv.url}/v1/responses", timeout=30, json={
        **body, "input": "x", "previous_input_messages": [{"role": "wizard", "content": "x"}],
    })  # fmt: skip
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "previous_input_messages"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tool_choice", {"type": "function", "function": {"name": "get_weather"}}),
        ("chat_template", "{{ 1 }}"),
        ("reasoning_effort", "none"),
        ("echo", True),
        ("chat_template_kwargs", {"enable_thinking": True}),
    ],
)
def test_what_harmony_cannot_take_is_refused_by_name(
    answering: Served, field: str, value: Any
) -> None:
    _, srv = answering
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER], field: value}
    r = chat(srv, **body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field


def test_a_tool_parser_that_cannot_read_harmony_fails_start(tmp_path: Path) -> None:
    engine = FakeEngine(tokenizer=harmony_tokenizer(), model=str(gpt_oss_dir(tmp_path)))
    with pytest.raises(ValueError, match="--tool-call-parser openai"):
        serving_context(engine, AppSettings(tool_call_parser="hermes"))  # type: ignore[arg-type]
