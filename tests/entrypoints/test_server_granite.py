"""--reasoning-parser granite over HTTP with the official client: with Granite's
``thinking`` template switch the thought lands in ``reasoning_content`` (whole and
streamed) and only the answer after 'Here is my response:' is held to the schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.testing.engine_harness import open_test_engine
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.granite import SCHEMA, GraniteThinker, check_answer, granite_tokenizer

FORMAT: Any = {"type": "json_schema", "json_schema": {"name": "pet", "schema": SCHEMA}}
MESSAGES: Any = [{"role": "user", "content": "A pet as JSON?"}]
THINKING = {"chat_template_kwargs": {"thinking": True}}
REASONING = "\nThe user wants a pet: a cat.\n\n"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    tok = granite_tokenizer()
    engine = lambda: open_test_engine(  # noqa: E731
        model=GraniteThinker(tok), tokenizer=tok, reasoning_parser="granite",
        structured_outputs_disable_any_whitespace=True,
    )  # fmt: skip
    srv = ServerThread(build_app(engine, AppSettings(log_interval_s=0))).start()
    yield srv
    srv.stop()
    assert srv.error is None


@pytest.fixture
def client(server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as c:
        yield c


def _create(client: openai.OpenAI, **kw: Any) -> Any:
    return client.chat.completions.create(
        model="scripted", messages=MESSAGES, response_format=FORMAT, max_tokens=120, **kw
    )


def test_thinking_reasoning_is_free_and_the_answer_validates(client: openai.OpenAI) -> None:
    msg = _create(client, extra_body=THINKING).choices[0].message
    assert getattr(msg, "reasoning_content", None) == REASONING
    check_answer(msg.content)


def test_thinking_streamed(client: openai.OpenAI) -> None:
    reasoning, content = "", ""
    for chunk in _create(client, extra_body=THINKING, stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning += getattr(delta, "reasoning_content", None) or ""
            content += delta.content or ""
    assert reasoning == REASONING
    check_answer(content)


@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False}, {"enable_thinking": True}])
def test_without_thinking_the_whole_output_is_the_answer(
    client: openai.OpenAI, kwargs: dict[str, Any]
) -> None:
    """Granite's template reads ``thinking`` only (as with vLLM): no thought, no reasoning,
    the output is constrained from its first token."""
    msg = _create(client, extra_body={"chat_template_kwargs": kwargs}).choices[0].message
    assert getattr(msg, "reasoning_content", None) is None
    check_answer(msg.content)
