"""The input processor: tokenize, apply the chat template, validate, fan out ``n > 1``.

Errors a caller caused go straight back to the caller's stream; the request never reaches
the scheduler.
"""

from __future__ import annotations

from actorllm.actors import Actor
from actorllm.core.errors import InvalidRequestError
from actorllm.core.sampling_params import SamplingParams, SamplingParamsError
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
                if not self._grammar_ready(msg, entry.params):
                    return  # compiling on the pool; msg comes back here when it is done
                self._process(msg)
            except (InvalidRequestError, SamplingParamsError) as exc:
                ledger.close(entry.request_id, exc)
                return
        # Both receivers ignore duplicates, so a retry after a crash is safe. Register with
        # the output processor first: its mailbox then holds the registration before any
        # output the scheduler could produce for this request.
        await self.ctx.ref("output_processor").send(RegisterRequest(request_id=entry.request_id))
        await self.ctx.ref("scheduler").send(AddRequest(request_id=entry.request_id))

    def _grammar_ready(self, msg: InputMsg, params: SamplingParams) -> bool:
        """Whether the request's grammar (if any) is compiled; raises its compile error (a
        400 before anything is scheduled). When it is not ready the compile runs on the
        pool and ``msg`` is posted back to this mailbox once it is done, so a slow grammar
        never holds up the requests behind it."""
        structured = self.ctx.structured
        so = params.structured_outputs
        if structured is None or so is None:
            return True
        fut = structured.compiler.submit(so.key, so.backend)
        if not fut.done():
            ref = self.ctx.ref("input_processor")
            structured.when_done(fut, lambda: ref.send_nowait(msg))
            return False
        structured.result(fut)
        return True

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
