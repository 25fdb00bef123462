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
"""

from __future__ import annotations

from typing import Protocol

from actorllm.core.request import Request
from actorllm.core.scheduler_output import GrammarBitmask


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
