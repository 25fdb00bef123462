"""The thread bridge under vLLM's front doors: one pump and one request-id renaming, the
same for ``LLMEngine`` and ``AsyncLLM``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from actorllm import AsyncEngineArgs, AsyncLLMEngine, LLMEngine, SamplingParams
from actorllm.compat.vllm.bridge import END, RequestIds, pump
from actorllm.core.outputs import CompletionOutput, RequestOutput
from actorllm.engine.errors import EngineClosedError

GREEDY = SamplingParams(temperature=0.0, max_tokens=6)
LONG = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)


def _output(request_id: str, finished: bool) -> RequestOutput:
    piece = CompletionOutput(index=0, text="x", token_ids=[1], finish_reason=None)
    return RequestOutput(
        request_id=request_id,
        prompt="p",
        prompt_token_ids=[1],
        prompt_logprobs=None,
        outputs=[piece],
        finished=finished,
    )


class _Engine:
    """``AsyncEngine.generate``'s shape: two outputs under the id it is given, or an error."""

    def __init__(self, error: Exception | None = None, block: bool = False) -> None:
        self.error = error
        self.block = block
        self.seen: list[tuple[str, dict[str, Any]]] = []

    async def generate(
        self, prompt: Any, params: Any, *, request_id: str, **options: Any
    ) -> AsyncIterator[RequestOutput]:
        self.seen.append((request_id, options))
        yield _output(request_id, finished=False)
        if self.error is not None:
            raise self.error
        if self.block:
            await anyio.sleep_forever()
        yield _output(request_id, finished=True)


def test_request_ids_rename_only_ids_aborted_before() -> None:
    ids = RequestIds()
    assert ids.engine_id("a") == "a"
    ids.retire("a")
    assert [ids.engine_id("a"), ids.engine_id("a"), ids.engine_id("b")] == ["a#1", "a#2", "b"]


@pytest.mark.anyio
async def test_the_pump_hands_outputs_under_the_callers_id_then_the_end() -> None:
    engine, got = _Engine(), []
    await pump(engine, "a", "a#3", "p", GREEDY, {"priority": 2}, got.append)  # type: ignore[arg-type]
    assert engine.seen == [("a#3", {"priority": 2})]
    assert [o.request_id for o in got[:-1]] == ["a", "a"] and got[-1] is END


@pytest.mark.anyio
async def test_the_pump_ends_with_the_error_or_engine_closed_when_cancelled() -> None:
    got: list[object] = []
    boom = ValueError("boom")
    await pump(_Engine(error=boom), "a", "a", "p", GREEDY, {}, got.append)  # type: ignore[arg-type]
    assert got[-1] is boom
    got.clear()
    with anyio.move_on_after(0.2):
        await pump(_Engine(block=True), "b", "b", "p", GREEDY, {}, got.append)  # type: ignore[arg-type]
    assert isinstance(got[-1], EngineClosedError)


def _wait_gone(engine: Any, request_id: str) -> None:
    deadline = time.monotonic() + 10
    while any(e.request_id.split("#")[0] == request_id for e in engine._ctx.ledger):
        assert time.monotonic() < deadline, f"{request_id} still open"
        time.sleep(0.01)


def test_llm_engine_and_async_llm_reuse_an_aborted_id_the_same_way(tiny_model) -> None:
    """Both doors: an aborted request's id can be used again at once; the new request's
    outputs carry the caller's id while the engine runs it under a fresh one."""
    small = {"model": tiny_model, "max_model_len": 256, "kv_cache_memory_bytes": 8 * 2**20}
    with LLMEngine(**small) as engine:
        engine.add_request("x", "abort me", LONG)
        engine.step()
        engine.abort_request("x")
        engine.add_request("x", "abort me", GREEDY)
        outs = []
        while engine.has_unfinished_requests():
            outs += engine.step()
        assert {o.request_id for o in outs} == {"x"} and outs[-1].finished

    async_engine = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(disable_log_stats=True, **small))
    try:

        async def main() -> list[RequestOutput]:
            stream = async_engine.generate("abort me", LONG, "x")
            await anext(stream)
            await stream.aclose()  # the caller leaves: the request is aborted
            return [o async for o in async_engine.generate("abort me", GREEDY, "x")]

        outs = asyncio.run(main())
        assert {o.request_id for o in outs} == {"x"} and outs[-1].finished
        _wait_gone(async_engine.engine, "x")
    finally:
        async_engine.shutdown()
