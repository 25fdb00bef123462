"""``AsyncLLMEngine`` (vLLM's ``AsyncLLM``): the common vLLM asyncio script, renamed."""

import asyncio
import time

import pytest

from actorllm import (
    AsyncEngineArgs,
    AsyncLLMEngine,
    RequestOutputKind,
    SamplingParams,
    TextPrompt,
    TokensPrompt,
)
from actorllm.core.errors import InvalidRequestError
from actorllm.core.pooling_params import PoolingParams
from actorllm.engine.errors import EngineDeadError, RequestFailedError
from actorllm.v1.engine.async_llm import AsyncLLM

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
def engine(tiny_model):
    args = AsyncEngineArgs(
        model=tiny_model,
        max_model_len=256,
        kv_cache_memory_bytes=8 * 2**20,
        disable_log_stats=True,
        enable_log_requests=True,
    )
    eng = AsyncLLMEngine.from_engine_args(args)
    yield eng
    eng.shutdown()
    assert not eng.is_running


async def collect(engine, prompt, params, request_id):
    return [out async for out in engine.generate(prompt, params, request_id=request_id)]


def wait_closed(engine, request_id: str) -> None:
    """Until the engine let go of the request (its abort is asynchronous)."""
    deadline = time.monotonic() + 10
    while any(e.request_id.split("#")[0] == request_id for e in engine.engine._ctx.ledger):
        assert time.monotonic() < deadline, f"{request_id} still open"
        time.sleep(0.01)


def test_the_vllm_script_with_two_concurrent_requests(engine):
    async def main():
        delta = GREEDY.clone(output_kind=RequestOutputKind.DELTA)
        final = GREEDY.clone(output_kind=RequestOutputKind.FINAL_ONLY)
        return await asyncio.gather(
            collect(engine, "Hello there", delta, "d"),
            collect(engine, TextPrompt(prompt="Hello there"), final, "f"),
            collect(engine, TokensPrompt(prompt_token_ids=[5, 6, 7]), GREEDY, "c"),
        )

    deltas, finals, cumulative = asyncio.run(main())
    assert len(finals) == 1 and finals[0].finished
    assert deltas[-1].finished and len(deltas) > 1
    text = finals[0].outputs[0].text
    assert "".join(o.outputs[0].text for o in deltas) == text
    assert [t for o in deltas for t in o.outputs[0].token_ids] == finals[0].outputs[0].token_ids
    assert len(cumulative[-1].outputs[0].token_ids) == 12  # CUMULATIVE: the whole answer
    assert cumulative[-1].prompt_token_ids == [5, 6, 7]
    assert engine.get_num_unfinished_requests() == 0


def test_abort_mid_stream_frees_the_request(engine):
    long = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)

    async def main():
        outs = []
        async for out in engine.generate("Once upon a time", long, "ab"):
            outs.append(out)
            if len(outs) == 1:
                await engine.abort("ab")
        return outs

    outs = asyncio.run(main())
    assert outs[-1].finished and outs[-1].outputs[0].finish_reason == "abort"
    assert len(outs[-1].outputs[0].token_ids) < 200
    wait_closed(engine, "ab")
    outs = asyncio.run(collect(engine, "again", GREEDY, "ab"))  # the id is free again
    assert outs[-1].finished


def test_leaving_the_stream_early_aborts_the_request(engine):
    long = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)

    async def main():
        stream = engine.generate("Once upon a time", long, "early")
        async for _ in stream:
            break
        await stream.aclose()

    asyncio.run(main())
    wait_closed(engine, "early")
    assert engine.get_num_unfinished_requests() == 0

    async def cancelled():
        task = asyncio.create_task(collect(engine, "Once upon a time", long, "cx"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    wait_closed(engine, "cx")


def test_unsupported_arguments_are_refused_by_name(engine):
    async def lora():
        async for _ in engine.generate("hi", GREEDY, "x", lora_request=object()):
            pass

    with pytest.raises(InvalidRequestError, match="lora_request must be a LoRARequest"):
        asyncio.run(lora())

    async def no_adapter() -> int:  # lora_request=None is no adapter, as in vLLM
        outs = [o async for o in engine.generate("hi", GREEDY, "nolora", lora_request=None)]
        return len(outs)

    assert asyncio.run(no_adapter()) >= 1

    async def encode() -> None:  # a generative model does not pool: a 400 naming it
        async for _ in engine.encode("hi", PoolingParams(), "enc"):
            pass

    with pytest.raises(InvalidRequestError) as info:
        asyncio.run(encode())
    assert info.value.param == "model"
    with pytest.raises(NotImplementedError, match="stat_loggers"):
        AsyncLLMEngine.from_engine_args(AsyncEngineArgs(), stat_loggers=[object()])


def test_model_and_health(engine):
    assert AsyncLLM is AsyncLLMEngine
    assert engine.is_running and not engine.errored
    asyncio.run(engine.check_health())
    assert engine.get_tokenizer().encode("hello") == engine.engine.tokenizer.encode("hello")
    assert engine.model_config.max_model_len == 256
    assert asyncio.run(engine.get_model_config()).max_model_len == 256
    assert asyncio.run(engine.get_supported_tasks()) == ("generate",)


def test_a_misspelt_generate_keyword_is_a_type_error(engine):
    # vLLM's generate names its keywords: a typo must not pass as an option left at None.
    with pytest.raises(TypeError, match="lora_requst"):
        engine.generate("hi", GREEDY, "typo", lora_requst=None)

    async def session() -> None:
        async for _ in engine.generate("hi", GREEDY, "sess", session_id="s1"):
            pass

    with pytest.raises(NotImplementedError, match="session_id"):
        asyncio.run(session())


def test_reasoning_ended_is_taken(engine):
    # vLLM's keyword (where structured outputs start) reaches the engine, not a refusal.
    async def ended() -> int:
        n = 0
        async for out in engine.generate("hi", GREEDY, "ended", reasoning_ended=True):
            n = len(out.outputs[0].token_ids)
        return n

    assert asyncio.run(ended()) > 0


def test_a_shut_down_engine_is_stopped_and_unhealthy(tiny_model):
    # vLLM: after shutdown errored/is_stopped are True, check_health and generate raise
    # EngineDeadError (a health probe must not report a stopped engine healthy).
    eng = AsyncLLMEngine.from_engine_args(
        AsyncEngineArgs(model=tiny_model, max_model_len=64, kv_cache_memory_bytes=2**20)
    )
    eng.shutdown()
    assert eng.errored and eng.is_stopped and not eng.is_running
    with pytest.raises(EngineDeadError):
        asyncio.run(eng.check_health())
    with pytest.raises(EngineDeadError):
        asyncio.run(collect(eng, "hi", GREEDY, "late"))


def test_vllms_exceptions_module_names_the_engines_errors():
    """``from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError``,
    renamed, catches what this engine raises: a stopped engine, a failed request."""
    from actorllm.v1.engine.exceptions import EngineDeadError as Dead
    from actorllm.v1.engine.exceptions import EngineGenerateError

    assert Dead is EngineDeadError and EngineGenerateError is RequestFailedError


def test_vllm_control_plane_keywords(engine):
    # vLLM's pause_generation still takes the deprecated wait_for_inflight_requests
    # (True: mode="wait"), and start_profile a profile_prefix (refused by name here).
    async def main() -> None:
        with pytest.warns(DeprecationWarning, match="mode='wait'"):
            await engine.pause_generation(wait_for_inflight_requests=True)
        assert await engine.is_paused()
        await engine.resume_generation()
        await engine.pause_generation(wait_for_inflight_requests=False)
        await engine.resume_generation()
        with pytest.raises(NotImplementedError, match="profile_prefix"):
            await engine.start_profile(profile_prefix="run1")

    asyncio.run(main())


def test_vllm_methods_without_a_feature_here_are_built_or_refused_by_name(engine):
    # vLLM's AsyncLLM has these; a bare AttributeError would read like a bug of ours.
    assert engine.should_keep_api_server_alive is False
    for name in ("checkpoint_prepare", "get_status", "start_draft_weight_update"):
        with pytest.raises(NotImplementedError, match=name):
            asyncio.run(getattr(engine, name)())
    # no multimodal caches here: their resets have nothing to clear
    assert asyncio.run(engine.reset_mm_cache()) is None
    assert asyncio.run(engine.reset_encoder_cache()) is None

    async def drain() -> None:
        stream = engine.generate("hi", GREEDY, "drain")
        first = await anext(stream)
        if not first.finished:
            with pytest.raises(TimeoutError):
                await engine.wait_for_requests_to_drain(drain_timeout=0)
        async for _ in stream:
            pass
        await engine.wait_for_requests_to_drain(drain_timeout=5)

    asyncio.run(drain())


def test_queue_limits_check_admission_as_vllms(engine):
    # no limits configured: nothing refused, nothing queued
    engine.check_admission(4, request_id="r")
    assert engine.get_num_queued_tokens() == 0


def test_add_request_returns_vllms_output_collector(engine):
    from actorllm.core.sampling_params import RequestOutputKind

    delta = SamplingParams(temperature=0.0, max_tokens=12, output_kind=RequestOutputKind.DELTA)

    async def main():
        whole = [out async for out in engine.generate("collect me", GREEDY, "via-generate")][-1]

        async def finished() -> int:
            return sum((await engine.get_stats()).requests.request_success.values())

        before = await finished()
        q = await engine.add_request("via-collector", "collect me", delta)
        assert q.aggregate and q.request_id == "via-collector"
        for _ in range(1000):  # the consumer falls behind: every piece is there, unread
            if await finished() > before:
                break
            await asyncio.sleep(0.01)
        texts, ids = [], []
        while True:
            out = q.get_nowait() or await q.get()
            texts.append(out.outputs[0].text)
            ids += out.outputs[0].token_ids
            if out.finished:
                break
        assert "".join(texts) == whole.outputs[0].text and ids == whole.outputs[0].token_ids
        assert len(texts) == 1  # folded into one output (vLLM's collector)
        assert engine.get_num_unfinished_requests() == 0  # forgotten once read to its end
        with pytest.raises(InvalidRequestError):  # the request's own error, from get()
            bad = await engine.add_request("too-long", "word " * 400, GREEDY)
            await bad.get()
        with pytest.raises(NotImplementedError, match=r"add_request\(params=PoolingParams\)"):
            await engine.add_request("pool", "x", PoolingParams())
        with pytest.raises(NotImplementedError, match="kv_hints"):
            await engine.add_request("hints", "x", GREEDY, kv_hints={"a": 1})

    asyncio.run(main())


def test_compute_weight_checksums_as_vllms(engine):
    (rank,) = asyncio.run(engine.compute_weight_checksums())
    assert rank and all(k.startswith("dp0:pp0:pcp0:tp0:") and len(v) == 64 for k, v in rank.items())
    assert [rank] == asyncio.run(engine.compute_weight_checksums())  # unchanged weights
