"""What admission decides about one request, as data (engine/recovery/probation.py applies
it for engine/recovery/admission.py).

Theory of operation: normally a request is simply *admitted*: it enters the scheduler
core when it arrives (or when a rebuild re-adds it from the ledger), and admission keeps
no record of it. After a core crash, precise blame (engine/recovery/blame.py) charges the requests
that were in hand; they become *suspects* and are replayed in probation groups, one group
at a time (*probing*), while every other request is *held* out of the core, so that a
crash during probation is charged to that group only. A probing request is cleared once
it completed a step; when the whole group is cleared the next group is probed, and the
held requests are admitted when no group is left. A request blamed alone again is failed
as poison; an aborted one is never added again (a late ``AddRequest`` is ignored).

Which call fires which event:

=================  =========================================================================
event              fired by
=================  =========================================================================
``HOLD``           ``add``/``adopt``/a rebuild while a probation group is queued
``ADMIT``          the last probation group cleared: the held requests enter the core
``CHARGE``         ``restart``: blame suspects it (it was in a step in flight, or in the
                   dead letter); the charged set is split in halves, queued first
``PROBE``          its group reached the front of the queue: it runs alone in the core
``CLEAR``          ``step_done``: it completed a step while probing
``RELEASE``        its group's turn came but it has nothing left to run (finished)
``REBUILD``        a new core epoch (``restart``, ``wake_up``): nothing is in the new core,
                   the group being probed is probed again, held requests are re-decided
                   (the other states carry over a rebuild unchanged)
``FAIL``           poison (blamed alone), refused by the core, or its grammar failed
``ABORT``          ``abort``: the router ended it (abort, or a failure found elsewhere)
``CLOSE``          the ledger no longer has it: its record is dropped
=================  =========================================================================

Every change goes through :func:`next_state`, which raises :class:`AdmissionError` on a
move that is not in :data:`TRANSITIONS`. ``python -m actorllm.engine.recovery.admission_states``
prints the table (:func:`format_transitions`).
"""

from __future__ import annotations

import enum
from typing import Final

from actorllm.core.transitions import format_table, lookup


class AdmissionState(enum.Enum):
    # The default: enters the core when it arrives. No record is kept in this state.
    ADMITTED = "admitted"
    SUSPECT = "suspect"  # charged with a crash: waits for its probation group's turn
    PROBING = "probing"  # its group runs alone in the core until each member did a step
    HELD = "held"  # innocent, kept out of the core while a group is on probation
    FAILED = "failed"  # failed here: never added again (until the ledger closes it)
    ABORTED = "aborted"  # ended by the router: a late AddRequest or a rebuild skips it


class AdmissionEvent(enum.Enum):
    HOLD = "hold"
    ADMIT = "admit"
    CHARGE = "charge"
    PROBE = "probe"
    CLEAR = "clear"
    RELEASE = "release"
    REBUILD = "rebuild"
    FAIL = "fail"
    ABORT = "abort"
    CLOSE = "close"


S = AdmissionState
E = AdmissionEvent

# Moves every state that is not final allows.
_ENDINGS: Final = {E.FAIL: S.FAILED, E.ABORT: S.ABORTED, E.CLOSE: S.ADMITTED}

# {state: {event: next state}}.
TRANSITIONS: Final[dict[AdmissionState, dict[AdmissionEvent, AdmissionState]]] = {
    S.ADMITTED: {
        E.HOLD: S.HELD,
        E.CHARGE: S.SUSPECT,
        **_ENDINGS,
    },
    S.SUSPECT: {
        E.PROBE: S.PROBING,
        E.CHARGE: S.SUSPECT,
        E.RELEASE: S.ADMITTED,
        **_ENDINGS,
    },
    S.PROBING: {
        E.CLEAR: S.ADMITTED,
        E.CHARGE: S.SUSPECT,
        E.REBUILD: S.SUSPECT,  # the new core has nothing: its group is probed again
        **_ENDINGS,
    },
    S.HELD: {
        E.ADMIT: S.ADMITTED,
        E.CHARGE: S.SUSPECT,
        E.REBUILD: S.ADMITTED,  # re-decided by the rebuild (held again, or added)
        **_ENDINGS,
    },
    # Final until the ledger closes the request; a second ending changes nothing, except
    # that an abort wins over a failure (both keep it out of the core).
    S.FAILED: {
        E.FAIL: S.FAILED,
        E.ABORT: S.ABORTED,
        E.CLOSE: S.ADMITTED,
    },
    S.ABORTED: {
        E.FAIL: S.ABORTED,
        E.ABORT: S.ABORTED,
        E.CLOSE: S.ADMITTED,
    },
}

del S, E


class AdmissionError(RuntimeError):
    """An event arrived in a state that has no transition for it (a bug in admission)."""


def next_state(state: AdmissionState, event: AdmissionEvent) -> AdmissionState:
    """The state after ``event``; raises :class:`AdmissionError` if the move is not in the
    table."""
    return lookup(TRANSITIONS, state, event, AdmissionError, "admission")


def format_transitions() -> str:
    """The table as aligned text, one ``STATE --EVENT--> STATE`` per line."""
    return format_table(TRANSITIONS)


if __name__ == "__main__":
    print(format_transitions())
