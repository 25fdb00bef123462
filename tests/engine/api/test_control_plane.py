"""The engine's control plane for users' code: ``collective_rpc`` (run a worker method
between steps, e.g. an RLHF weight update) and the torch profiler."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest
from safetensors.torch import load_file

from actorllm.core.errors import InvalidRequestError
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.testing import check_invariants, open_test_engine
from actorllm.worker.profiler import ProfilerError
from actorllm.worker.worker import Worker

pytestmark = pytest.mark.anyio

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


async def tokens(engine: AsyncEngine, prompt: str, params: SamplingParams = GREEDY) -> list[int]:
    last = None
    async for out in engine.generate(prompt, params):
        last = out
    assert last is not None
    return last.outputs[0].token_ids


# -- collective_rpc on the scripted model ------------------------------------------------


async def test_collective_rpc_by_name_and_by_callable():
    async with open_test_engine() as engine:
        stats = await engine.collective_rpc("statistics")
        assert len(stats) == 1 and stats[0].rank == 0
        assert await engine.collective_rpc("get_model") == [None]  # no weights
        seen = await engine.collective_rpc(
            lambda worker, x, y=0: (type(worker), x + y), args=(2,), kwargs={"y": 3}
        )
        assert seen == [(Worker, 5)]


async def test_collective_rpc_runs_between_steps_while_requests_stream():
    async with open_test_engine(step_delay_s=0.002) as engine:
        results: list[list[int]] = []

        async def one(i: int) -> None:
            results.append(await tokens(engine, f"r{i}", SamplingParams(max_tokens=20)))

        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(one, i)
            for _ in range(5):
                # The worker has no step pending while the method runs.
                assert await engine.collective_rpc(lambda w: w.pipeline.pending) == [0]
        assert all(len(r) == 20 for r in results)
        await check_invariants(engine)


async def test_an_exception_in_the_method_reaches_the_caller_and_crashes_nothing():
    async with open_test_engine() as engine:

        def boom(worker: Worker) -> None:
            raise KeyError("from the worker")

        with pytest.raises(KeyError, match="from the worker"):
            await engine.collective_rpc(boom)
        with pytest.raises(InvalidRequestError, match="no method 'nope'"):
            await engine.collective_rpc("nope")
        with pytest.raises(InvalidRequestError):
            await engine.collective_rpc("_private")
        assert len(await tokens(engine, "still fine")) == 8
        assert set(engine._actor_stat("restarts").values()) == {0}


async def test_a_timeout_raises_and_leaves_the_engine_healthy():
    async with open_test_engine() as engine:
        with pytest.raises(TimeoutError):
            await engine.collective_rpc(lambda w: time.sleep(0.5), timeout=0.05)
        # The method finishes on the worker thread; then steps run again.
        assert len(await tokens(engine, "after the timeout")) == 8
        assert set(engine._actor_stat("restarts").values()) == {0}
        await check_invariants(engine)


# -- a tiny real model: weights updated in place -------------------------------------------


def real(model: str, **kw):
    return AsyncEngine.open(model, max_model_len=256, kv_cache_memory_bytes=4 * 2**20, **kw)


async def test_load_weights_changes_greedy_outputs_to_the_new_weights(tiny_model, other_model):
    prompt = "Weights in place"
    async with real(other_model) as eng:
        expected = await tokens(eng, prompt)
    weights = load_file(str(Path(other_model) / "model.safetensors"))
    async with real(tiny_model) as eng:
        before = await tokens(eng, prompt)
        assert before != expected
        written = await eng.collective_rpc("load_weights", args=(weights,))
        assert "model.embed_tokens.weight" in written[0]
        assert await eng.reset_prefix_cache()  # cached KV was computed with the old weights
        assert await tokens(eng, prompt) == expected
        # As an iterable of (name, tensor), the way RLHF trainers stream them.
        old = load_file(str(Path(tiny_model) / "model.safetensors"))
        await eng.collective_rpc("load_weights", args=(iter(old.items()),))
        assert await eng.reset_prefix_cache()
        assert await tokens(eng, prompt) == before
        bad = {"nope.weight": weights["lm_head.weight"]}
        with pytest.raises(Exception, match="no such parameter"):
            await eng.collective_rpc("load_weights", args=(bad,))
        await check_invariants(eng)


# -- the profiler --------------------------------------------------------------------------


async def test_profile_trace_names_the_models_ops(tiny_model, tmp_path):
    async with real(tiny_model, profiler_dir=str(tmp_path)) as eng:
        with pytest.raises(ProfilerError, match="start_profile"):
            await eng.stop_profile()  # not started: a clear error, not a crash
        await eng.start_profile()
        with pytest.raises(ProfilerError, match="already running"):
            await eng.start_profile()
        await tokens(eng, "Profile me")
        await eng.stop_profile()
        assert set(eng._actor_stat("restarts").values()) == {0}
    traces = list(tmp_path.glob("*.trace.json"))
    assert len(traces) == 1
    events = json.loads(traces[0].read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    # (the CPU linears run on oneDNN-prepacked weights where the host has oneDNN, on the
    # AMX kernel for decode rows on an AMX host)
    assert {
        "aten::mm",
        "aten::linear",
        "aten::addmm",
        "mkldnn::_linear_pointwise",
        "actorllm::amx_linear",
        "actorllm::bf16_dot_linear",
    } & names


async def test_profiling_without_a_directory_is_a_clear_error():
    async with open_test_engine() as engine:
        with pytest.raises(ProfilerError, match="profiler_dir"):
            await engine.start_profile()
