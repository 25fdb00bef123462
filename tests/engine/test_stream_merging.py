"""A caller that falls behind reads merged outputs: the same text, ids and logprobs."""

from __future__ import annotations

import anyio
import pytest

from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.testing import open_test_engine

pytestmark = pytest.mark.anyio

DELTA = RequestOutputKind.DELTA


def _samples(outputs: list[RequestOutput]) -> dict[int, tuple[str, list[int], list, str | None]]:
    """Each sample's concatenated text, ids and logprobs, and how it finished."""
    got: dict[int, tuple[str, list[int], list, str | None]] = {}
    for out in outputs:
        for c in out.outputs:
            text, ids, lps, _ = got.get(c.index, ("", [], [], None))
            got[c.index] = (
                text + c.text,
                ids + c.token_ids,
                lps + (c.logprobs or []),
                c.finish_reason,
            )
    return got


async def _read(engine, prompt: str, params: SamplingParams, lag: bool) -> list[RequestOutput]:
    outputs = []
    rid = f"{prompt}-{lag}"
    async for out in engine.generate(prompt, params, request_id=rid):
        outputs.append(out)
        if lag and len(outputs) == 1:  # fall behind until the request has ended
            while rid in engine._ctx.ledger:
                await anyio.sleep(0.005)
    return outputs


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=24, ignore_eos=True, output_kind=DELTA),
        SamplingParams(
            max_tokens=24, ignore_eos=True, output_kind=DELTA, logprobs=2, prompt_logprobs=1
        ),
        SamplingParams(max_tokens=24, ignore_eos=True, output_kind=DELTA, n=2, seed=3),
    ],
    ids=["plain", "logprobs", "n2"],
)
async def test_merged_deltas_equal_the_per_step_deltas(params: SamplingParams) -> None:
    async with open_test_engine(step_delay_s=0.002) as engine, anyio.create_task_group() as tg:
        results: dict[bool, list[RequestOutput]] = {}

        async def run(lag: bool) -> None:
            results[lag] = await _read(engine, "the same prompt", params, lag)

        tg.start_soon(run, False)
        tg.start_soon(run, True)
    prompt_reader, lagging = results[False], results[True]
    assert len(lagging) < len(prompt_reader)  # it woke fewer times
    assert _samples(lagging) == _samples(prompt_reader)
    assert lagging[-1].finished and not any(o.finished for o in lagging[:-1])
    if params.prompt_logprobs is not None:
        pieces = [p for o in prompt_reader for p in o.prompt_logprobs or []]
        merged = [p for o in lagging for p in o.prompt_logprobs or []]
        assert merged == pieces


async def test_a_lagging_cumulative_reader_reads_the_newest_output() -> None:
    params = SamplingParams(max_tokens=16, ignore_eos=True)  # CUMULATIVE
    async with open_test_engine(step_delay_s=0.002) as engine:
        prompt_reader = await _read(engine, "cumulative", params, lag=False)
        lagging = await _read(engine, "cumulative", params, lag=True)
    assert len(lagging) == 2
    assert lagging[-1].outputs == prompt_reader[-1].outputs
