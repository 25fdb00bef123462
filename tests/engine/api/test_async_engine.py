"""The actor engine end to end on the ScriptedModel (no weights), on trio and asyncio."""

import time

import anyio
import pytest

from actorllm.core.errors import InvalidRequestError, RequestTooLongError
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine import EngineStats
from actorllm.testing.engine_harness import (
    check_invariants,
    engine_context,
    open_test_engine,
    scripted_model,
)

pytestmark = pytest.mark.anyio


async def collect(agen):
    return [out async for out in agen]


async def test_generate_streams_cumulative_outputs_to_the_end():
    async with open_test_engine() as engine:
        outs = await collect(engine.generate("Hello world", SamplingParams(max_tokens=6)))
        assert len(outs) == 6
        assert [len(o.outputs[0].token_ids) for o in outs] == [1, 2, 3, 4, 5, 6]
        final = outs[-1]
        assert final.finished and final.outputs[0].finish_reason == "length"
        assert final.prompt == "Hello world"
        # The scripted model's tokens are a pure function of the context.
        model = scripted_model(engine)
        context = list(final.prompt_token_ids)
        for token in final.outputs[0].token_ids:
            assert token == model.script(context)
            context.append(token)
        assert final.outputs[0].text == engine.tokenizer.decode(final.outputs[0].token_ids)
        await check_invariants(engine)


async def test_delta_outputs_add_up_to_the_final_text():
    async with open_test_engine() as engine:
        params = SamplingParams(max_tokens=10, output_kind=RequestOutputKind.DELTA)
        deltas = await collect(engine.generate("Once upon a time", params))
        cumulative = await collect(
            engine.generate("Once upon a time", SamplingParams(max_tokens=10))
        )
        assert "".join(d.outputs[0].text for d in deltas) == cumulative[-1].outputs[0].text
        assert [t for d in deltas for t in d.outputs[0].token_ids] == cumulative[-1].outputs[
            0
        ].token_ids


async def test_n_greater_than_one_reports_every_sample():
    async with open_test_engine() as engine:
        params = SamplingParams(n=3, max_tokens=4, output_kind=RequestOutputKind.FINAL_ONLY)
        (final,) = await collect(engine.generate("abc", params, request_id="multi"))
        assert final.request_id == "multi" and final.finished
        assert [c.index for c in final.outputs] == [0, 1, 2]
        assert all(len(c.token_ids) == 4 for c in final.outputs)
        await check_invariants(engine)


async def test_stop_strings_end_the_request_and_free_its_blocks():
    async with open_test_engine() as engine:
        free = (await collect(engine.generate("stop test", SamplingParams(max_tokens=12))))[-1]
        text = free.outputs[0].text
        stop = text[len(text) // 2 : len(text) // 2 + 2]
        assert stop.strip(), "pick a non-blank stop string"
        outs = await collect(
            engine.generate("stop test", SamplingParams(max_tokens=12, stop=[stop]))
        )
        final = outs[-1].outputs[0]
        assert final.finish_reason == "stop" and final.stop_reason == stop
        assert final.text == text[: text.index(stop)]
        await check_invariants(engine)


async def test_stop_token_ids_and_min_tokens():
    async with open_test_engine() as engine:
        free = (await collect(engine.generate("tokens", SamplingParams(max_tokens=8))))[-1]
        third = free.outputs[0].token_ids[2]
        stopped = (
            await collect(
                engine.generate("tokens", SamplingParams(max_tokens=8, stop_token_ids=[third]))
            )
        )[-1]
        assert stopped.outputs[0].token_ids == free.outputs[0].token_ids[:3]
        assert stopped.outputs[0].stop_reason == third


async def test_abort_ends_the_stream_and_frees_blocks():
    async with open_test_engine(step_delay_s=0.01) as engine:
        seen = []

        async def consume():
            async for out in engine.generate(
                "long one", SamplingParams(max_tokens=500), request_id="victim"
            ):
                seen.append(out)

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            while len(seen) < 3:
                await anyio.sleep(0.005)
            await engine.abort("victim")
        assert seen[-1].finished and seen[-1].outputs[0].finish_reason == "abort"
        stats = await engine.get_stats()
        assert stats.num_running_reqs == 0 and stats.kv_cache_usage == 0.0
        await check_invariants(engine)


async def test_cancelling_the_caller_aborts_the_request():
    async with open_test_engine(step_delay_s=0.01) as engine:
        got = 0
        with anyio.move_on_after(0.2):
            async for _ in engine.generate("cancel me", SamplingParams(max_tokens=1000)):
                got += 1
        assert 0 < got < 1000
        await check_invariants(engine)
        assert not engine_context(engine).ledger


async def test_priority_policy_serves_urgent_requests_first():
    async with open_test_engine(
        step_delay_s=0.005, max_num_seqs=1, scheduling_policy="priority"
    ) as engine:
        order: list[str] = []

        async def run(name: str, prio: int) -> None:
            async for out in engine.generate(
                name, SamplingParams(max_tokens=3), request_id=name, priority=prio
            ):
                if out.finished:
                    order.append(name)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "first", 5)
            await anyio.sleep(0.02)  # "first" is running; the others queue behind it
            tg.start_soon(run, "low", 9)
            tg.start_soon(run, "high", 0)
        assert order.index("high") < order.index("low")


async def test_fcfs_serves_an_earlier_arrival_time_first_and_measures_from_it():
    async with open_test_engine(step_delay_s=0.005, max_num_seqs=1) as engine:
        order: list[str] = []
        finals = {}

        async def run(name: str, arrival_time: float | None) -> None:
            params = SamplingParams(max_tokens=30 if name == "first" else 3, ignore_eos=True)
            async for out in engine.generate(
                name, params, request_id=name, arrival_time=arrival_time
            ):
                if out.finished:
                    order.append(name)
                    finals[name] = out

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "first", None)
            await anyio.sleep(0.02)  # "first" holds the only seat; the others queue
            tg.start_soon(run, "b", None)
            await anyio.sleep(0.001)
            tg.start_soon(run, "a", time.time() - 10.0)  # added last, arrived earliest
        assert order == ["first", "a", "b"]
        # The metrics start at the given time, moved onto the engine's monotonic clock.
        metrics = finals["a"].metrics
        assert metrics is not None and metrics.first_scheduled_time is not None
        assert abs(metrics.arrival_time - (time.monotonic() - 10.0)) < 5.0
        assert metrics.first_scheduled_time - metrics.arrival_time >= 10.0
        requests = (await engine.get_stats()).requests
        assert requests is not None
        assert requests.histograms["request_queue_time_seconds"].sum >= 10.0


async def test_priority_without_the_priority_policy_is_refused():
    async with open_test_engine() as engine:
        with pytest.raises(InvalidRequestError) as info:
            await collect(engine.generate("x", SamplingParams(max_tokens=2), priority=1))
        assert info.value.param == "priority"
        with pytest.raises(InvalidRequestError) as info:
            await collect(engine.chat([{"role": "user", "content": "x"}], priority=-1))
        assert info.value.param == "priority"
        with pytest.raises(InvalidRequestError) as info:
            await collect(engine.generate("x", arrival_time=float("nan")))
        assert info.value.param == "arrival_time"
        assert not engine_context(engine).ledger
        await check_invariants(engine)


async def test_repeated_prompts_hit_the_prefix_cache():
    async with open_test_engine(block_size=4, max_model_len=512) as engine:
        prompt = {"prompt_token_ids": list(range(10, 42))}
        await collect(engine.generate(prompt, SamplingParams(max_tokens=2)))
        before = await engine.get_stats()
        final = (await collect(engine.generate(prompt, SamplingParams(max_tokens=2))))[-1]
        after = await engine.get_stats()
        assert after.prefix_cache_hits - before.prefix_cache_hits >= 28
        assert final.num_cached_tokens >= 28
        assert await engine.reset_prefix_cache()


async def test_sleep_makes_requests_wait_and_wake_up_resumes_them():
    async with open_test_engine(step_delay_s=0.002) as engine:
        await engine.sleep(1)
        assert await engine.is_sleeping()
        done = anyio.Event()
        result = []

        async def run() -> None:
            result.extend(await collect(engine.generate("sleepy", SamplingParams(max_tokens=4))))
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await anyio.sleep(0.1)
            assert not done.is_set()  # waits while asleep
            await engine.wake_up()
        assert not await engine.is_sleeping()
        assert result[-1].finished and len(result[-1].outputs[0].token_ids) == 4
        await check_invariants(engine)


async def test_sleep_with_requests_running_recomputes_them_after_wake_up():
    async with open_test_engine(step_delay_s=0.005) as engine:
        reference = (await collect(engine.generate("keep going", SamplingParams(max_tokens=30))))[
            -1
        ]
        outs = []

        async def run() -> None:
            outs.extend(await collect(engine.generate("keep going", SamplingParams(max_tokens=30))))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            while len(outs) < 5:
                await anyio.sleep(0.002)
            await engine.sleep(2)
            await anyio.sleep(0.05)
            await engine.wake_up()
        assert outs[-1].outputs[0].token_ids == reference.outputs[0].token_ids


async def test_invalid_requests_fail_with_typed_errors_before_any_output():
    async with open_test_engine(max_model_len=64) as engine:
        with pytest.raises(RequestTooLongError):
            await collect(engine.generate({"prompt_token_ids": [5] * 64}))
        with pytest.raises(InvalidRequestError):
            await collect(engine.generate({"prompt_token_ids": [5, 10**6]}))
        with pytest.raises(InvalidRequestError) as info:
            await collect(engine.generate("x", SamplingParams(logit_bias={10**6: 1.0})))
        assert info.value.param == "logit_bias"
        await check_invariants(engine)


async def test_duplicate_request_ids_are_refused():
    async with open_test_engine(step_delay_s=0.01) as engine:
        agen = engine.generate("a", SamplingParams(max_tokens=50), request_id="same")
        first = await agen.__anext__()
        assert first.request_id == "same"
        with pytest.raises(InvalidRequestError):
            await collect(engine.generate("b", request_id="same"))
        await agen.aclose()


async def test_kv_connector_toggle_without_a_connector_is_an_error():
    async with open_test_engine() as engine:
        assert not await engine.is_kv_connector_enabled()
        with pytest.raises(InvalidRequestError):
            await engine.set_kv_connector_enabled(True)


async def test_the_loop_answers_during_a_long_model_step():
    async with open_test_engine(step_delay_s=1.0) as engine, anyio.create_task_group() as tg:

        async def run() -> None:
            await collect(engine.generate("slow", SamplingParams(max_tokens=2)))

        tg.start_soon(run)
        while not engine_context(engine).admission.inflight:
            await anyio.sleep(0.001)
        t0 = time.perf_counter()
        stats = await engine.get_stats()  # router -> scheduler -> back, mid-step
        elapsed = time.perf_counter() - t0
        assert isinstance(stats, EngineStats)
        assert elapsed < 0.25, f"the event loop was blocked for {elapsed:.3f}s"


async def test_closing_with_a_step_in_flight_drops_its_result_quietly(
    caplog: pytest.LogCaptureFixture,
):
    """The worker finishes a step after the engine stopped: its result has nowhere to go
    and is dropped without an error."""
    async with open_test_engine(step_delay_s=0.2) as engine:
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect, engine.generate("late", SamplingParams(max_tokens=50)))
            while not engine_context(engine).admission.inflight:
                await anyio.sleep(0.001)
            tg.cancel_scope.cancel()
        worker = engine._thread
    await anyio.sleep(0.4)  # the step finishes and posts back to a stopped executor
    assert worker.statistics().jobs_done >= 1
    assert "callback posted to the event loop failed" not in caplog.text


async def test_async_scheduling_gives_the_same_tokens():
    prompts = [f"prompt {i} " * (i + 1) for i in range(6)]

    async def run(**kw):
        async with open_test_engine(**kw) as engine:
            results = {}

            async def one(i):
                results[i] = (
                    await collect(engine.generate(prompts[i], SamplingParams(max_tokens=9)))
                )[-1]

            async with anyio.create_task_group() as tg:
                for i in range(len(prompts)):
                    tg.start_soon(one, i)
            await check_invariants(engine)
            return {i: r.outputs[0].token_ids for i, r in results.items()}

    assert await run(async_scheduling=True) == await run(async_scheduling=False)


async def test_statistics_report_each_actors_own_state():
    engine_cm = open_test_engine(step_delay_s=0.05, async_scheduling=True)
    async with engine_cm as engine, anyio.create_task_group() as tg:
        tg.start_soon(collect, engine.generate("stats", SamplingParams(max_tokens=4)))
        while not engine_context(engine).admission.inflight:
            await anyio.sleep(0.001)
        stats = engine.statistics()
        sched = stats.actors["scheduler"].report
        assert sched.admission.inflight_steps >= 1
        assert sched.admission.max_inflight_steps == 2
        assert sched.admission.on_probation == [] and sched.sleep_waiters == 0
        assert stats.actors["output_processor"].report.num_unfinished == 1
        assert stats.actors["executor"].report is not None
        assert stats.ledger.open_requests == 1 and stats.worker_thread.alive


async def test_request_statistics_are_recorded_by_the_engine():
    async with open_test_engine() as engine:
        params = SamplingParams(n=2, max_tokens=4, output_kind=RequestOutputKind.FINAL_ONLY)
        (final,) = await collect(engine.generate("Hello world", params))
        requests = (await engine.get_stats()).requests
        assert requests is not None
        assert requests.request_success == {"length": 1}
        assert requests.generation_tokens == 8
        assert requests.prompt_tokens == len(final.prompt_token_ids)
        h = requests.histograms
        assert h["request_params_n"].sum == 2 and h["request_max_num_generation_tokens"].sum == 4
        for name in ("request_queue_time_seconds", "request_prefill_time_seconds"):
            assert h[name].count == 1, name
        assert final.metrics is not None and final.metrics.first_scheduled_time is not None
