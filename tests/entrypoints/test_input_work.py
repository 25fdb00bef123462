"""Long prompts are tokenized off the event loop; short ones inline."""

from __future__ import annotations

import threading

import anyio
import pytest

from actorllm.entrypoints.openai.input_work import (
    OFF_LOOP_CHARS,
    messages_chars,
    prompt_chars,
    run_input_work,
)
from actorllm.entrypoints.openai.protocol.chat_request import AssistantMessage, UserMessage

pytestmark = pytest.mark.anyio


async def test_short_input_runs_inline_and_long_input_on_a_thread() -> None:
    limiter = anyio.CapacityLimiter(1)
    loop_thread = threading.get_ident()
    assert await run_input_work(threading.get_ident, OFF_LOOP_CHARS - 1, limiter) == loop_thread
    assert await run_input_work(threading.get_ident, OFF_LOOP_CHARS, limiter) != loop_thread


async def test_off_loop_work_runs_one_at_a_time_and_keeps_its_errors() -> None:
    limiter = anyio.CapacityLimiter(1)
    running, most = 0, 0

    def work() -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        threading.Event().wait(0.01)
        running -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(run_input_work, work, OFF_LOOP_CHARS, limiter)
    assert most == 1

    def bad() -> None:
        raise ValueError("no template")

    with pytest.raises(ValueError, match="no template"):
        await run_input_work(bad, OFF_LOOP_CHARS, limiter)


def test_input_sizes() -> None:
    assert prompt_chars("abc") == 3
    assert prompt_chars(["ab", "cde"]) == 5
    assert prompt_chars([1, 2, 3]) == 0 and prompt_chars([[1, 2], [3]]) == 0
    msgs = [UserMessage(content="hello"), AssistantMessage(content=None)]
    assert messages_chars(msgs) == 5
