"""The input processor: tokenize, apply the chat template, validate, fan out ``n > 1``.

Errors a caller caused go straight back to the caller's stream; the request never reaches
the scheduler. A processed request is recorded in the ledger (for recovery) and sent on:
first to the output processor (so it knows the request before any output), then to the
router, which picks the replica whose scheduler runs it. Both ignore duplicates, so a
retry after a crash is safe.

A structured-outputs request's grammar is compiled first, on the compile pool: while it
compiles the request is parked and the actor goes on with others; the ``Generate`` comes
back to this mailbox when the compile is done. A spec that does not compile is the
caller's 400, before anything is scheduled.
"""

from __future__ import annotations

from typing import Any

from actorllm.actors import Actor
from actorllm.core.errors import InvalidRequestError
from actorllm.core.input_processor import InputProcessor
from actorllm.core.sampling_params import SamplingParams, SamplingParamsError
from actorllm.engine.actors.context import EngineContext
from actorllm.engine.actors.messages import (
    Child,
    FailRequest,
    Generate,
    InputMsg,
    NewRequest,
    RegisterRequest,
    Route,
)
from actorllm.engine.actors.router import end_request

SCOPE = "input_processor"


class InputProcessorActor(Actor[InputMsg]):
    def __init__(self, ctx: EngineContext, inputs: InputProcessor, structured: Any = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.inputs = inputs
        self.structured = (
            structured  # StructuredOutputs (engine/scheduling/structured_outputs.py) or None
        )

    async def handle(self, msg: InputMsg) -> None:
        match msg:
            case Generate():
                await self._process(msg)
            case FailRequest(request_id=rid, reason=reason):
                await end_request(self.ctx, rid, reason)
        if self.ctx.blame.has_suspects(SCOPE):
            self.ctx.blame.cleared(SCOPE, [msg.request_id])

    async def _process(self, msg: Generate) -> None:
        ledger, rid = self.ctx.ledger, msg.request_id
        if rid not in ledger:
            return  # aborted while queued
        chat = msg.chat
        try:
            if not self._grammar_ready(msg, msg.params):
                return  # compiling on the pool; msg comes back here when it is done
            processed = self.inputs.process(
                rid,
                msg.prompt,
                msg.params,
                is_chat=chat is not None,
                chat_options=None
                if chat is None
                else {
                    "add_generation_prompt": chat.add_generation_prompt,
                    "chat_template_kwargs": chat.chat_template_kwargs,
                    "tools": chat.tools,
                },
            )
        except (InvalidRequestError, SamplingParamsError) as exc:
            ledger.close(rid, exc)
            return
        children = [
            Child(child_id=c.child_id, index=c.index, params=c.params) for c in processed.children
        ]
        ledger.record_processed(
            rid,
            prompt_text=processed.prompt_text,
            prompt_token_ids=processed.prompt_token_ids,
            eos_token_id=processed.eos_token_id,
            children=[(c.child_id, c.params) for c in children],
            cache_salt=processed.cache_salt,
            prompt_embeds=processed.prompt_embeds,
            reasoning_ended=msg.reasoning_ended,
        )
        await self.ctx.refs.output_processor.send(
            RegisterRequest(
                request_id=rid,
                prompt_text=processed.prompt_text,
                prompt_token_ids=processed.prompt_token_ids,
                params=msg.params,
                arrival_time=msg.arrival_time,
                child_ids=[c.child_id for c in children],
            ),
            checkpoint=False,  # (both sends: no turn of the loop each, see the router's)
        )
        await self.ctx.refs.router.send(
            Route(
                request=NewRequest(
                    request_id=rid,
                    prompt_token_ids=processed.prompt_token_ids,
                    eos_token_id=processed.eos_token_id,
                    arrival_time=msg.arrival_time,
                    priority=msg.priority,
                    children=children,
                    cache_salt=processed.cache_salt,
                    lora_request=msg.lora_request,
                    prompt_embeds=processed.prompt_embeds,
                    reasoning_ended=msg.reasoning_ended,
                )
            ),
            checkpoint=False,
        )

    def _grammar_ready(self, msg: Generate, params: SamplingParams) -> bool:
        """Whether the request's grammar (if any) is compiled; raises its compile error.
        Not yet: the compile runs on the pool and ``msg`` is posted back to this mailbox
        once it is done, so a slow grammar never holds up the requests behind it."""
        structured = self.structured
        so = params.structured_outputs
        if structured is None or so is None:
            return True
        fut = structured.compiler.submit_for(so)
        if not fut.done():
            ref = self.ctx.refs.input_processor
            structured.when_done(fut, lambda: ref.send_nowait(msg))
            return False
        structured.result(fut, so.key.param)
        return True
