"""The waiting-queue bound: refuse new requests while too many already wait.

A request *waits* from the moment it is accepted (``AsyncEngine.generate`` registers it in
the ledger) until the scheduler runs it, and again while it is preempted: when the KV
cache is exhausted the scheduler preempts, running requests go back to waiting, and new
arrivals pile up behind them. Beyond ``EngineConfig.max_waiting_requests`` waiting, a new
request is refused at once with :class:`~actorllm.engine.errors.EngineOverloadedError`
(the server's 503 with ``Retry-After``), instead of queueing without bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from actorllm.engine.errors import EngineOverloadedError
from actorllm.engine.recovery.ledger import RequestLedger

RETRY_AFTER_S = 1.0  # the hint sent with a refusal: the queue moves at every step


def num_waiting(ledger: RequestLedger, running_child_ids: Iterable[str]) -> int:
    """Open requests none of whose samples is running."""
    running: set[str] = set()
    for child_id in running_child_ids:
        entry = ledger.entry_of_child(child_id)
        if entry is not None:
            running.add(entry.request_id)
    return len(ledger) - len(running)


def check_waiting_bound(
    ledger: RequestLedger, running: Iterable[Sequence[str]], bound: int | None
) -> None:
    """Raise ``EngineOverloadedError`` if ``bound`` requests already wait.

    ``running``: every live replica's running child ids, as its scheduler actor published
    them (``Admission.running``, an immutable tuple replaced after each of its messages);
    a request runs when some replica runs one of its samples."""
    if bound is None or len(ledger) < bound:  # cheap exit: fewer open than the bound
        return
    waiting = num_waiting(ledger, (c for ids in running for c in ids))
    if waiting >= bound:
        raise EngineOverloadedError(
            f"the engine is overloaded: {waiting} requests are already waiting "
            f"(max_waiting_requests={bound}); retry later.",
            retry_after_s=RETRY_AFTER_S,
        )
