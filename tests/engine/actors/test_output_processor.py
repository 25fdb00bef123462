"""The output processor actor: a step of an epoch that ended is never applied, even when
the epoch ends while the actor lets woken callers read before applying it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs
from actorllm.core.request_stats import RequestStats
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.actors import output_processor as op
from actorllm.engine.actors.messages import RegisterRequest, StepOutputs
from actorllm.engine.recovery.blame import Blame
from actorllm.engine.recovery.ledger import RequestLedger

pytestmark = pytest.mark.anyio

PARAMS = SamplingParams(max_tokens=4, output_kind=RequestOutputKind.DELTA)


def _actor(ledger: RequestLedger) -> op.OutputProcessorActor:
    ctx = SimpleNamespace(config=SimpleNamespace(stream_interval=1), ledger=ledger, blame=Blame())
    return op.OutputProcessorActor(ctx, None, RequestStats(max_model_len=64))  # type: ignore[arg-type]


def _step(epoch: int, step_id: int, token: int) -> StepOutputs:
    out = EngineCoreOutput(req_id="r", new_token_ids=[token])
    return StepOutputs(epoch=epoch, outputs=EngineCoreOutputs(step_id=step_id, outputs=[out]))


async def test_a_step_whose_epoch_ended_while_callers_read_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = RequestLedger()
    stream = ledger.open("r", None, PARAMS, 0, 0.0)
    ledger.record_processed(
        "r", prompt_text=None, prompt_token_ids=[1, 2], eos_token_id=None, children=[("r", PARAMS)]
    )
    epoch = ledger.new_epoch()
    actor = _actor(ledger)
    register = RegisterRequest(
        request_id="r",
        prompt_text=None,
        prompt_token_ids=[1, 2],
        params=PARAMS,
        arrival_time=0.0,
        child_ids=["r"],
    )
    await actor.handle(register)
    await actor.handle(_step(epoch, 1, 7))
    assert ledger.child("r")[1].emitted == [7]  # type: ignore[index]

    async def rebuilt_while_callers_read(_readers: object) -> None:
        # The scheduler rebuilds its core meanwhile: it re-adds "r" with the one token the
        # ledger holds, and will compute the next token again in the new epoch.
        ledger.new_epoch()

    monkeypatch.setattr(op, "_let_callers_read", rebuilt_while_callers_read)
    ledger.woken_readers.pending = 1  # a caller woken by the last output has not run yet
    await actor.handle(_step(epoch, 2, 8))
    assert ledger.child("r")[1].emitted == [7]  # type: ignore[index]
    stream.close()
    assert [o.outputs[0].token_ids async for o in stream] == [[7]]  # type: ignore[union-attr]
