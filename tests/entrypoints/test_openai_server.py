"""The official ``openai`` client against a real hypercorn server (completions and chat,
streamed and not, n=2, logprobs, stop, usage)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from tests.entrypoints.fake_engine import SCRIPT, FakeEngine
from tests.entrypoints.server_thread import ServerThread

MODEL = "fake-model"


@pytest.fixture(scope="module")
def client(server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


def words(k: int, start: int = 0) -> str:
    return "".join(" " + SCRIPT[(start + i) % len(SCRIPT)] for i in range(k))


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_completion(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=4)
    assert r.id.startswith("cmpl-") and r.object == "text_completion" and r.model == MODEL
    assert [c.text for c in r.choices] == [words(4)]
    assert r.choices[0].finish_reason == "length"
    assert r.usage is not None and r.usage.completion_tokens == 4
    assert r.usage.total_tokens == r.usage.prompt_tokens + 4
    assert r.usage.prompt_tokens_details is None  # vLLM's, without --enable-prompt-tokens-details


def test_completion_batch_and_n_index_like_openai(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt=["a", "b"], max_tokens=2, n=2, seed=1)
    # prompt i, sample j -> index i * n + j; the fake's sample j starts j words later.
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert [c.text for c in r.choices] == [words(2), words(2, 1), words(2), words(2, 1)]
    assert r.usage is not None and r.usage.completion_tokens == 8


def test_completion_stop_string(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt="x", max_tokens=10, stop=["fox"])
    choice = r.choices[0]
    assert choice.text == " the quick brown "
    assert choice.finish_reason == "stop"
    assert choice.model_extra is not None and choice.model_extra["stop_reason"] == "fox"


def test_completion_logprobs_and_echo(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt="hi", max_tokens=3, logprobs=2, echo=True)
    lp = r.choices[0].logprobs
    assert lp is not None and lp.tokens is not None and lp.token_logprobs is not None
    assert r.choices[0].text.startswith("hi")
    # echo: the prompt's tokens come first, the first one without a logprob.
    assert lp.token_logprobs[0] is None
    assert lp.tokens[-3:] == [" the", " quick", " brown"]
    assert lp.token_logprobs[-3:] == [-0.5, -0.5, -0.5]
    assert lp.top_logprobs is not None and len(lp.top_logprobs[-1]) == 2
    assert lp.text_offset is not None and lp.text_offset[-3:] == [2, 6, 12]


def test_completion_streamed_with_usage(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model=MODEL,
        prompt="x",
        max_tokens=3,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    text: dict[int, str] = {0: "", 1: ""}
    finish: dict[int, str | None] = {}
    usage = None
    for chunk in stream:
        for c in chunk.choices:
            text[c.index] += c.text
            finish[c.index] = c.finish_reason or finish.get(c.index)
        if chunk.usage is not None:
            assert chunk.choices == []
            usage = chunk.usage
    assert text == {0: words(3), 1: words(3, 1)}
    assert finish == {0: "length", 1: "length"}
    assert usage is not None and usage.completion_tokens == 6


def test_chat(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_completion_tokens=3,
        n=2,
    )
    assert r.id.startswith("chatcmpl-") and r.object == "chat.completion"
    assert [c.message.content for c in r.choices] == [words(3), words(3, 1)]
    assert all(c.message.role == "assistant" and c.finish_reason == "length" for c in r.choices)
    assert r.usage is not None and r.usage.completion_tokens == 6 and r.usage.prompt_tokens > 0


def test_chat_content_parts_and_logprobs(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        max_tokens=2,
        logprobs=True,
        top_logprobs=2,
    )
    lp = r.choices[0].logprobs
    assert lp is not None and lp.content is not None
    assert [t.token for t in lp.content] == [" the", " quick"]
    assert all(len(t.top_logprobs) == 2 and t.logprob == -0.5 for t in lp.content)
    assert lp.content[0].bytes == list(b" the")


def test_chat_streamed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        stop="brown",
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == " the quick "
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


def test_an_empty_model_is_the_served_one_as_vllm(client: openai.OpenAI) -> None:
    text = client.completions.create(model="", prompt="x", max_tokens=1)
    chat = client.chat.completions.create(
        model="", messages=[{"role": "user", "content": "hi"}], max_tokens=1
    )
    assert text.model == chat.model == MODEL


def test_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=1)


def test_bad_parameter_is_bad_request(client: openai.OpenAI, engine: FakeEngine) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="x", temperature=-1.0)
    assert "temperature" in str(info.value)


def test_requests_finished_cleanly(engine: FakeEngine, client: openai.OpenAI) -> None:
    client.completions.create(model=MODEL, prompt="y", max_tokens=1)
    assert not engine.open


def test_completions_carry_the_system_fingerprint_as_vllm(client: openai.OpenAI) -> None:
    """vLLM's --fingerprint-mode full: non-streamed answers, and a stream's last chunk (the
    usage chunk, or each choice's finishing chunk without one)."""
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    text = client.completions.create(model=MODEL, prompt="x", max_tokens=2)
    fingerprint = chat.system_fingerprint
    assert fingerprint is not None and fingerprint.startswith("actorllm-0.1.0-")
    assert len(fingerprint.rsplit("-", 1)[1]) == 8 and text.system_fingerprint == fingerprint
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True
        )
    )
    assert [c.system_fingerprint for c in chunks] == [None] * (len(chunks) - 1) + [fingerprint]
    assert chunks[-1].choices[0].finish_reason == "length"
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt="x",
            max_tokens=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert [c.system_fingerprint for c in chunks] == [None] * (len(chunks) - 1) + [fingerprint]
    assert chunks[-1].usage is not None


@pytest.mark.parametrize(
    ("settings", "expected"),
    [({"fingerprint_mode": "custom", "fingerprint_value": "fp-1"}, "fp-1"),
     ({"fingerprint_mode": "none"}, None)],
)  # fmt: skip
def test_fingerprint_modes(settings: dict[str, str], expected: str | None) -> None:
    from tests.entrypoints.conftest import start_server

    server = start_server(FakeEngine(), **settings)
    try:
        with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as c:
            r = c.completions.create(model=MODEL, prompt="x", max_tokens=1)
        assert r.system_fingerprint == expected
    finally:
        server.stop()
    assert server.error is None


@pytest.mark.parametrize("fmt", ["TEXT", "json"])
def test_a_load_report_header_answers_endpoint_load_metrics_format(
    client: openai.OpenAI, fmt: str
) -> None:
    """vLLM's ORCA load report: asked for with endpoint-load-metrics-format, answered in
    endpoint-load-metrics (non-streamed chat and text completions)."""
    asked = {"endpoint-load-metrics-format": fmt}
    text = client.completions.with_raw_response.create(
        model=MODEL, prompt="x", max_tokens=1, extra_headers=asked
    )
    chat = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1, extra_headers=asked
    )
    for r in (text, chat):
        report = r.headers["endpoint-load-metrics"]
        if fmt == "TEXT":
            assert report.startswith("TEXT named_metrics.kv_cache_usage_perc=")
            assert ", named_metrics.num_requests_waiting=0.0" in report
        else:
            named = json.loads(report.removeprefix("JSON "))["named_metrics"]
            assert set(named) == {"kv_cache_usage_perc", "num_requests_waiting"}
    plain = client.completions.with_raw_response.create(model=MODEL, prompt="x", max_tokens=1)
    assert "endpoint-load-metrics" not in plain.headers
    other = client.completions.with_raw_response.create(
        model=MODEL, prompt="x", max_tokens=1, extra_headers={"endpoint-load-metrics-format": "XML"}
    )
    assert "endpoint-load-metrics" not in other.headers


def test_prompt_tokens_details_with_the_flag_as_vllm() -> None:
    """--enable-prompt-tokens-details: completions, chat and the chat batch report the prompt
    tokens the prefix cache served and those written to it."""
    import httpx

    from tests.entrypoints.conftest import start_server

    server = start_server(FakeEngine(), enable_prompt_tokens_details=True)
    try:
        with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as c:
            text = c.completions.create(model=MODEL, prompt="x", max_tokens=1)
            chat = c.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1
            )
        for usage in (text.usage, chat.usage):
            assert usage is not None and usage.prompt_tokens_details is not None
            details = usage.prompt_tokens_details
            assert (details.cached_tokens, details.created_cache_tokens) == (2, 3)  # type: ignore[attr-defined]
        hi = [{"role": "user", "content": "a"}]
        batch = httpx.post(
            server.url + "/v1/chat/completions/batch",
            json={"model": MODEL, "messages": [hi, hi], "max_tokens": 1},
            timeout=30,
        ).json()
        assert batch["usage"]["prompt_tokens_details"] == {
            "cached_tokens": 4,
            "created_cache_tokens": 6,
        }
    finally:
        server.stop()
    assert server.error is None
