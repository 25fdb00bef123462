"""How far any output lane could take a streamed step: the engine with its output processor
cut down to what every design must do (``bench overhead --lane-bound``).

``bench overhead`` times the engine against the bare core loop plus the streaming API's
own floor (:mod:`actorllm.bench.output_floor`). What lies between is the engine's: the
scheduler and executor actors around the core, the worker thread's hand-offs, the output
processor (detokenizer, request state, statistics, ledger record, delivery) and the
callers' frames. This takes the output processor's part away to see how much of the gap
it is: over the timed window, the output processor actor's step (``_apply``) is replaced
by the least any output lane does for a one-sample DELTA request's decode token:

* one lookup of the request (the ledger's, by its engine id),
* the token appended to the request's own list of ids,
* the token's text, from the request's incremental detokenizer,
* one ``RequestOutput`` (:func:`~actorllm.bench.output_floor.make_output`, the floor's)
  offered to the caller's stream, which wakes the caller.

Nothing else: no stamps, inter-token statistics, weight versions, recovery record or
``stream_interval``. The outputs the lane does not take (a finish, logprobs, more than
one token, a request the ledger does not hold) go through the real ``_apply``; each
request's list and detokenizer are made the first time the lane sees it (the window's
first step). ``(lane bound) / (core + output floor)`` is the least engine/core ratio that
an output lane of any design leaves, everything else in the engine as it is.
It is a measurement only: outputs the lane handled never reach the core output
processor, so the engine is not used after the window (``engine_step_ms`` cancels it).

    >>> import anyio, functools
    >>> from actorllm.bench.overhead import engine_step_ms
    >>> run = functools.partial(engine_step_ms, 8, 5, window=least_output_lane)
    >>> anyio.run(run)["steps"] >= 5  # doctest: +SKIP
    True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from math import inf

import msgspec

from actorllm.bench.output_floor import make_output
from actorllm.core.detokenizer import IncrementalDetokenizer
from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs


@contextlib.contextmanager
def least_output_lane() -> Iterator[None]:
    """Within the block, every engine's output processor runs the least lane."""
    from actorllm.engine.actors.output_processor import OutputProcessorActor

    real = OutputProcessorActor._apply
    # {engine request id: (its token ids, its detokenizer, its prompt)}, made at first sight
    lanes: dict[str, tuple[list[int], IncrementalDetokenizer, list[int]]] = {}

    def least(self: OutputProcessorActor, epoch: int, eco: EngineCoreOutputs) -> None:
        child_of = self.ctx.ledger.child
        tokenizer = self.core.tokenizer
        assert tokenizer is not None  # the bench's engine detokenizes
        now = eco.timestamp
        rest: list[EngineCoreOutput] = []
        for out in eco.outputs:
            found = child_of(out.req_id)
            new = out.new_token_ids
            if (  # what any lane checks first: is this output its kind
                found is None
                or len(new) != 1
                or out.finish_reason is not None
                or out.new_logprobs is not None
                or out.new_prompt_logprobs is not None
            ):
                rest.append(out)
                continue
            entry = found[0]
            lane = lanes.get(out.req_id)
            if lane is None:
                prompt = entry.prompt_token_ids or []
                lane = lanes[out.req_id] = ([], IncrementalDetokenizer(tokenizer, prompt), prompt)
            token_id = new[0]
            lane[0].append(token_id)
            text = lane[1].decode_next(token_id)
            entry.stream.offer(make_output(entry.request_id, lane[2], token_id, now, text), inf)
        if rest:
            real(self, epoch, msgspec.structs.replace(eco, outputs=rest))

    OutputProcessorActor._apply = least  # type: ignore[method-assign]
    try:
        yield
    finally:
        OutputProcessorActor._apply = real  # type: ignore[method-assign]
