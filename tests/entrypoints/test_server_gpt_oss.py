"""A tiny random gpt-oss on the real engine, over HTTP: the chat prompt is harmony, the
model's sinks, sliding layers and biased experts run, and whatever the random weights
write comes back parsed by channel — no special token leaks into the reply."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.harmony import harmony_tokenizer
from tests.helpers.models import make_tiny_checkpoint


@pytest.fixture(scope="module")
def oss(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    tok = harmony_tokenizer()
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("gpt-oss"), "gpt_oss", vocab_size=len(tok))
    tok.save_pretrained(path)
    app = build_app(
        lambda: AsyncEngine.open(str(path), max_model_len=512, kv_cache_memory_bytes=8 << 20),
        AppSettings(log_interval_s=0, enable_auto_tool_choice=True, tool_call_parser="openai"),
    )
    srv = ServerThread(app).start(timeout_s=240)
    yield srv
    srv.stop()
    assert srv.error is None


def test_chat_on_a_random_gpt_oss(oss: ServerThread) -> None:
    with openai.OpenAI(base_url=oss.url + "/v1", api_key="x", max_retries=0) as client:
        model = client.models.list().data[0].id
        tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        r = client.chat.completions.create(  # type: ignore[call-overload]
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=24,
            temperature=0, tools=tools, reasoning_effort="high",
        )  # fmt: skip
        assert r.usage is not None and r.usage.prompt_tokens > 40  # the harmony preamble
        assert 1 <= r.usage.completion_tokens <= 24
        msg = r.choices[0].message
        for part in (msg.content or "", getattr(msg, "reasoning_content", None) or ""):
            assert "<|" not in part
        stream = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=24,
            temperature=0, stream=True,
        )  # fmt: skip
        chunks = list(stream)
        assert chunks[0].choices[0].delta.role == "assistant"
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert "<|" not in streamed
