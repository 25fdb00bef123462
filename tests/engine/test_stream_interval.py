"""stream_interval through the whole engine: the engine value, the per-request value, and
an actor crash mid-stream (the tokens held back are neither lost nor sent twice)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.testing.engine_harness import check_invariants, inject_fault, open_test_engine

pytestmark = pytest.mark.anyio

DELTA = RequestOutputKind.DELTA
N_REQUESTS = 16
ENGINE: dict[str, Any] = {
    "step_delay_s": 0.001,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 64,
    "block_size": 8,
}


def _params(i: int, interval: int | None) -> SamplingParams:
    # The plain lane, and the general path: two samples (i % 4 == 0), logprobs (== 2).
    return SamplingParams(
        max_tokens=12 + i % 5,
        temperature=0.0 if i % 2 else 0.8,
        seed=i,
        ignore_eos=True,
        output_kind=DELTA,
        stream_interval=interval,
        n=2 if i % 4 == 0 else 1,
        logprobs=1 if i % 4 == 2 else None,
    )


async def _batch(engine, interval: int | None) -> dict[int, list[RequestOutput]]:
    results: dict[int, list[RequestOutput]] = {}

    async def one(i: int) -> None:
        prompt = f"request {i} says " + "hello " * (i % 3)
        results[i] = [
            out async for out in engine.generate(prompt, _params(i, interval), request_id=f"r{i}")
        ]

    async with anyio.create_task_group() as tg:
        for i in range(N_REQUESTS):
            tg.start_soon(one, i)
    return results


Sample = tuple[str, list[int], int, str | None]  # text, ids, logprob positions, finish


def _concat(outputs: list[RequestOutput]) -> dict[int, Sample]:
    """Each sample's pieces concatenated."""
    got: dict[int, Sample] = {}
    for out in outputs:
        for c in out.outputs:
            text, ids, lps, _ = got.get(c.index, ("", [], 0, None))
            got[c.index] = (
                text + c.text,
                ids + c.token_ids,
                lps + len(c.logprobs or []),
                c.finish_reason,
            )
    return got


def _check_sizes(outputs: list[RequestOutput], interval: int) -> None:
    """Per sample: first output after one token, final immediately, every other one
    >= interval."""
    assert outputs[-1].finished and not any(o.finished for o in outputs[:-1])
    sizes: dict[int, list[int]] = {}
    for out in outputs:
        for c in out.outputs:
            sizes.setdefault(c.index, []).append(len(c.token_ids))
    for s in sizes.values():
        assert s[0] == 1 and all(n >= interval for n in s[1:-1]), sizes


@pytest.fixture(scope="module")
def reference() -> dict[int, dict[int, Sample]]:
    async def main():
        async with open_test_engine(**ENGINE) as engine:
            return {i: _concat(o) for i, o in (await _batch(engine, None)).items()}

    return anyio.run(main, backend="asyncio")


async def test_the_request_value_batches_tokens_and_equals_the_per_token_stream(reference):
    async with open_test_engine(**ENGINE) as engine:
        results = await _batch(engine, 3)
    for i, outputs in results.items():
        assert _concat(outputs) == reference[i]
        _check_sizes(outputs, 3)
        if i % 4:  # one sample
            assert len(outputs) <= 1 + -(-(len(reference[i][0][1]) - 1) // 3)


async def test_the_engine_value_applies_and_clamps_the_request_value_up(reference):
    async with open_test_engine(stream_interval=4, **ENGINE) as engine:
        results = await _batch(engine, 2)  # clamped up to 4
    for i, outputs in results.items():
        assert _concat(outputs) == reference[i]
        _check_sizes(outputs, 4)


def test_an_invalid_engine_value_is_refused_naming_the_field():
    for bad in (0, -2, 2.5):
        with pytest.raises(EngineConfigError, match="stream_interval"):
            EngineConfig(stream_interval=bad)  # type: ignore[arg-type]


FAULTS = [
    ("output_processor", {"at_step": 6}),
    ("output_processor", {"at_step": 15}),
    ("scheduler", {"at_step": 7}),
    ("executor", {"at_step": 10}),
]


@pytest.mark.parametrize(
    ("actor", "where"), FAULTS, ids=[f"{a}-{next(iter(w.values()))}" for a, w in FAULTS]
)
async def test_a_crash_mid_stream_loses_and_repeats_nothing(actor, where, reference):
    async with open_test_engine(stream_interval=3, **ENGINE) as engine:
        inject_fault(engine, actor, **where)
        results = await _batch(engine, None)
        restarts = engine._actor_stat("restarts")
        await check_invariants(engine)
    assert restarts[actor] >= 1, f"the fault in {actor} never fired"
    for i, outputs in results.items():
        assert _concat(outputs) == reference[i]
        _check_sizes(outputs, 3)
