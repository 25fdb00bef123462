"""Requests and their children as admission reads them: the scheduler core runs children
(one per sample of ``n``), the ledger and the callers know requests.

* :func:`children_of`: a request just processed, nothing emitted yet;
* :func:`open_children`: a ledger entry's unfinished children, each with the tokens its
  caller saw (a rebuild recomputes them like a preemption);
* :func:`core_request`: the core's ``Request`` for one child, the same from either source;
* :func:`request_ids_of`: the requests some children belong to (a step's, a crash's);
* :func:`runnable`, :func:`replica_entries`: which ledger entries a core could run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from actorllm.core.request import Request

if TYPE_CHECKING:
    from actorllm.engine.actors.messages import NewRequest
    from actorllm.engine.recovery.ledger import LedgerEntry, RequestLedger


class ChildView(NamedTuple):
    """What the core needs of one child besides its parent's prompt."""

    child_id: str
    params: Any  # its sampling (or pooling) params
    emitted: list[int]  # output tokens its caller already saw


def children_of(request: NewRequest) -> list[ChildView]:
    return [ChildView(c.child_id, c.params, []) for c in request.children]


def open_children(entry: LedgerEntry) -> list[ChildView]:
    return [
        ChildView(c.child_id, c.params, c.emitted)
        for c in entry.children.values()
        if not c.finished
    ]


def core_request(parent: NewRequest | LedgerEntry, child: ChildView) -> Request:
    """``child`` of ``parent`` (processed: it has its prompt tokens), to add to the core."""
    assert parent.prompt_token_ids is not None
    return Request(
        child.child_id,
        parent.prompt_token_ids,
        child.params,
        eos_token_id=parent.eos_token_id,
        arrival_time=parent.arrival_time,
        priority=parent.priority,
        output_token_ids=child.emitted,
        cache_salt=parent.cache_salt,
        lora_request=parent.lora_request,
        prompt_embeds=parent.prompt_embeds,
        reasoning_ended=parent.reasoning_ended,
    )


def request_ids_of(ledger: RequestLedger, child_ids: Iterable[str]) -> list[str]:
    """The open requests of ``child_ids`` in the ledger, each once, in first-seen order."""
    ids = []
    for child_id in child_ids:
        entry = ledger.entry_of_child(child_id)
        if entry is not None:
            ids.append(entry.request_id)
    return list(dict.fromkeys(ids))


def runnable(ledger: RequestLedger, rid: str) -> bool:
    """Processed, still in the ledger, with a child left to run."""
    entry = ledger.get(rid)
    return (
        entry is not None
        and entry.processed
        and any(not c.finished for c in entry.children.values())
    )


def replica_entries(ledger: RequestLedger, replica: int | None) -> Iterator[LedgerEntry]:
    """The processed entries routed to ``replica`` (None: the engine's only core, which runs
    every processed request)."""
    for entry in ledger:
        if entry.processed and replica in (None, entry.replica):
            yield entry
