"""Memory pressure and the waiting-queue bound (engine/api/overload.py): when KV blocks run out
the scheduler preempts; beyond ``max_waiting_requests`` waiting, new requests are refused
at once with ``EngineOverloadedError`` (the server's 503 + Retry-After) instead of queueing
without bound. Accepted requests still finish exactly as without pressure."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.api.overload import num_waiting
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.engine.errors import EngineOverloadedError
from actorllm.testing.engine_harness import check_invariants, open_test_engine, scripted_model

pytestmark = pytest.mark.anyio


def expected(engine, prompt_ids: list[int], n: int) -> list[int]:
    model, ctx = scripted_model(engine), list(prompt_ids)
    for _ in range(n):
        ctx.append(model.script(ctx))
    return ctx[len(prompt_ids) :]


async def test_a_burst_beyond_the_bound_is_refused_with_a_retry_hint() -> None:
    async with open_test_engine(max_waiting_requests=4, step_delay_s=0.002) as engine:
        outcome: dict[int, object] = {}

        async def one(i: int) -> None:
            try:
                outs = [
                    o async for o in engine.generate(f"burst {i}", SamplingParams(max_tokens=4))
                ]
                outcome[i] = outs[-1]
            except EngineOverloadedError as exc:
                outcome[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(one, i)
        refused = [e for e in outcome.values() if isinstance(e, EngineOverloadedError)]
        served = [o for o in outcome.values() if not isinstance(o, EngineOverloadedError)]
        assert len(refused) + len(served) == 12
        assert len(served) >= 4 and refused  # at least the bound gets in; the burst does not
        assert all(o.finished for o in served)  # type: ignore[attr-defined]
        assert all(e.retry_after_s > 0 and "max_waiting_requests=4" in str(e) for e in refused)
        await check_invariants(engine)
        # The queue drained: new requests are accepted again.
        outs = [o async for o in engine.generate("after", SamplingParams(max_tokens=2))]
        assert outs[-1].finished


async def test_kv_pressure_preempts_then_refuses_new_requests() -> None:
    # 24 blocks of 8 tokens: three 64-token requests fill the cache, so running requests
    # are preempted while more keep arriving; beyond 3 waiting, arrivals are refused.
    async with open_test_engine(
        num_blocks=25,
        block_size=8,
        max_model_len=128,
        max_num_seqs=8,
        max_waiting_requests=3,
        step_delay_s=0.003,
    ) as engine:
        prompts = [[5 + i, 6, 7, 8] for i in range(16)]
        results: dict[int, object] = {}

        async def one(i: int) -> None:
            params = SamplingParams(max_tokens=56, ignore_eos=True)
            try:
                outs = [o async for o in engine.generate({"prompt_token_ids": prompts[i]}, params)]
                results[i] = outs[-1].outputs[0].token_ids
            except EngineOverloadedError as exc:
                results[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
                await anyio.sleep(0.01)  # a steady stream of arrivals
        stats = await engine.get_stats()
        await check_invariants(engine)
        refused = [i for i, r in results.items() if isinstance(r, EngineOverloadedError)]
        served = [i for i, r in results.items() if not isinstance(r, EngineOverloadedError)]
        assert stats.num_preemptions > 0 and refused and served
        for i in served:  # preempted and recomputed, still exactly the scripted tokens
            assert results[i] == expected(engine, prompts[i], 56)


class TwoSampleLedger:
    """Three open requests "a", "b", "c" of two samples each ("a-0", "a-1", ...)."""

    def __len__(self) -> int:
        return 3

    def entry_of_child(self, child_id: str) -> SimpleNamespace:
        return SimpleNamespace(request_id=child_id.split("-")[0])


def test_waiting_counts_requests_with_no_running_sample() -> None:
    ledger: Any = TwoSampleLedger()
    assert num_waiting(ledger, []) == 3
    assert num_waiting(ledger, ["a-0", "a-1", "b-1"]) == 1


def test_bad_bounds_are_refused_by_name() -> None:
    with pytest.raises(EngineConfigError, match="max_waiting_requests"):
        EngineConfig(max_waiting_requests=0)
    with pytest.raises(EngineConfigError, match="step_timeout_s"):
        EngineConfig(step_timeout_s=0)
    with pytest.raises(EngineConfigError, match="max_stream_backlog"):
        EngineConfig(max_stream_backlog=0)
