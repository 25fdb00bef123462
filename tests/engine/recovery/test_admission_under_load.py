"""New requests reach the scheduler within a few steps while hundreds of streams decode.

Under load a turn of the event loop is about one engine step (the step's outputs and every
caller's wake-up run in it), so an actor that yielded on every send moved a new request
one hop per turn: 64 requests arriving next to 256 busy streams took 70-80 steps to all
get their first token (1024 streams of the overhead benchmark took 224 steps to all start,
and at a short max_tokens the first ones finished before the last had started).
"""

from __future__ import annotations

import anyio
import pytest

from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.testing import open_test_engine
from actorllm.testing.engine_harness import engine_context

pytestmark = pytest.mark.anyio

BUSY, NEW = 256, 64
PROMPT = 16
MAX_LEN = 1024


def prompt(i: int) -> list[int]:
    return [3 + (i * 131 + j * 7) % 4000 for j in range(PROMPT)]


async def test_new_requests_start_within_a_few_steps_of_busy_streams() -> None:
    params = SamplingParams(
        max_tokens=MAX_LEN - PROMPT, ignore_eos=True, output_kind=RequestOutputKind.DELTA
    )
    async with open_test_engine(
        max_num_seqs=BUSY + NEW,
        max_num_batched_tokens=8192,
        max_model_len=MAX_LEN,
        block_size=16,
        num_blocks=(BUSY + NEW) * (MAX_LEN // 16) + 1,
        mailbox_size=2 * (BUSY + NEW),
    ) as engine:
        ctx = engine_context(engine)
        first_step: dict[int, int] = {}

        async def consume(i: int) -> None:
            async for _ in engine.generate({"prompt_token_ids": prompt(i)}, params):
                first_step.setdefault(i, ctx.admission.steps_done)

        async with anyio.create_task_group() as tg:
            for i in range(BUSY):
                tg.start_soon(consume, i)
            while len(first_step) < BUSY:  # every busy stream decoding
                await anyio.sleep(0.01)
            start = ctx.admission.steps_done
            for i in range(BUSY, BUSY + NEW):
                tg.start_soon(consume, i)
            while len(first_step) < BUSY + NEW:
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        waits = sorted(first_step[i] - start for i in range(BUSY, BUSY + NEW))
        # The busy streams had (MAX_LEN - PROMPT) tokens to go: none ended in the meantime.
        assert waits[-1] < MAX_LEN - PROMPT - 100
        # A few steps: 9-13 measured on a quiet host, 17 on a CI worker next to another
        # (the faster the host's steps against its event-loop turns, the more of them pass
        # while a request crosses the actors); 70-80 before new requests stopped yielding
        # on every hop. The bound sits between the two, clear of the host's noise.
        assert waits[-1] <= 32, waits
