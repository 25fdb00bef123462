"""vLLM 0.32's queue limits (engine/api/admission_limits.py): ``max_num_queued_reqs``
counts open sequences (``n`` each), ``max_num_queued_tokens`` the prompts still in prefill;
a refusal is counted by reason; nothing is refused without a limit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.engine.errors import EngineOverloadedError, MaxQueuedTokensError, QueueOverflowError
from actorllm.testing import open_test_engine

pytestmark = pytest.mark.anyio
LONG = SamplingParams(max_tokens=500, ignore_eos=True)


async def _open(engine: AsyncEngine, prompt: Any, params: SamplingParams) -> None:
    async for _ in engine.generate(prompt, params):
        pass


async def _until(check: Callable[[], Awaitable[bool]]) -> None:
    with anyio.fail_after(10):
        while not await check():
            await anyio.sleep(0.005)


async def test_max_num_queued_reqs_counts_open_sequences() -> None:
    async with open_test_engine(step_delay_s=0.005, max_num_queued_reqs=3) as engine:
        engine.check_admission(3)  # nothing open: three sequences fit
        with pytest.raises(QueueOverflowError, match="currently busy") as refused:
            engine.check_admission(4)
        assert isinstance(refused.value, EngineOverloadedError)  # the server's 503
        async with anyio.create_task_group() as tg:
            tg.start_soon(_open, engine, "two samples", LONG.clone(n=2, seed=1))

            async def opened() -> bool:
                return (await engine.get_stats()).num_open_requests == 1

            await _until(opened)
            engine.check_admission(1)  # 2 open + 1 = 3
            with pytest.raises(QueueOverflowError):
                engine.check_admission(2)
            tg.cancel_scope.cancel()
        stats = await engine.get_stats()
        assert stats.requests is not None
        assert stats.requests.admission_rejections == {"max_num_queued_reqs": 2}


async def test_max_num_queued_tokens_counts_prompts_before_their_first_token() -> None:
    async with open_test_engine(step_delay_s=0.005, max_num_queued_tokens=4) as engine:
        await engine.pause_generation(mode="keep")  # requests stay in prefill, unscheduled
        engine.check_admission()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_open, engine, {"prompt_token_ids": [7, 8, 9]}, LONG)

            async def queued() -> bool:
                return engine.get_num_queued_tokens() == 3

            await _until(queued)
            engine.check_admission()  # 3 < 4
            tg.start_soon(_open, engine, {"prompt_token_ids": [10, 11]}, LONG)

            async def five() -> bool:
                return engine.get_num_queued_tokens() == 5

            await _until(five)
            with pytest.raises(MaxQueuedTokensError, match="prefill token backlog"):
                engine.check_admission()
            await engine.resume_generation()

            async def decoding() -> bool:  # the first tokens came: nothing in prefill
                return engine.get_num_queued_tokens() == 0

            await _until(decoding)
            engine.check_admission()
            tg.cancel_scope.cancel()
        stats = await engine.get_stats()
        assert stats.requests is not None
        assert stats.requests.admission_rejections == {"max_num_queued_tokens": 1}


async def test_no_limits_refuse_nothing_and_generate_is_not_limited() -> None:
    async with open_test_engine(max_num_queued_reqs=0) as engine:
        with pytest.raises(QueueOverflowError):
            engine.check_admission()
        # as vLLM's: only the server's routes check; an engine caller is not refused
        outs = [o async for o in engine.generate("offline", SamplingParams(max_tokens=2))]
        assert outs[-1].finished
    async with open_test_engine() as engine:
        engine.check_admission(10**6)
