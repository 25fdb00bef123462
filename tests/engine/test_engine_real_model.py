"""The actor engine end to end on a tiny real Llama (random weights, float32, CPU), on trio
and asyncio: the model runner, the sampler and the KV cache under real scheduling."""

import anyio
import pytest

from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.testing.engine_harness import check_invariants

pytestmark = pytest.mark.anyio

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


def engine(tiny_model: str, **kw):
    kw.setdefault("max_model_len", 512)
    kw.setdefault("kv_cache_memory_bytes", 8 * 2**20)
    return AsyncEngine.open(tiny_model, **kw)


async def final(agen):
    last = None
    async for out in agen:
        last = out
    return last


async def test_streaming_and_greedy_determinism(tiny_model):
    async with engine(tiny_model) as eng:
        params = GREEDY.clone(output_kind=RequestOutputKind.DELTA)
        deltas = [o async for o in eng.generate("The quick brown fox", params)]
        assert len(deltas) == 12 and deltas[-1].finished
        whole = await final(eng.generate("The quick brown fox", GREEDY))
        assert [t for d in deltas for t in d.outputs[0].token_ids] == whole.outputs[0].token_ids
        assert "".join(d.outputs[0].text for d in deltas) == whole.outputs[0].text
        await check_invariants(eng)


async def test_n_samples_with_seeds_are_distinct_and_reproducible(tiny_model):
    async with engine(tiny_model) as eng:
        params = SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=8)
        a = await final(eng.generate("Sample me", params))
        b = await final(eng.generate("Sample me", params))
        assert [c.token_ids for c in a.outputs] == [c.token_ids for c in b.outputs]
        assert len({tuple(c.token_ids) for c in a.outputs}) > 1
        await check_invariants(eng)


async def test_stop_strings_truncate_exactly(tiny_model):
    async with engine(tiny_model) as eng:
        free = (await final(eng.generate("Stop here", GREEDY.clone(max_tokens=20)))).outputs[0]
        stop = next(
            free.text[i : i + 2]
            for i in range(3, len(free.text) - 2)
            if free.text[i : i + 2].strip()
        )
        cut = (
            await final(eng.generate("Stop here", GREEDY.clone(max_tokens=20, stop=[stop])))
        ).outputs[0]
        assert cut.finish_reason == "stop" and cut.stop_reason == stop
        assert cut.text == free.text[: free.text.index(stop)]
        await check_invariants(eng)


async def test_abort_frees_the_blocks(tiny_model):
    async with engine(tiny_model) as eng:
        seen = []

        async def consume():
            async for out in eng.generate(
                "Abort me", SamplingParams(max_tokens=400), request_id="x"
            ):
                seen.append(out)

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            while len(seen) < 2:
                await anyio.sleep(0.005)
            await eng.abort("x")
        assert seen[-1].outputs[0].finish_reason == "abort"
        assert (await eng.get_stats()).kv_cache_usage == 0.0
        await check_invariants(eng)


async def test_priority_orders_the_queue(tiny_model):
    async with engine(tiny_model, max_num_seqs=1, scheduling_policy="priority") as eng:
        order: list[str] = []

        async def run(name: str, prio: int, tokens: int = 6) -> None:
            params = GREEDY.clone(max_tokens=tokens, ignore_eos=True)
            await final(eng.generate(name, params, request_id=name, priority=prio))
            order.append(name)

        async with anyio.create_task_group() as tg:
            # Long enough that both others are queued before it ends (6 tokens could end
            # within a loaded box's 10 ms sleep, and "low" then ran first).
            tg.start_soon(run, "running", 5, 200)
            while (await eng.get_stats()).num_running_reqs == 0:
                await anyio.sleep(0.001)
            tg.start_soon(run, "low", 9)
            while (await eng.get_stats()).num_waiting_reqs == 0:
                await anyio.sleep(0.001)
            tg.start_soon(run, "high", 0)
        assert order.index("high") < order.index("low")  # (high may preempt "running")


async def test_repeated_prompts_hit_the_prefix_cache_with_identical_outputs(tiny_model):
    async with engine(tiny_model, block_size=8) as eng:
        prompt = "A long shared system prompt that spans several blocks of the cache. " * 2
        first = await final(eng.generate(prompt, GREEDY))
        second = await final(eng.generate(prompt, GREEDY))
        stats = await eng.get_stats()
        assert second.num_cached_tokens >= 8 and stats.prefix_cache_hits >= second.num_cached_tokens
        assert second.outputs[0].token_ids == first.outputs[0].token_ids


async def test_sleep_and_wake_up_keep_the_model_working(tiny_model):
    async with engine(tiny_model) as eng:
        before = await final(eng.generate("Sleep test", GREEDY))
        for level in (1, 2):
            await eng.sleep(level)
            assert await eng.is_sleeping()
            await eng.wake_up()
            after = await final(eng.generate("Sleep test", GREEDY))
            assert after.outputs[0].token_ids == before.outputs[0].token_ids
        await check_invariants(eng)


async def test_kv_connector_toggle_changes_hit_statistics(tiny_model, tmp_path):
    # A pool of 24 blocks of 8 tokens: a few prompts evict each other's cached blocks, and
    # only the offload tier can bring them back.
    async with engine(
        tiny_model,
        block_size=8,
        num_gpu_blocks_override=24,
        max_model_len=128,
        kv_connector="offload",
        kv_offload_disk_dir=str(tmp_path),
    ) as eng:
        assert await eng.is_kv_connector_enabled()
        prompts = [
            f"Prompt number {i} talks about a topic at some length, twice over. " * 2
            for i in range(8)
        ]

        async def sweep() -> list[list[int]]:
            return [
                (await final(eng.generate(p, GREEDY.clone(max_tokens=4)))).outputs[0].token_ids
                for p in prompts
            ]

        reference = await sweep()
        hits0 = (await eng.get_stats()).connector_hits
        assert await sweep() == reference  # loaded KV gives the same tokens
        hits1 = (await eng.get_stats()).connector_hits
        assert hits1 > hits0
        await eng.set_kv_connector_enabled(False)
        assert not await eng.is_kv_connector_enabled()
        assert await sweep() == reference
        assert (await eng.get_stats()).connector_hits == hits1  # off: no lookups at all
        await check_invariants(eng)


async def test_async_scheduling_gives_identical_tokens(tiny_model):
    prompts = [f"Async prompt {i} " * (1 + i) for i in range(6)]
    results = {}
    for async_scheduling in (False, True):
        async with engine(tiny_model, async_scheduling=async_scheduling) as eng:
            outs = {}

            async def one(i: int, eng=eng, outs=outs) -> None:
                outs[i] = (
                    (await final(eng.generate(prompts[i], GREEDY.clone(max_tokens=16))))
                    .outputs[0]
                    .token_ids
                )

            async with anyio.create_task_group() as tg:
                for i in range(len(prompts)):
                    tg.start_soon(one, i)
            results[async_scheduling] = outs
            await check_invariants(eng)
    assert results[True] == results[False]


async def test_closing_frees_the_kv_cache_and_weights_without_a_gc_run(tiny_model):
    """The closed engine's objects form reference cycles: before the runner released its
    memory at close, the whole KV cache stayed allocated until the host's next full GC."""
    import gc
    import weakref

    gc.disable()  # only reference counting may free them here
    try:
        async with engine(tiny_model) as eng:
            await final(eng.generate("hello", GREEDY))
            runner = eng._parts.replicas[0].worker.model_runner
            cache = weakref.ref(runner.kv_caches[0][0])
            weight = weakref.ref(next(runner.model.parameters()))
            del runner
        assert cache() is None and weight() is None
    finally:
        gc.enable()
