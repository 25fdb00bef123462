"""End to end on the real engine and the embedded demo model (random weights, so only the
shape of the answers is checked): the openai client, streaming, and a disconnect that gives
the KV blocks back (running 0, KV usage 0 on /metrics)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.server_thread import ServerThread
from tests.entrypoints.test_server_metrics import sample

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real() -> Iterator[ServerThread]:
    app = build_app(
        lambda: AsyncEngine.open(None, max_model_len=256), AppSettings(log_interval_s=0)
    )
    srv = ServerThread(app).start(timeout_s=240)
    yield srv
    srv.stop()
    assert srv.error is None


def test_openai_client_on_the_demo_model(real: ServerThread) -> None:
    with openai.OpenAI(base_url=real.url + "/v1", api_key="x", max_retries=0) as client:
        model = client.models.list().data[0].id
        r = client.completions.create(
            model=model, prompt="Hello", max_tokens=5, n=2, temperature=0, logprobs=1
        )
        assert len(r.choices) == 2 and r.choices[0].text == r.choices[1].text  # greedy
        assert r.usage is not None and r.usage.completion_tokens <= 10
        lp = r.choices[0].logprobs
        assert (
            lp is not None and lp.token_logprobs and len(lp.token_logprobs) == len(lp.tokens or [])
        )
        stream = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].usage is not None and 1 <= chunks[-1].usage.completion_tokens <= 4


def test_disconnect_frees_blocks(real: ServerThread) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=real.url) as c, c.stream("POST", "/v1/completions", json=body) as r:
        assert next(r.iter_lines()).startswith("data: ")
    deadline = time.monotonic() + 10
    while True:
        text = httpx.get(real.url + "/metrics").text
        name = {"model_name": "actorllm-demo"}
        running = sample(text, "actorllm:num_requests_running", **name)
        usage = sample(text, "actorllm:kv_cache_usage_perc", **name)
        if running == 0 and usage == 0:
            break
        assert time.monotonic() < deadline, (running, usage)
        time.sleep(0.1)


def test_openai_client_stop_strings_chat_and_streamed_completions(real: ServerThread) -> None:
    with openai.OpenAI(base_url=real.url + "/v1", api_key="x", max_retries=0) as client:
        model = client.models.list().data[0].id
        free = client.completions.create(model=model, prompt="Stop", max_tokens=16, temperature=0)
        text = free.choices[0].text
        stop = next(text[i : i + 2] for i in range(3, len(text) - 2) if text[i : i + 2].strip())
        cut = client.completions.create(
            model=model, prompt="Stop", max_tokens=16, temperature=0, stop=[stop]
        )
        assert cut.choices[0].finish_reason == "stop"
        assert cut.choices[0].text == text[: text.index(stop)]

        pieces = client.completions.create(
            model=model, prompt="Stop", max_tokens=16, temperature=0, stream=True
        )
        assert "".join(c.choices[0].text for c in pieces if c.choices) == text

        chat = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=6, n=2, seed=3
        )
        assert [c.index for c in chat.choices] == [0, 1]
        assert all(c.message.role == "assistant" for c in chat.choices)
        assert chat.usage is not None and chat.usage.completion_tokens <= 12

        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(model=model, prompt="word " * 400, max_tokens=4)
        assert info.value.status_code == 400
        with pytest.raises(openai.NotFoundError):
            client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
