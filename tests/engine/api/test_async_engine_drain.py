"""``AsyncEngine.drain``: stop accepting, let open requests finish within the timeout,
abort the rest (their streams end with finish_reason "abort"), nothing left held."""

from __future__ import annotations

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.errors import EngineClosedError
from actorllm.testing.engine_harness import check_invariants, open_test_engine

pytestmark = pytest.mark.anyio


async def test_drain_finishes_short_requests_and_aborts_long_ones() -> None:
    async with open_test_engine(step_delay_s=0.01, shutdown_timeout=0.3) as engine:
        ends: dict[str, str | None] = {}
        started = anyio.Event()

        async def one(name: str, n: int) -> None:
            params = SamplingParams(max_tokens=n, ignore_eos=True)
            async for out in engine.generate(f"drain {name}", params, request_id=name):
                started.set()
                ends[name] = out.outputs[0].finish_reason

        async with anyio.create_task_group() as tg:
            for name, n in (("short", 5), ("long", 500)):
                tg.start_soon(one, name, n)
            await started.wait()
            aborted = await engine.drain()  # the config's shutdown_timeout: 0.3 s
            with pytest.raises(EngineClosedError):
                await engine.generate("late", SamplingParams(max_tokens=1)).__anext__()
        assert aborted == 1
        assert ends == {"short": "length", "long": "abort"}
        await check_invariants(engine)
