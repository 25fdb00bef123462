"""Each request's admission state and the probation queue: the records that
engine/recovery/admission.py keeps about requests after a core crash.

Theory of operation
-------------------
A request simply admitted has no record. A crash of the core is charged to the requests
in hand (precise blame, engine/recovery/blame.py): a request blamed alone too often is
poison (FAILED); the other charged ones become suspects, split in halves at the front of
the probation queue. The queue's groups are replayed one at a time: the front group is
PROBING (alone in the core) until each member completed a step, while every other request
is HELD out of the core; then the next group goes, and when none is left the held requests
are admitted. Every change of state goes through :meth:`Probation.move`, checked against
the table in engine/recovery/admission_states.py.

This object keeps the records and decides the moves; ``Admission``
(engine/recovery/admission.py) adds requests to the core and finishes them there
(:meth:`Probation.probe_next` calls it back with the requests whose turn came).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, final

from actorllm.engine.recovery.admission_states import AdmissionEvent, AdmissionState, next_state
from actorllm.engine.recovery.blame import Blame
from actorllm.engine.recovery.children import request_ids_of, runnable

if TYPE_CHECKING:
    from actorllm.engine.recovery.ledger import RequestLedger

SCOPE = "core"  # Blame scope of the scheduler, executor and model step

_RECORDED = [s for s in AdmissionState if s is not AdmissionState.ADMITTED]


@final
class Probation:
    """The admission records of one replica (one writer: its Admission)."""

    def __init__(self, ledger: RequestLedger, blame: Blame) -> None:
        self._ledger = ledger
        self._blame = blame
        # {request_id: its admission state}, for every request not simply ADMITTED (the
        # default, which has no record); changed by move only. Insertion order is the
        # order held requests are admitted in.
        self.states: dict[str, AdmissionState] = {}
        self.counts = dict.fromkeys(_RECORDED, 0)  # {state: records in it}
        # The probation queue: groups of suspects in the order they are replayed; the
        # front one is being probed while some member of it is PROBING. A member whose
        # state moved on (failed, aborted, cleared) is skipped when its group's turn comes.
        self.groups: deque[list[str]] = deque()
        self._prune_at = 64  # records beyond which those the ledger closed are dropped
        self._in_hand: list[str] = []  # a dead letter's requests, charged at the next crash

    def state(self, rid: str) -> AdmissionState:
        """The admission state of request ``rid`` (ADMITTED when none is recorded)."""
        return self.states.get(rid, AdmissionState.ADMITTED)

    def move(self, rid: str, event: AdmissionEvent) -> AdmissionState:
        """Apply ``event`` to ``rid`` (checked against the table); returns the old state."""
        states = self.states
        old = states.get(rid, AdmissionState.ADMITTED)
        new = next_state(old, event)
        if new is old:
            return old
        if old is not AdmissionState.ADMITTED:
            self.counts[old] -= 1
            del states[rid]
        if new is not AdmissionState.ADMITTED:
            self.counts[new] += 1
            states[rid] = new
            if len(states) > self._prune_at:
                self.prune()
        return old

    def prune(self) -> None:
        """Drop the records of failed and aborted requests the ledger closed (they stay
        recorded until then, so that no rebuild or late AddRequest adds them). Amortized:
        runs when the records doubled since last time. The other states end by themselves
        (a closed suspect is released at its group's turn, a closed probing member at the
        next step, a closed held one when probation ends)."""
        final = (AdmissionState.FAILED, AdmissionState.ABORTED)
        for rid in [r for r, s in self.states.items() if s in final and r not in self._ledger]:
            self.move(rid, AdmissionEvent.CLOSE)
        self._prune_at = 2 * len(self.states) + 64

    def in_state(self, state: AdmissionState) -> list[str]:
        return [r for r, s in self.states.items() if s is state]

    def note_in_hand(self, request_ids: Iterable[str]) -> None:
        """The scheduler crashed holding a message about these requests."""
        self._in_hand.extend(request_ids)

    def crash(self, child_ids: Iterable[str]) -> list[str]:
        """The core crashed with steps of these children in flight: the crash is charged to
        their requests and those noted in hand. Returns the poison ones (FAILED); the
        suspects among the others go, in halves, to the front of the queue."""
        in_hand = request_ids_of(self._ledger, child_ids)
        in_hand.extend(self._in_hand)
        self._in_hand = []
        return self._charge(in_hand) if in_hand else []

    def _charge(self, in_hand: list[str]) -> list[str]:
        poison = self._blame.crash(SCOPE, in_hand)
        for rid in poison:
            self.move(rid, AdmissionEvent.FAIL)
        charged = [
            r
            for r in dict.fromkeys(in_hand)
            if self._blame.is_suspect(SCOPE, r)
            and r in self._ledger
            and self.state(r) not in (AdmissionState.FAILED, AdmissionState.ABORTED)
        ]
        if charged:
            members = set(charged)
            groups = [[r for r in g if r not in members] for g in self.groups]
            half = (len(charged) + 1) // 2
            front = [charged[:half], charged[half:]] if len(charged) > 1 else [charged]
            self.groups = deque(g for g in [*front, *groups] if g)
            for rid in charged:
                self.move(rid, AdmissionEvent.CHARGE)
        return poison

    def hold(self, rid: str) -> bool:
        """While a probation group is queued, ``rid`` (admitted) is held out of the core:
        True. False: it may enter now."""
        if not self.groups:
            return False
        self.move(rid, AdmissionEvent.HOLD)
        return True

    def rebuild(self) -> None:
        """A new core epoch: nothing is in the core, so the group being probed is probed
        again and the held requests are decided again."""
        for rid in [*self.in_state(AdmissionState.PROBING), *self.in_state(AdmissionState.HELD)]:
            self.move(rid, AdmissionEvent.REBUILD)

    def probe_next(self, add: Callable[[str], None]) -> None:
        """Admit the next probation group alone, or the held requests when none is left:
        ``add`` adds a request to the core from the ledger."""
        while self.groups and not self.counts[AdmissionState.PROBING]:
            group = []
            for rid in self.groups[0]:
                if self.state(rid) is not AdmissionState.SUSPECT:
                    continue  # failed, aborted or closed since it was charged
                if runnable(self._ledger, rid):
                    group.append(rid)
                else:
                    self.move(rid, AdmissionEvent.RELEASE)  # nothing left to replay
            if not group:
                self.groups.popleft()
                continue
            self.groups[0] = group
            for rid in group:
                self.move(rid, AdmissionEvent.PROBE)
            for rid in group:
                add(rid)
        if not self.groups and self.counts[AdmissionState.HELD]:
            for rid in self.in_state(AdmissionState.HELD):
                self.move(rid, AdmissionEvent.ADMIT)
                add(rid)

    def step_ran(self, child_ids: Iterable[str]) -> bool:
        """A step of these children completed: their requests are cleared of blame, and
        those on probation pass (those the ledger closed are dropped). True when that ended
        the group on probation: the caller probes the next."""
        probing = self.counts[AdmissionState.PROBING]
        if not (probing or self._blame.has_suspects(SCOPE)):
            return False
        ran = request_ids_of(self._ledger, child_ids)
        self._blame.cleared(SCOPE, ran)
        if not probing:
            return False
        for rid in ran:
            if self.state(rid) is AdmissionState.PROBING:
                self.move(rid, AdmissionEvent.CLEAR)
        for rid in self.in_state(AdmissionState.PROBING):
            if rid not in self._ledger:
                self.move(rid, AdmissionEvent.CLOSE)
        return self._group_done()

    def ended(self, rid: str, old: AdmissionState) -> bool:
        """``rid`` ended (it was in state ``old``): forgotten by blame. True when it was the
        last member of the group on probation not cleared yet: the caller probes the next."""
        self._blame.forget(rid)
        return old is AdmissionState.PROBING and self._group_done()

    def _group_done(self) -> bool:
        if self.counts[AdmissionState.PROBING]:
            return False
        self.groups.popleft()
        return True

    def waiting(self) -> list[str]:
        """The requests kept out of the core: suspects queued, then held ones."""
        suspects = [r for g in self.groups for r in g if self.state(r) is AdmissionState.SUSPECT]
        return [*dict.fromkeys(suspects), *self.in_state(AdmissionState.HELD)]
