"""Who is to blame when an actor crashes: the poison-request policy, as plain logic.

Theory of operation
-------------------
A crash is charged to the requests the crashed actor was working on: the message being
handled (its dead letter) and, for the core subtree, every request in a step still in
flight. Charging everyone in a batch of 32 would fail 32 innocent requests the second time
anything goes wrong, so suspects are isolated:

========================  =====================================================
event                     effect
========================  =====================================================
crash, no suspect among   every involved request: ``crash_count += 1``,
the involved requests     becomes a *suspect*
crash, suspects involved  only those suspects are charged (the others are
                          innocent bystanders of a known suspect)
``crash_count`` reaches   the request is failed alone, with a clear error
``MAX_CRASHES`` (2)
a step containing a       the suspect is *cleared*: ``crash_count = 0``
suspect completes
========================  =====================================================

The scheduler admits suspects back one at a time (probation), so when a request really is
poison its second crash happens with it as the only suspect in flight, and only it fails.
Requests replayed after a crash recompute their KV from the ledger; sampling is
deterministic per (seed, position), so greedy and seeded requests end exactly as they would
have without the crash.
"""

from __future__ import annotations

from collections.abc import Iterable

from actorllm.engine.ledger import RequestLedger

MAX_CRASHES = 2


def charge_crash(ledger: RequestLedger, request_ids: Iterable[str]) -> list[str]:
    """Charge a crash to ``request_ids`` (user-facing ids); returns the ids that must now
    fail. Unknown or closed ids are ignored."""
    involved = [e for rid in dict.fromkeys(request_ids) if (e := ledger.get(rid)) is not None]
    suspects = [e for e in involved if e.suspect]
    charged = suspects or involved
    doomed = []
    for entry in charged:
        entry.crash_count += 1
        entry.suspect = True
        if entry.crash_count >= MAX_CRASHES:
            doomed.append(entry.request_id)
    return doomed


def clear_suspects(ledger: RequestLedger, request_ids: Iterable[str]) -> list[str]:
    """A step with these requests completed: clear the suspects among them (returned)."""
    cleared = []
    for rid in request_ids:
        entry = ledger.get(rid)
        if entry is not None and entry.suspect:
            entry.suspect = False
            entry.crash_count = 0
            cleared.append(rid)
    return cleared


def crash_message(actor: str, crashes: int) -> str:
    return (
        f"the engine's {actor} crashed {crashes} times while handling this request; "
        "it was failed so that it cannot crash the engine again (poison request)."
    )
