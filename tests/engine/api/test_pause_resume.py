"""``pause_generation`` / ``resume_generation`` / ``is_paused`` (vLLM's modes abort, wait,
keep) and ``wake_up(tags)`` on the whole engine: the scripted model for the semantics and
faults, a tiny real model for "keep resumes exactly where it stood" and waking by tags."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.engine.actors.messages import StepDone
from actorllm.testing import check_invariants, open_test_engine
from actorllm.testing.engine_harness import engine_context, inject_fault

pytestmark = pytest.mark.anyio

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


class Stream:
    """One request consumed in the background: its tokens so far, its finish reason."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.finish_reason: str | None = None
        self.done = anyio.Event()

    async def run(self, engine: AsyncEngine, prompt: Any, params: SamplingParams) -> None:
        async for out in engine.generate(prompt, params):
            self.tokens = list(out.outputs[0].token_ids)
            self.finish_reason = out.outputs[0].finish_reason
        self.done.set()


async def started(streams: list[Stream]) -> None:
    """Until every stream produced a token."""
    with anyio.fail_after(30):
        while not all(s.tokens for s in streams):
            await anyio.sleep(0.002)


async def test_abort_ends_in_flight_requests_and_new_ones_queue_until_resume() -> None:
    long = SamplingParams(max_tokens=400, ignore_eos=True)
    async with open_test_engine(step_delay_s=0.002) as engine:
        async with anyio.create_task_group() as tg:
            streams = [Stream() for _ in range(3)]
            for i, s in enumerate(streams):
                tg.start_soon(s.run, engine, f"in flight {i}", long)
            await started(streams)
            assert not await engine.is_paused()
            await engine.pause_generation(mode="abort")  # vLLM's default mode
            assert await engine.is_paused()
            # Their callers have their last output, finish_reason abort, when pause returns.
            assert [s.finish_reason for s in streams] == ["abort"] * 3
            assert all(s.done.is_set() for s in streams)
            late = Stream()
            tg.start_soon(late.run, engine, "arrives while paused", SamplingParams(max_tokens=5))
            await anyio.sleep(0.1)
            assert late.tokens == [] and not late.done.is_set()  # queued, not failed
            await engine.resume_generation()
            assert not await engine.is_paused()
            with anyio.fail_after(30):
                await late.done.wait()
            assert late.finish_reason == "length" and len(late.tokens) == 5
        await check_invariants(engine)


async def test_wait_lets_in_flight_requests_finish_first() -> None:
    params = SamplingParams(max_tokens=40, ignore_eos=True)
    async with open_test_engine(step_delay_s=0.002) as engine:
        async with anyio.create_task_group() as tg:
            streams = [Stream() for _ in range(2)]
            for i, s in enumerate(streams):
                tg.start_soon(s.run, engine, f"in flight {i}", params)
            await started(streams)
            await engine.pause_generation(mode="wait", clear_cache=True)
            assert [(s.finish_reason, len(s.tokens)) for s in streams] == [("length", 40)] * 2
            late = Stream()
            tg.start_soon(late.run, engine, "arrives while paused", SamplingParams(max_tokens=3))
            await anyio.sleep(0.05)
            assert late.tokens == []
            await engine.resume_generation()
            with anyio.fail_after(30):
                await late.done.wait()
            assert len(late.tokens) == 3
        await check_invariants(engine)


async def test_bad_mode_is_refused_and_resume_without_pause_is_harmless() -> None:
    async with open_test_engine() as engine:
        with pytest.raises(InvalidRequestError, match="Invalid pause mode: freeze") as err:
            await engine.pause_generation(mode="freeze")  # type: ignore[arg-type]
        assert err.value.param == "mode"
        await engine.resume_generation()
        assert not await engine.is_paused()
        with pytest.raises(InvalidRequestError, match="unknown wake_up tag") as err:
            await engine.wake_up(["gpu"])
        assert err.value.param == "tags"
        assert await engine.wake_up() is True  # awake already


async def test_a_scheduler_crash_while_paused_loses_nothing_and_keeps_the_pause() -> None:
    """The crash hits while ``pause(wait)`` waits for the running requests; the call still
    returns once the (restarted, still paused) scheduler is idle; after resume every request
    finishes with all its tokens."""
    params = SamplingParams(max_tokens=30, ignore_eos=True)
    async with open_test_engine(step_delay_s=0.002) as engine:
        async with anyio.create_task_group() as tg:
            streams = [Stream() for _ in range(3)]
            for i, s in enumerate(streams):
                tg.start_soon(s.run, engine, f"r{i}", params)
            await started(streams)
            # The first step result once paused: the running requests are in it.
            adm = engine_context(engine).admission
            inject_fault(
                engine, "scheduler", when=lambda m: isinstance(m, StepDone) and adm.pause.paused
            )
            with anyio.fail_after(30):
                await engine.pause_generation(mode="wait")
            assert await engine.is_paused()
            assert engine._actor_stat("restarts")["scheduler"] == 1
            late = Stream()
            tg.start_soon(late.run, engine, "late", SamplingParams(max_tokens=4))
            await anyio.sleep(0.05)
            assert not any(s.done.is_set() for s in streams)  # parked by the rebuild, not lost
            assert late.tokens == []
            await engine.resume_generation()
            with anyio.fail_after(30):
                for s in [*streams, late]:
                    await s.done.wait()
            assert [len(s.tokens) for s in streams] == [30] * 3 and len(late.tokens) == 4
            assert {s.finish_reason for s in streams} == {"length"}
        await check_invariants(engine)


async def test_sleep_modes_as_vllms_sleep_level_mode() -> None:
    """sleep(level, mode): abort ends the requests in flight, wait lets them finish, keep
    (our default) recomputes them after wake_up; a pause of the caller's own stays on."""
    params = SamplingParams(max_tokens=40, ignore_eos=True)
    async with open_test_engine(step_delay_s=0.002) as engine:
        for mode, reason in [("abort", "abort"), ("wait", "length"), ("keep", "length")]:
            async with anyio.create_task_group() as tg:
                stream = Stream()
                tg.start_soon(stream.run, engine, f"sleep {mode}", params)
                await started([stream])
                await engine.sleep(1, mode=mode)
                assert await engine.is_sleeping() and not await engine.is_paused()
                assert stream.done.is_set() == (mode != "keep")
                assert await engine.wake_up() is True
            assert stream.finish_reason == reason
            assert reason == "abort" or len(stream.tokens) == 40
        await engine.pause_generation(mode="keep")
        await engine.sleep(2, mode="abort")
        await engine.wake_up()
        assert await engine.is_paused()  # the caller's pause: lifted by resume only
        await engine.resume_generation()
        with pytest.raises(InvalidRequestError, match="Invalid pause mode"):
            await engine.sleep(1, mode="later")  # type: ignore[arg-type]
        await check_invariants(engine)


async def test_level_0_sleep_stops_scheduling_and_still_takes_requests() -> None:
    """vLLM 0.32's sleep(level=0): scheduling stops (mode as a pause's), requests are still
    accepted and queued; it ends with wake_up(["scheduling"]), any wake-up that leaves
    nothing asleep, or resume_generation."""
    params = SamplingParams(max_tokens=30, ignore_eos=True)
    async with open_test_engine(step_delay_s=0.002) as engine:
        running, late = Stream(), Stream()
        async with anyio.create_task_group() as tg:
            tg.start_soon(running.run, engine, "level 0", params)
            await started([running])
            await engine.sleep(0, mode="keep")
            assert await engine.is_sleeping() and await engine.is_paused()
            tg.start_soon(late.run, engine, "arrives asleep", params)
            await anyio.sleep(0.05)
            frozen = list(running.tokens)
            await anyio.sleep(0.05)
            assert running.tokens == frozen and late.tokens == []  # nothing scheduled
            assert await engine.wake_up(["scheduling"]) is True
        assert len(running.tokens) == len(late.tokens) == 30
        assert not await engine.is_sleeping() and not await engine.is_paused()

        for end in ("weights", None, "resume"):
            await engine.sleep(0, mode="abort")
            assert await engine.is_sleeping()
            if end == "resume":
                await engine.resume_generation()
            else:  # nothing else asleep: any wake-up ends it, as vLLM's
                assert await engine.wake_up(None if end is None else [end]) is True
            assert not await engine.is_sleeping()
        with pytest.raises(InvalidRequestError, match="sleep level must be 0, 1 or 2"):
            await engine.sleep(3)
        await check_invariants(engine)


# -- a tiny real model ---------------------------------------------------------------------


def real(model: str, **kw: Any) -> Any:
    return AsyncEngine.open(
        model, max_model_len=256, kv_cache_memory_bytes=4 * 2**20, dtype="float32", **kw
    )


PROMPTS = ["Freeze me here", "Another prompt, a bit longer than that", "Third"]


async def greedy(engine: AsyncEngine, prompts: list[str]) -> list[list[int]]:
    streams = [Stream() for _ in prompts]
    async with anyio.create_task_group() as tg:
        for p, s in zip(prompts, streams, strict=True):
            tg.start_soon(s.run, engine, p, GREEDY)
    return [s.tokens for s in streams]


async def test_keep_resumes_frozen_requests_exactly_and_wake_by_tags(tiny_model: str) -> None:
    async with real(tiny_model) as engine:
        reference = await greedy(engine, PROMPTS)

        # keep: frozen mid-way with their KV, resumed where they stood.
        streams = [Stream() for _ in PROMPTS]
        async with anyio.create_task_group() as tg:
            for p, s in zip(PROMPTS, streams, strict=True):
                tg.start_soon(s.run, engine, p, GREEDY)
            await started(streams)
            await engine.pause_generation(mode="keep", clear_cache=False)
            await anyio.sleep(0.02)  # the streams' tasks read what was delivered
            frozen = [list(s.tokens) for s in streams]
            await anyio.sleep(0.1)
            assert [s.tokens for s in streams] == frozen  # nothing scheduled
            assert not any(s.done.is_set() for s in streams)
            await engine.resume_generation()
        assert [s.tokens for s in streams] == reference

        # Sleep, then wake the weights only: generation waits for the KV cache.
        await engine.sleep(1)
        assert await engine.wake_up(["weights"]) is False
        assert await engine.is_sleeping()
        kv = await engine.collective_rpc(lambda w: bool(w.model_runner.kv_caches))
        assert kv == [False]  # the KV cache still sleeps; the weights are usable
        assert await engine.collective_rpc(lambda w: w.model_runner.model is not None) == [True]
        waiting = Stream()
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting.run, engine, PROMPTS[0], GREEDY)
            await anyio.sleep(0.1)
            assert waiting.tokens == []  # queued, not failed
            assert await engine.wake_up(["kv_cache"]) is True
        assert waiting.tokens == reference[0]
        assert not await engine.is_sleeping()

        # vLLM's release_kv_cache_memory: after a completed level-0 sleep, the KV cache
        # alone; kept requests are recomputed once it is back.
        with pytest.raises(InvalidRequestError, match="requires a completed pause first"):
            await engine.release_kv_cache_memory()
        streams = [Stream() for _ in PROMPTS]
        async with anyio.create_task_group() as tg:
            for p, s in zip(PROMPTS, streams, strict=True):
                tg.start_soon(s.run, engine, p, GREEDY)
            await started(streams)
            await engine.sleep(0, mode="keep")
            await engine.release_kv_cache_memory()
            kv = await engine.collective_rpc(lambda w: bool(w.model_runner.kv_caches))
            assert kv == [False]
            assert await engine.collective_rpc(lambda w: w.model_runner.model is not None) == [True]
            with pytest.raises(InvalidRequestError, match="memory to be resident"):
                await engine.release_kv_cache_memory()
            assert await engine.is_sleeping()
            late = Stream()
            tg.start_soon(late.run, engine, PROMPTS[1], GREEDY)
            await anyio.sleep(0.05)
            assert late.tokens == []  # queued, not failed
            assert await engine.wake_up(["kv_cache"]) is True
        assert [s.tokens for s in streams] == reference and late.tokens == reference[1]
        assert not await engine.is_sleeping() and not await engine.is_paused()

        # Level 2 (weights dropped): the KV cache first, then the weights.
        await engine.sleep(2)
        assert await engine.collective_rpc(lambda w: w.model_runner.model is None) == [True]
        assert await engine.wake_up(["kv_cache"]) is False
        assert await engine.wake_up(["weights"]) is True
        assert await greedy(engine, PROMPTS) == reference
        await check_invariants(engine)
