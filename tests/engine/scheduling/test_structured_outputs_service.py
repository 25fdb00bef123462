"""The engine's structured-outputs service: off-loop checks, typed errors, shared cache."""

from __future__ import annotations

import anyio
import pytest

from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsError
from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP
from actorllm.engine.scheduling.structured_outputs import StructuredOutputs
from tests.helpers.tokenizers import ENDOFTEXT_ID, VOCAB_SIZE, hf_demo_tokenizer

pytestmark = pytest.mark.anyio


def _service() -> StructuredOutputs:
    return StructuredOutputs(
        hf_demo_tokenizer(), vocab_size=VOCAB_SIZE, stop_token_ids=[ENDOFTEXT_ID]
    )


async def test_check_compiles_off_the_loop_and_types_errors() -> None:
    svc = _service()
    try:
        await svc.check(SamplingParams())  # nothing to do
        await svc.check(SamplingParams(structured_outputs=SOP(regex="[0-9]{3}")))
        with pytest.raises(StructuredOutputsError, match="regex"):
            await svc.check(SamplingParams(structured_outputs=SOP(regex="[0-9")))
    finally:
        svc.shutdown()


async def test_tracker_wakes_the_loop_when_a_compile_finishes() -> None:
    svc = _service()
    try:
        woken = anyio.Event()
        tracker = svc.tracker(woken.set)
        params = SamplingParams(structured_outputs=SOP(choice=["on", "off"]))
        req = Request("a", [5], params)
        tracker.add(req)
        if not tracker.poll(req):
            with anyio.fail_after(10):
                await woken.wait()
        assert tracker.poll(req)
    finally:
        svc.shutdown()
