"""Structured outputs, tool calling and reasoning through the HTTP server and the official
``openai`` client, on a random-weight tiny Llama (only the constraint makes answers valid)
whose chat template renders tools (Hermes style) and Qwen3-style think blocks."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from actorllm.demo import demo_tokenizer_path
from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.models import make_tiny_checkpoint
from tests.helpers.tools import TIME, TOOLS_TEMPLATE, WEATHER

pytestmark = pytest.mark.slow


class Trip(BaseModel):
    city: str = Field(max_length=10)
    days: int = Field(ge=1, le=7)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("tiny-tools"), "llama", vocab_size=4096, eos_token_id=0,
        max_position_embeddings=1024,
    )  # fmt: skip
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    cfg_path = Path(path) / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = TOOLS_TEMPLATE
    cfg_path.write_text(json.dumps(cfg))
    app = build_app(
        lambda: AsyncEngine.open(
            str(path), max_model_len=512, kv_cache_memory_bytes=8 * 2**20,
            reasoning_parser="qwen3",
            # A random model pads JSON with whitespace forever otherwise.
            structured_outputs_disable_any_whitespace=True,
        ),
        AppSettings(
            log_interval_s=0, enable_auto_tool_choice=True, tool_call_parser="hermes",
            trust_request_chat_template=True,
        ),
    )  # fmt: skip
    srv = ServerThread(app).start(timeout_s=240)
    yield srv
    srv.stop()
    assert srv.error is None


@pytest.fixture
def client(server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as c:
        yield c


def _model(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def test_parse_with_a_pydantic_model(client: openai.OpenAI) -> None:
    for seed in range(3):
        completion = client.chat.completions.parse(
            model=_model(client), messages=[{"role": "user", "content": "Plan a trip."}],
            response_format=Trip, max_tokens=200, seed=seed,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )  # fmt: skip
        parsed = completion.choices[0].message.parsed
        assert isinstance(parsed, Trip), completion.choices[0].message.content


def test_completions_constraints(client: openai.OpenAI) -> None:
    model = _model(client)
    bodies = [
        ({"guided_choice": ["red", "green"]}, lambda t: t in ("red", "green")),
        ({"guided_regex": r"[0-9]{3}-[0-9]{4}"}, lambda t: re.fullmatch(r"[0-9]{3}-[0-9]{4}", t)),
        ({"structured_outputs": {"grammar": 'root ::= "(" [a-c]{1,4} ")"'}},
         lambda t: re.fullmatch(r"\([a-c]{1,4}\)", t)),
        ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "trip", "schema": Trip.model_json_schema(), "strict": True}},
          "guided_decoding_backend": "guidance"},  # strict: no extra properties
         lambda t: Trip.model_validate_json(t) is not None),
    ]  # fmt: skip
    # A completion thinks as qwen3 does without chat_template_kwargs (on, vLLM 0.32): the
    # constraint would wait for </think>; a prompt that closed the block starts it at once.
    for extra, ok in bodies:
        r = client.completions.create(
            model=model, prompt="Answer:<think>\n\n</think>\n\n", max_tokens=120, seed=1,
            extra_body=extra,
        )  # fmt: skip
        assert r.choices[0].finish_reason == "stop" and ok(r.choices[0].text), (extra, r)


def test_bad_spec_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(
            model=_model(client), prompt="x", extra_body={"guided_regex": "(unclosed"}
        )
    assert info.value.body["param"] == "guided_regex"  # type: ignore[index]
    assert info.value.body["message"].startswith("guided_regex ")  # type: ignore[index]
    for body, param in [
        ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs.regex"),
        ({"response_format": {"type": "json_schema",
                              "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
         "response_format"),
    ]:  # fmt: skip
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(
                model=_model(client), messages=[{"role": "user", "content": "x"}],
                extra_body=body,
            )  # fmt: skip
        assert info.value.body["param"] == param  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=_model(client), messages=[{"role": "user", "content": "x"}],
            extra_body={"guided_regex": "a", "guided_choice": ["a"]},
        )  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_named_and_required_tool_calls_validate(client: openai.OpenAI, stream: bool) -> None:
    choices = [{"type": "function", "function": {"name": "get_weather"}}, "required"]
    for tool_choice in choices:
        for seed in range(3):
            calls = _tool_calls(client, tool_choice, seed, stream)
            assert calls, (tool_choice, seed)
            for name, args in calls:
                spec = {"get_weather": WEATHER, "get_time": TIME}[name]
                jsonschema.validate(json.loads(args), spec["function"]["parameters"])
            if isinstance(tool_choice, dict):
                assert [n for n, _ in calls] == ["get_weather"]


def _tool_calls(client: openai.OpenAI, tool_choice: object, seed: int,
                stream: bool) -> list[tuple[str, str]]:  # fmt: skip
    kw = dict(
        model=_model(client), messages=[{"role": "user", "content": "Weather?"}],
        tools=[WEATHER, TIME], tool_choice=tool_choice, max_tokens=200, seed=seed,
        # A random model never stops adding calls otherwise.
        parallel_tool_calls=tool_choice != "required",
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )  # fmt: skip
    if not stream:
        r = client.chat.completions.create(**kw)  # type: ignore[call-overload]
        msg = r.choices[0].message
        return [(c.function.name, c.function.arguments) for c in msg.tool_calls or []]
    calls: dict[int, list[str]] = {}
    for chunk in client.chat.completions.create(stream=True, **kw):  # type: ignore[call-overload]
        for d in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if d.id is not None:
                assert d.index not in calls and d.function is not None and d.function.name
                calls[d.index] = [d.function.name, d.function.arguments or ""]
            elif d.function is not None and d.function.arguments:
                calls[d.index][1] += d.function.arguments
    return [(name, args) for _, (name, args) in sorted(calls.items())]


PLAIN_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"  # shows no tools


def test_forced_tool_call_on_a_template_without_tools(client: openai.OpenAI) -> None:
    # vLLM serves it: the grammar forces the call although the prompt cannot show tools
    # (thinking off: else the random model's reasoning never ends and the call never starts).
    r = client.chat.completions.create(
        model=_model(client), messages=[{"role": "user", "content": "Weather?"}],
        tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=200, extra_body={"chat_template": PLAIN_TEMPLATE,
                                    "chat_template_kwargs": {"enable_thinking": False}},
    )  # type: ignore[call-overload]  # fmt: skip
    (call,) = r.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    # Under auto the model would have to choose tools it is never shown: refused by name.
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=_model(client), messages=[{"role": "user", "content": "Weather?"}],
            tools=[WEATHER], tool_choice="auto", extra_body={"chat_template": PLAIN_TEMPLATE},
        )  # type: ignore[call-overload]  # fmt: skip
    assert info.value.body["param"] == "tools"  # type: ignore[index]


def test_auto_tool_choice_and_reasoning(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=_model(client), messages=[{"role": "user", "content": "hi"}],
        tools=[WEATHER], max_tokens=8, seed=0,
    )  # fmt: skip
    msg = r.choices[0].message
    # A random model does not call tools (its output is all reasoning: thinking is on):
    # no tool calls, parsed without error.
    assert msg.tool_calls in (None, []) or r.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
def test_qwen3_thinks_unless_switched_off(client: openai.OpenAI, stream: bool) -> None:
    """vLLM 0.32's qwen3: thinking is on unless the effective chat_template_kwargs switch
    it off, and then the whole output is reasoning up to </think>: the random model never
    writes one, so all of it is reasoning and the content None. include_reasoning false
    hides it, but usage still counts its tokens; enable_thinking false makes it content."""
    base: dict[str, Any] = dict(
        model=_model(client), messages=[{"role": "user", "content": "hi"}], max_tokens=8,
        seed=0, stream_options={"include_usage": True} if stream else None,
    )  # fmt: skip

    def ask(**extra: Any) -> tuple[str | None, str | None, int]:
        if not stream:
            r = client.chat.completions.create(**base, extra_body=extra)
            m = r.choices[0].message
            assert r.usage is not None and r.usage.completion_tokens_details is not None
            reasoning = getattr(m, "reasoning", None)
            assert reasoning == getattr(m, "reasoning_content", None)  # both names
            tokens = r.usage.completion_tokens_details.reasoning_tokens or 0
            return reasoning, m.content, tokens
        reasoning = content = ""
        tokens = 0
        for chunk in client.chat.completions.create(**base, stream=True, extra_body=extra):
            if chunk.choices:
                d = chunk.choices[0].delta
                reasoning += getattr(d, "reasoning", None) or ""
                content += d.content or ""
            if chunk.usage is not None and chunk.usage.completion_tokens_details is not None:
                tokens = chunk.usage.completion_tokens_details.reasoning_tokens or 0
        return reasoning or None, content or None, tokens

    reasoning, content, tokens = ask()
    assert reasoning and content is None and tokens > 0
    hidden, content, tokens = ask(include_reasoning=False)
    assert hidden is None and content is None and tokens > 0
    reasoning, content, tokens = ask(chat_template_kwargs={"enable_thinking": False})
    assert reasoning is None and content and tokens == 0


def test_server_default_chat_template_kwargs_switch_thinking(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """--default-chat-template-kwargs sit under the request's own: the parser thinks as
    the merged kwargs say (vLLM's _effective_chat_template_kwargs)."""
    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("tiny-off"), "llama", vocab_size=4096, eos_token_id=0,
        max_position_embeddings=1024,
    )  # fmt: skip
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    app = build_app(
        lambda: AsyncEngine.open(
            str(path), max_model_len=512, kv_cache_memory_bytes=8 * 2**20,
            reasoning_parser="qwen3",
        ),
        AppSettings(log_interval_s=0, default_chat_template_kwargs={"enable_thinking": False}),
    )  # fmt: skip
    srv = ServerThread(app).start(timeout_s=240)
    try:
        with openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0) as c:
            body: dict[str, Any] = dict(
                model=_model(c), messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
            m = c.chat.completions.create(**body).choices[0].message
            assert getattr(m, "reasoning", None) is None and m.content
            on = {"chat_template_kwargs": {"enable_thinking": True}}
            m = c.chat.completions.create(**body, extra_body=on).choices[0].message
            assert getattr(m, "reasoning", None) and m.content is None
    finally:
        srv.stop()
    assert srv.error is None


def test_structured_outputs_wait_for_the_reasoning_when_thinking(client: openai.OpenAI) -> None:
    """The engine's gate agrees with the parser: thinking on, the constraint waits for
    </think> (the random model never writes it: the output is free reasoning); thinking
    off, it holds from the first token."""
    body: dict[str, Any] = dict(
        model=_model(client), messages=[{"role": "user", "content": "Pick."}], max_tokens=12,
        seed=0, extra_body={"structured_outputs": {"choice": ["red", "green"]}},
    )  # fmt: skip
    m = client.chat.completions.create(**body).choices[0].message
    assert getattr(m, "reasoning", None) and m.content is None
    assert m.reasoning not in ("red", "green")  # type: ignore[attr-defined]
    off = {**body["extra_body"], "chat_template_kwargs": {"enable_thinking": False}}
    r = client.chat.completions.create(**{**body, "extra_body": off})
    assert r.choices[0].message.content in ("red", "green"), r


def test_tool_messages_reach_the_template(client: openai.OpenAI, server: ServerThread) -> None:
    import httpx

    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]  # fmt: skip
    r = httpx.post(
        server.url + "/tokenize", json={"messages": messages, "tools": [WEATHER]}, timeout=30
    )
    assert r.status_code in (200, 400), r.text
    out = client.chat.completions.create(
        model=_model(client), messages=messages, tools=[WEATHER], tool_choice="none",  # type: ignore[arg-type]
        max_tokens=2,
    )  # fmt: skip
    assert out.choices[0].message.tool_calls in (None, [])


def test_strict_tools_under_auto(client: openai.OpenAI) -> None:
    """``"strict": true`` (the OpenAI Agents SDK's default) is honoured under auto: any
    call the model makes validates; beside response_format it is a 400 naming tools."""
    strict = {**WEATHER, "function": {**WEATHER["function"], "strict": True}}
    for seed in range(2):
        r = client.chat.completions.create(
            model=_model(client), messages=[{"role": "user", "content": "Weather?"}],
            tools=[strict], max_tokens=40, seed=seed,  # type: ignore[list-item]
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )  # fmt: skip
        for call in r.choices[0].message.tool_calls or []:
            jsonschema.validate(json.loads(call.function.arguments),
                                WEATHER["function"]["parameters"])  # fmt: skip
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=_model(client), messages=[{"role": "user", "content": "x"}],
            tools=[strict], response_format={"type": "json_object"},  # type: ignore[list-item]
        )  # fmt: skip
    assert info.value.body["param"] == "tools"  # type: ignore[index]


def test_stream_with_a_pydantic_model(client: openai.OpenAI) -> None:
    """The client's streaming helper parses the streamed answer into the model."""
    with client.chat.completions.stream(
        model=_model(client), messages=[{"role": "user", "content": "Plan a trip."}],
        response_format=Trip, max_tokens=200, seed=0,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    ) as stream:  # fmt: skip
        final = stream.get_final_completion()
    assert isinstance(final.choices[0].message.parsed, Trip)


# -- the Responses API on the same path --------------------------------------------------------


def test_responses_text_format_json_schema_validates(client: openai.OpenAI) -> None:
    fmt = {
        "type": "json_schema",
        "name": "trip",
        "schema": Trip.model_json_schema(),
        "strict": True,
    }
    for seed in range(2):
        r = client.responses.create(
            model=_model(client), input="Plan a trip.", max_output_tokens=200,
            text={"format": fmt},  # type: ignore[typeddict-item]
            extra_body={"seed": seed, "chat_template_kwargs": {"enable_thinking": False}},
        )  # fmt: skip
        assert r.status == "completed", r
        Trip.model_validate_json(r.output_text)
    with pytest.raises(openai.BadRequestError) as info:  # a schema that does not compile
        client.responses.create(
            model=_model(client), input="x",
            text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "nope"}}},
        )  # fmt: skip
    assert info.value.body["param"] == "text"  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_forced_function_call_validates(client: openai.OpenAI, stream: bool) -> None:
    flat = {"type": "function", **WEATHER["function"]}
    kwargs: dict[str, Any] = {
        "model": _model(client), "input": "Weather?", "tools": [flat],
        "tool_choice": {"type": "function", "name": "get_weather"}, "max_output_tokens": 200,
        "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
    }  # fmt: skip
    if stream:
        with client.responses.stream(**kwargs) as s:
            kinds = [e.type for e in s]
            r = s.get_final_response()
        assert "response.function_call_arguments.delta" in kinds
    else:
        r = client.responses.create(**kwargs)
    calls = [o for o in r.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER["function"]["parameters"])
