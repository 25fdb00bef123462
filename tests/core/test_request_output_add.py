"""vLLM's ``RequestOutput.add``: DELTA pieces aggregate into the whole answer (the same as
the FINAL_ONLY output of the same request), or newer samples replace older ones."""

from __future__ import annotations

import pytest

from actorllm.core.outputs import CompletionOutput, RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.testing import open_test_engine


def _out(*samples: CompletionOutput, finished: bool = False) -> RequestOutput:
    return RequestOutput(
        request_id="r", prompt=None, prompt_token_ids=[1], prompt_logprobs=None,
        outputs=list(samples), finished=finished,
    )  # fmt: skip


def test_aggregate_appends_and_replace_replaces() -> None:
    first = _out(CompletionOutput(index=0, text="Hel", token_ids=[1], cumulative_logprob=-1.0))
    first.add(
        _out(
            CompletionOutput(
                index=0, text="lo", token_ids=[2], cumulative_logprob=-2.0, finish_reason="length"
            ),
            CompletionOutput(index=1, text="x", token_ids=[9]),
            finished=True,
        ),
        aggregate=True,
    )
    zero, one = first.outputs
    assert (zero.text, zero.token_ids, zero.cumulative_logprob) == ("Hello", [1, 2], -2.0)
    assert zero.finish_reason == "length" and one.text == "x" and first.finished
    newer = CompletionOutput(index=0, text="Hello!", token_ids=[1, 2, 3])
    first.add(_out(newer), aggregate=False)
    assert first.outputs[0] is newer and first.finished  # finished stays


@pytest.mark.anyio
async def test_aggregated_deltas_are_the_final_output(anyio_backend: str) -> None:
    async with open_test_engine() as engine:
        prompt = {"prompt_token_ids": [5, 6, 7, 8]}
        whole = None
        delta = SamplingParams(max_tokens=9, n=2, seed=3, output_kind=RequestOutputKind.DELTA)
        async for out in engine.generate(prompt, delta):
            if whole is None:
                whole = out
            else:
                whole.add(out, aggregate=True)
        final = SamplingParams(max_tokens=9, n=2, seed=3, output_kind=RequestOutputKind.FINAL_ONLY)
        (last,) = [o async for o in engine.generate(prompt, final)]
    assert whole is not None and whole.finished
    got = sorted((c.index, c.text, c.token_ids, c.finish_reason) for c in whole.outputs)
    want = sorted((c.index, c.text, c.token_ids, c.finish_reason) for c in last.outputs)
    assert got == want
