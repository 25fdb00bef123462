"""The input processor: tokenize, apply the chat template, validate, fan out ``n > 1``.

Errors a caller caused go straight back to the caller's stream; the request never reaches
the scheduler.
"""

from __future__ import annotations

from actorllm.actors import Actor
from actorllm.core.errors import InvalidRequestError
from actorllm.core.sampling_params import SamplingParamsError
from actorllm.engine.context import EngineContext
from actorllm.engine.ledger import ChildState
from actorllm.engine.messages import AddRequest, InputMsg, RegisterRequest


class InputProcessorActor(Actor[InputMsg]):
    def __init__(self, ctx: EngineContext) -> None:
        super().__init__()
        self.ctx = ctx

    async def handle(self, msg: InputMsg) -> None:
        self.ctx.maybe_fault("input_processor", msg)
        ledger = self.ctx.ledger
        entry = ledger.get(msg.request_id)
        if entry is None:
            return  # aborted while queued
        if not entry.processed:
            try:
                if self.ctx.structured is not None:
                    # The grammar compiles off the loop (then cached for the scheduler);
                    # a bad spec is this caller's 400, before anything is scheduled.
                    await self.ctx.structured.check(entry.params)
                    if ledger.get(msg.request_id) is None:
                        return  # aborted while its grammar compiled
                self._process(msg)
            except (InvalidRequestError, SamplingParamsError) as exc:
                ledger.close(entry.request_id, exc)
                return
        # Both receivers ignore duplicates, so a retry after a crash is safe. Register with
        # the output processor first: its mailbox then holds the registration before any
        # output the scheduler could produce for this request.
        await self.ctx.ref("output_processor").send(RegisterRequest(request_id=entry.request_id))
        await self.ctx.ref("scheduler").send(AddRequest(request_id=entry.request_id))

    def _process(self, msg: InputMsg) -> None:
        entry = self.ctx.ledger.get(msg.request_id)
        assert entry is not None
        processed = self.ctx.inputs.process(
            entry.request_id,
            entry.prompt,  # type: ignore[arg-type]
            entry.params,
            is_chat=msg.is_chat,
            chat_options=msg.chat_options,
        )
        entry.prompt_text = processed.prompt_text
        entry.eos_token_id = processed.eos_token_id
        self.ctx.ledger.set_children(
            entry.request_id,
            [ChildState(child_id=c.child_id, params=c.params) for c in processed.children],
        )
        entry.prompt_token_ids = processed.prompt_token_ids  # set last: marks it processed
