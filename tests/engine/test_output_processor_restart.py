"""A restarted output processor rebuilds every request from the ledger: a sample (n > 1)
that ended before the crash stays ended, and every output position keeps its logprobs.

Before this was kept, a request whose first sample ended just before an output-processor
crash never ended: the rebuilt processor replayed that sample's tokens but not its end, so
it waited for an end the scheduler had already sent (the hang CI met in
test_stream_interval.py, seen there only when the timing put the crash in between)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.testing.engine_harness import (
    check_invariants,
    engine_context,
    inject_fault,
    open_test_engine,
)

pytestmark = pytest.mark.anyio

# A 16-token prefill budget against a 20-token prompt: the second sample's prefill ends a
# step after the first's, so the first sample ends a step earlier.
ENGINE: dict[str, Any] = {
    "step_delay_s": 0.001,
    "max_num_batched_tokens": 16,
    "block_size": 8,
    "enable_prefix_caching": False,
}
PROMPT = list(range(100, 120))

# Per sample: token ids, text, finish reason, the logprobs' chosen tokens, cumulative.
Sample = tuple[list[int], str, str | None, list[int], float | None]


def _params(kind: RequestOutputKind, interval: int | None) -> SamplingParams:
    return SamplingParams(
        n=2,
        max_tokens=9,
        temperature=0.8,
        seed=11,
        logprobs=1,
        ignore_eos=True,
        output_kind=kind,
        stream_interval=interval,
    )


def _fold(outputs: list[RequestOutput], kind: RequestOutputKind) -> dict[int, Sample]:
    """Each sample as the caller ends up with it: DELTA's pieces concatenated, a streamed
    sample's last CUMULATIVE output (a streamed output holds the samples that changed, as
    in vLLM), FINAL_ONLY's one output."""
    assert outputs and outputs[-1].finished and all(not o.finished for o in outputs[:-1])
    samples: dict[int, Sample] = {}
    for out in outputs:
        for c in out.outputs:
            ids, text, _, chosen, _ = samples.get(c.index, ([], "", None, [], None))
            if kind != RequestOutputKind.DELTA:
                ids, text, chosen = [], "", []
            picked = [next(iter(p)) for p in c.logprobs or []]
            samples[c.index] = (
                ids + c.token_ids,
                text + c.text,
                c.finish_reason,
                chosen + picked,
                c.cumulative_logprob,
            )
    return samples


async def _generate(engine: Any, kind: RequestOutputKind, interval: int | None, rid: str) -> Any:
    with anyio.fail_after(30):  # the defect was a hang
        return [
            o
            async for o in engine.generate(
                {"prompt_token_ids": PROMPT}, _params(kind, interval), request_id=rid
            )
        ]


# Each output kind, and stream_interval 1 and 4 (held tokens at the crash).
CASES = [
    (RequestOutputKind.DELTA, None),
    (RequestOutputKind.DELTA, 4),
    (RequestOutputKind.CUMULATIVE, None),
    (RequestOutputKind.FINAL_ONLY, 4),
]


@pytest.fixture(scope="module")
def reference() -> dict[int, dict[int, Sample]]:
    """Every case without a crash, in one engine (seeded: the samples do not depend on
    what else runs)."""

    async def main() -> dict[int, dict[int, Sample]]:
        got: dict[int, dict[int, Sample]] = {}
        async with open_test_engine(**ENGINE) as engine:

            async def one(i: int) -> None:
                kind, interval = CASES[i]
                got[i] = _fold(await _generate(engine, kind, interval, f"r{i}"), kind)

            async with anyio.create_task_group() as tg:
                for i in range(len(CASES)):
                    tg.start_soon(one, i)
        return got

    return anyio.run(main, backend="trio")


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{k.name}-{i or 1}" for k, i in CASES])
async def test_a_sample_that_ended_before_the_crash_ends_with_its_request(case, reference):
    kind, interval = CASES[case]
    expected = reference[case]
    assert sorted(expected) == [0, 1]
    for ids, _, finish, chosen, _ in expected.values():
        assert len(ids) == 9 and finish == "length" and chosen == ids
    async with open_test_engine(**ENGINE) as engine:
        ledger = engine_context(engine).ledger

        def one_sample_ended(_msg: object) -> bool:
            entry = ledger.get("r")
            ended = [c.finished for c in entry.children.values()] if entry else []
            return len(ended) == 2 and any(ended) and not all(ended)

        inject_fault(engine, "output_processor", when=one_sample_ended)
        outputs = await _generate(engine, kind, interval, "r")
        restarts = engine._actor_stat("restarts")["output_processor"]
        await check_invariants(engine)
    assert restarts == 1, "the crash did not fall between the two samples' ends"
    assert _fold(outputs, kind) == expected


@pytest.mark.parametrize("kind", [RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY])
async def test_a_restart_keeps_the_first_outputs_cache_counts_and_time(anyio_backend, kind):
    """The prefix-cache hits, the tokens written to the cache and the first scheduled time
    come with the scheduler's first output only: a rebuilt output processor gets them from
    the ledger, so the request reports what it would have without the crash."""
    prompt = list(range(200, 228))  # 28 tokens: 3 full blocks of 8
    params = SamplingParams(max_tokens=8, ignore_eos=True, output_kind=kind)
    engine_kw = {**ENGINE, "enable_prefix_caching": True}
    async with open_test_engine(**engine_kw) as engine:
        ledger = engine_context(engine).ledger
        # 20 tokens of the prompt: its 2 full blocks are in the cache before "r" starts
        async for _ in engine.generate({"prompt_token_ids": prompt[:20]}, params):
            pass

        def past_first_output(_msg: object) -> bool:
            entry = ledger.get("r")
            return entry is not None and len(entry.children["r"].emitted) >= 2

        inject_fault(engine, "output_processor", when=past_first_output)
        with anyio.fail_after(30):
            outputs = [o async for o in engine.generate({"prompt_token_ids": prompt}, params, "r")]
        restarts = engine._actor_stat("restarts")["output_processor"]
        await check_invariants(engine)
    assert restarts == 1
    last = outputs[-1]
    assert last.finished and (last.num_cached_tokens, last.num_cache_creation_tokens) == (16, 8)
    assert last.metrics is not None and last.metrics.first_scheduled_time is not None
    if kind == RequestOutputKind.DELTA:  # the first output, from before the crash, agrees
        first = outputs[0]
        assert (first.num_cached_tokens, first.num_cache_creation_tokens) == (16, 8)
        assert first.metrics is not None
        assert last.metrics.first_scheduled_time == first.metrics.first_scheduled_time
