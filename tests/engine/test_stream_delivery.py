"""Every step's token reaches every caller on its own: callers that read are never merged.

Sixteen callers of ``AsyncEngine.generate`` (DELTA, one token per step) each read one
output per token, and the ledger counts no merged output; a caller that stops reading gets
its outputs merged (and counted) without changing what the others read.
"""

from __future__ import annotations

import time

import anyio
import pytest

from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.testing import open_test_engine

pytestmark = pytest.mark.anyio

TOKENS = 24
PARAMS = SamplingParams(max_tokens=TOKENS, ignore_eos=True, output_kind=RequestOutputKind.DELTA)


async def _read(engine, i: int, counts: dict[int, list[int]]) -> None:
    counts[i] = [
        len(out.outputs[0].token_ids)
        async for out in engine.generate(f"prompt number {i}", PARAMS, request_id=f"r{i}")
    ]


async def test_sixteen_callers_each_read_one_output_per_token() -> None:
    counts: dict[int, list[int]] = {}
    async with open_test_engine(step_delay_s=0.002, max_num_seqs=16) as engine:
        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(_read, engine, i, counts)
        stats = engine.statistics()
    assert len(counts) == 16
    assert all(c == [1] * TOKENS for c in counts.values()), counts
    assert stats.ledger.merged_outputs == 0


async def test_a_caller_that_stops_reading_is_merged_alone() -> None:
    counts: dict[int, list[int]] = {}
    lagged: list[int] = []
    async with open_test_engine(step_delay_s=0.002, max_num_seqs=16) as engine:

        async def lag() -> None:
            async for out in engine.generate("the lagging one", PARAMS, request_id="lag"):
                lagged.append(len(out.outputs[0].token_ids))
                if len(lagged) == 1:  # stop reading until the request has ended
                    while "lag" in engine._ctx.ledger:
                        await anyio.sleep(0.005)

        async with anyio.create_task_group() as tg:
            tg.start_soon(lag)
            for i in range(8):
                tg.start_soon(_read, engine, i, counts)
        stats = engine.statistics()
    assert all(c == [1] * TOKENS for c in counts.values()), counts
    assert sum(lagged) == TOKENS and len(lagged) < TOKENS
    # every step the lagging caller did not read was folded into its unread output
    assert stats.ledger.merged_outputs == TOKENS - len(lagged)


async def test_callers_read_every_step_after_the_loop_was_held_up() -> None:
    # A task that blocks the event loop now and then (as a slow handler would): meanwhile
    # the worker thread finishes the steps in flight, and they reach the output processor
    # together. The callers still read one output per step.
    counts: dict[int, list[int]] = {}
    # two steps in flight: both finish while the loop is held
    config = {"max_num_seqs": 16, "async_scheduling": True}
    async with open_test_engine(step_delay_s=0.002, **config) as engine:

        async def hold_up() -> None:
            while len(counts) < 8:
                await anyio.sleep(0.004)
                time.sleep(0.02)  # blocks the loop

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold_up)
            for i in range(8):
                tg.start_soon(_read, engine, i, counts)
        stats = engine.statistics()
    assert all(c == [1] * TOKENS for c in counts.values()), counts
    assert stats.ledger.merged_outputs == 0
