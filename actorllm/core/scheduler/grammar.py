"""What the scheduler needs from structured outputs, as a protocol (``core/`` stays sans-I/O).

The engine passes an implementation (``actorllm.structured_output.manager``) that compiles
grammars in a thread pool and keeps one matcher per request. The scheduler only polls it:

* :meth:`GrammarTracker.add` starts the compile (never blocks); a request whose grammar is
  not ready waits in ``WAITING_FOR_FSM``, holding no seat and no blocks;
* :meth:`GrammarTracker.poll` says whether it is ready — building the matcher and feeding
  it the request's outputs so far, which is how a request resumed after a crash finds its
  place in the grammar again — or raises the spec's ``StructuredOutputsError``;
* :meth:`GrammarTracker.bitmask` gives the allowed-token rows of a step's sampling requests
  (under async scheduling, rows that follow a token still in flight are filled once
  :meth:`GrammarTracker.accept` has it);
* :meth:`GrammarTracker.accept` advances a matcher by the tokens a step sampled.

How the scheduler uses it: a request with a constraint waits in ``waiting_for_fsm`` until
its grammar is compiled (no seat, no blocks), then joins the waiting queue. Each step
carries the allowed-token bitmask rows of the structured requests that sample in it
(:func:`step_bitmask`), and their sampled tokens advance their matchers
(:func:`advance_grammar`). Under async scheduling a structured request runs every step like
any other: its row follows the token still in flight, so the tracker fills it once the
scheduler has applied that token (while the step's forward pass runs).
A completed grammar allows only stop tokens, and the next token ends the request
(``FINISHED_STOPPED``) even if the stop token is ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from actorllm.core.request import Request, RequestStatus
from actorllm.core.scheduler_output import GrammarBitmask
from actorllm.core.structured_outputs_params import StructuredOutputsError


class GrammarTracker(Protocol):
    def add(self, request: Request) -> None:
        """Start compiling ``request``'s grammar (a cache hit is ready at once)."""
        ...

    def poll(self, request: Request) -> bool:
        """True once the matcher is built and caught up with the request's outputs.
        Raises ``StructuredOutputsError`` if the spec failed to compile."""
        ...

    def accept(self, req_id: str, token_ids: list[int]) -> bool:
        """Advance the matcher; False if the grammar rejects a token."""
        ...

    def is_terminated(self, req_id: str) -> bool:
        """The grammar is complete and its stop token was accepted: nothing may follow."""
        ...

    def bitmask(self, req_ids: list[str], after: list[int] | None = None) -> GrammarBitmask:
        """Allowed next tokens, one row per id (in order); row ``i`` follows the request's
        first ``after[i]`` output tokens, some of them maybe still in flight (None: all
        fed already)."""
        ...

    def remove(self, req_id: str) -> None: ...

    def close(self) -> None:
        """The scheduler is dropped (crash, sleep): end any wait for its tokens."""
        ...


def poll_grammar(grammar: GrammarTracker, request: Request) -> bool:
    """:meth:`GrammarTracker.poll`; a request whose spec failed to compile is removed from
    the tracker before its ``StructuredOutputsError`` propagates."""
    try:
        return grammar.poll(request)
    except StructuredOutputsError:
        grammar.remove(request.request_id)
        raise


def step_bitmask(
    grammar: GrammarTracker, scheduled: Iterable[Request], num_scheduled_tokens: dict[str, int]
) -> GrammarBitmask | None:
    """The bitmask rows of the structured requests among ``scheduled`` that sample in this
    step (their scheduled tokens reach the end), or None when there is none. Each row follows
    the outputs so far and those still in flight."""
    sampling = [
        r
        for r in scheduled
        if r.use_structured_output
        and r.num_computed_tokens + num_scheduled_tokens[r.request_id] >= r.num_tokens
    ]
    if not sampling:
        return None
    return grammar.bitmask(
        [r.request_id for r in sampling],
        [len(r.output_token_ids) + r.num_output_placeholders for r in sampling],
    )


def advance_grammar(
    grammar: GrammarTracker, req: Request, token: int, status: RequestStatus | None
) -> RequestStatus | None:
    """Feed ``token`` to the request's matcher; returns the request's status after it
    (``status``: the one the stop checks gave). A rejected token (the sampler broke the
    mask) ends the request with an error rather than emit invalid output. A token after the
    grammar completed can only be a stop token (the mask allows nothing else): it ends the
    request even when ``ignore_eos`` or ``min_tokens`` would not."""
    rid = req.request_id
    if grammar.is_terminated(rid):
        return status or RequestStatus.FINISHED_STOPPED
    if not grammar.accept(rid, [token]):
        return RequestStatus.FINISHED_ERROR
    return status
