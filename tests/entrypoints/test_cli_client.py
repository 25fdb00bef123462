"""``actorllm chat`` and ``actorllm complete``: clients of a running server, as ``vllm chat``
and ``vllm complete``; here against the app on hypercorn over the fake engine, with and
without --api-key and --root-path."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from actorllm.engine.config.engine_config import EngineConfig
from actorllm.entrypoints import cli
from actorllm.entrypoints.commands.server_client import print_stream
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread

KEY = "sk-cli"


@pytest.fixture(scope="module")
def keyed(engine: FakeEngine) -> Iterator[ServerThread]:
    srv = start_server(engine, api_key=KEY, root_path="/llm")
    yield srv
    srv.stop()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_chat_quick(server: ServerThread, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "chat", "--url", server.url + "/v1", "-q", "hi")
    assert status == 0
    # vLLM's output: the model it picked (the first the server lists), then the reply.
    assert out.startswith("Using model: fake-model\n the quick brown fox")


def test_chat_system_prompt_and_model_name(
    server: ServerThread, engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--url", server.url + "/v1", "--model-name", "fake-model"]
    status, out, _ = run(capsys, "chat", *argv, "--system-prompt", "Be terse.", "-q", "hi")
    assert status == 0 and out.startswith("Using model: fake-model\n")
    assert engine.last_request is not None and "Be terse." in str(engine.last_request[0])


def test_complete_quick_with_max_tokens(
    server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server.url + "/v1"
    status, out, _ = run(capsys, "complete", "--url", url, "--max-tokens", "3", "-q", "Once")
    assert status == 0 and out == "Using model: fake-model\n the quick brown\n"


def test_stats(server: ServerThread, capsys: pytest.CaptureFixture[str]) -> None:
    url = server.url + "/v1"
    status, out, _ = run(
        capsys, "complete", "--url", url, "--max-tokens", "3", "-q", "x", "--stats"
    )
    lines = out.splitlines()
    assert status == 0 and lines[2].startswith("TTFT: ") and lines[2].endswith(" ms")
    assert lines[3].startswith("TPS:  ") and "(3 tokens in " in lines[3]


def test_the_key_from_the_flag_or_the_environment(
    keyed: ServerThread, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for prefix in ("", "/llm"):  # with the proxy's prefix or without
        url = keyed.url + prefix + "/v1"
        status, out, _ = run(capsys, "complete", "--url", url, "--api-key", KEY, "-q", "a")
        assert status == 0 and "the quick" in out
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    status, out, _ = run(capsys, "chat", "--url", keyed.url + "/llm/v1", "-q", "a")
    assert status == 0 and "the quick" in out
    # The flag wins over the environment, as in vLLM.
    status, _, err = run(capsys, "chat", "--url", keyed.url + "/v1", "--api-key", "no", "-q", "a")
    assert status == 1 and "401" in err


@pytest.mark.parametrize("command", ["chat", "complete"])
@pytest.mark.parametrize("key", [[], ["--api-key", "wrong"]], ids=["no-key", "wrong-key"])
def test_no_or_wrong_key_is_one_error_line(
    keyed: ServerThread, command: str, key: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, command, "--url", keyed.url + "/llm/v1", *key, "-q", "a")
    assert status == 1 and out == ""
    assert err == "error: the server answered 401: Invalid or missing API key.\n"


def test_unknown_model_and_unreachable_server(
    server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server.url + "/v1"
    status, _, err = run(capsys, "chat", "--url", url, "--model-name", "nope", "-q", "a")
    assert status == 1 and err.startswith("error: the server answered 404: ")
    status, _, err = run(capsys, "complete", "--url", "http://127.0.0.1:9/v1", "-q", "a")
    assert status == 1 and err.startswith("error: cannot reach http://127.0.0.1:9/v1: ")


def test_chat_session_keeps_the_conversation(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `vllm chat` sends no max_tokens: a server-side default keeps the replies short.
    fake = FakeEngine(max_model_len=128)
    fake.config = EngineConfig(
        generation_config="vllm", override_generation_config={"max_new_tokens": 3}
    )
    srv = start_server(fake)
    too_long = "x " * 200
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"hello there\n{too_long}\nand again\n"))
    try:
        status, out, err = run(capsys, "chat", "--url", srv.url + "/v1")
    finally:
        srv.stop()
    assert status == 0
    assert out == (
        "Using model: fake-model\nPlease enter a message for the chat model:\n"
        ">  the quick brown\n> >  the quick brown\n> "  # the second message got no reply
    )
    # The refused message is one error line, dropped from the conversation; the session
    # goes on with the history it had.
    assert err.startswith("error: the server answered 400: ") and err.count("\n") == 1
    assert fake.last_request is not None
    last = str(fake.last_request[0])
    assert "hello there" in last and "the quick brown" in last and "and again" in last
    assert "x x" not in last


def test_complete_session_one_prompt_a_line(
    server: ServerThread, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\ntwo\n"))
    status, out, _ = run(capsys, "complete", "--url", server.url + "/v1", "--max-tokens", "2")
    assert status == 0
    assert out == (
        "Using model: fake-model\nPlease enter prompt to complete:\n>  the quick\n>  the quick\n> "
    )


def test_wrong_key_in_a_real_process_is_no_traceback(keyed: ServerThread) -> None:
    env = {**os.environ, "OPENAI_API_KEY": "wrong"}
    argv = ["chat", "--url", keyed.url + "/llm/v1", "-q", "hi"]
    done = subprocess.run(
        [sys.executable, "-m", "actorllm.entrypoints.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith(
        "error: the server answered 401: Invalid or missing API key."
    )


def test_reasoning_is_printed_between_think_tags(capsys: pytest.CaptureFixture[str]) -> None:
    """As vLLM prints a reasoning model's stream; the answer alone joins the conversation."""

    def delta(**fields: str) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": fields}]}

    chunks = [
        delta(role="assistant"),
        delta(reasoning="Let me "),
        delta(reasoning_content="think."),  # the older field name
        delta(content="Hi"),
        delta(content="!"),
        {"choices": [], "usage": {"completion_tokens": 5}},
    ]
    assert print_stream(iter(chunks), stats=False) == "Hi!"
    assert capsys.readouterr().out == "<think>\nLet me think.\n</think>\nHi!\n"
