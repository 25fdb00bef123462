"""bench/lane_bound.py: inside the window the least lane, not the real one, hands each
caller its next token (once, in order, with its text), on both loops."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import anyio
import pytest

from actorllm.bench.lane_bound import least_output_lane
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.testing.engine_harness import open_test_engine

pytestmark = pytest.mark.anyio
TOKENS = 12


async def _stream(
    lane: Callable[[], contextlib.AbstractContextManager[None]],
) -> dict[int, list[RequestOutput]]:
    """Two DELTA requests' first outputs, read with ``lane`` in force."""
    params = SamplingParams(max_tokens=200, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
    seen: dict[int, list[RequestOutput]] = {0: [], 1: []}
    async with open_test_engine(max_num_seqs=2, max_model_len=256) as engine:

        async def consume(i: int, enough: anyio.Event) -> None:
            prompt = {"prompt_token_ids": [5 + i, 17, 29, 41]}
            async for out in engine.generate(prompt, params, request_id=f"r{i}"):
                seen[i].append(out)
                if len(seen[i]) == TOKENS:
                    enough.set()

        with lane():
            events = [anyio.Event(), anyio.Event()]
            async with anyio.create_task_group() as tg:
                for i, event in enumerate(events):
                    tg.start_soon(consume, i, event)
                for event in events:
                    await event.wait()
                tg.cancel_scope.cancel()
    return {i: outs[:TOKENS] for i, outs in seen.items()}


async def test_the_least_lane_streams_every_token_once(anyio_backend: str) -> None:
    real = await _stream(contextlib.nullcontext)
    least = await _stream(least_output_lane)
    for i in (0, 1):
        # The same tokens and texts, one per output, none lost or repeated...
        assert [o.outputs[0].token_ids for o in least[i]] == [
            o.outputs[0].token_ids for o in real[i]
        ]
        assert [o.outputs[0].text for o in least[i]] == [o.outputs[0].text for o in real[i]]
        assert all(len(o.outputs[0].token_ids) == 1 for o in least[i])
        # ...built by the least lane (the floor's outputs carry no first-token stamp)
        assert all(o.metrics is not None and o.metrics.first_token_time for o in real[i])
        assert all(o.metrics is not None and o.metrics.first_token_time == 0.0 for o in least[i])
