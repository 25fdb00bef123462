"""``streams.pump``: every output of every stream to one callback, in order, never
overlapping, and every iterator closed however the pump ends (on trio and asyncio)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from actorllm.core.outputs import RequestOutput
from actorllm.entrypoints.openai.streams import PrimedStream, pump

pytestmark = pytest.mark.anyio


def _out(rid: str, k: int, finished: bool) -> RequestOutput:
    return RequestOutput(
        request_id=f"{rid}:{k}",
        prompt=None,
        prompt_token_ids=[],
        prompt_logprobs=None,
        outputs=[],
        finished=finished,
    )


class _Stream:
    """An engine iterator's stand-in: ``n`` outputs (the last finished), a checkpoint
    before each, and a record of its close."""

    def __init__(self, rid: str, n: int) -> None:
        self.rid, self.n, self.k, self.closed = rid, n, 1, False

    def __aiter__(self) -> AsyncIterator[RequestOutput]:
        return self

    async def __anext__(self) -> RequestOutput:
        await anyio.sleep(0)
        if self.k >= self.n:
            raise StopAsyncIteration
        self.k += 1
        return _out(self.rid, self.k - 1, self.k == self.n)

    async def aclose(self) -> None:
        self.closed = True


def _primed(rid: str, n: int) -> tuple[PrimedStream, _Stream]:
    rest = _Stream(rid, n)
    return PrimedStream(first=_out(rid, 0, n == 1), rest=rest), rest


async def test_one_stream_runs_in_the_callers_task_in_order() -> None:
    primed, rest = _primed("a", 4)
    seen: list[str] = []
    caller = anyio.get_current_task().id

    async def on_output(i: int, out: RequestOutput) -> None:
        assert i == 0 and anyio.get_current_task().id == caller  # no task of its own
        seen.append(out.request_id)

    await pump([primed], on_output)
    assert seen == ["a:0", "a:1", "a:2", "a:3"] and rest.closed


async def test_streams_interleave_but_callbacks_never_overlap() -> None:
    pairs = [_primed(r, 5) for r in ("a", "b", "c")]
    seen: list[str] = []
    inside = False

    async def on_output(i: int, out: RequestOutput) -> None:
        nonlocal inside
        assert not inside  # serialized
        inside = True
        await anyio.sleep(0)  # another stream's output is ready meanwhile
        seen.append(out.request_id)
        inside = False

    await pump([p for p, _ in pairs], on_output)
    for rid in ("a", "b", "c"):
        assert [s for s in seen if s.startswith(rid)] == [f"{rid}:{k}" for k in range(5)]
    assert len(seen) == 15 and all(r.closed for _, r in pairs)
    assert seen[:3] != ["a:0", "a:1", "a:2"]  # concurrent, not one stream after another


@pytest.mark.parametrize("n_streams", [1, 2])
async def test_a_callback_error_closes_every_stream_and_is_raised_plainly(n_streams: int) -> None:
    pairs = [_primed(r, 10) for r in "ab"[:n_streams]]

    async def on_output(i: int, out: RequestOutput) -> None:
        if out.request_id == "a:2":
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await pump([p for p, _ in pairs], on_output)
    assert all(r.closed for _, r in pairs)


@pytest.mark.parametrize("n_streams", [1, 2])
async def test_cancellation_closes_every_stream(n_streams: int) -> None:
    pairs = [_primed(r, 10**6) for r in "ab"[:n_streams]]

    async def on_output(i: int, out: RequestOutput) -> None:
        if out.request_id.endswith(":3"):
            await anyio.sleep_forever()

    with anyio.move_on_after(0.2):
        await pump([p for p, _ in pairs], on_output)
    assert all(r.closed for _, r in pairs)
