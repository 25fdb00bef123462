"""``Admission``: what the scheduler actor decides, as plain calls (no anyio, no I/O).

Theory of operation
-------------------
The scheduler actor is a switchboard; everything it decides lives here, in one object that
outlives every scheduler incarnation (the engine keeps it):

* **the core**: the ``Scheduler`` of the current core epoch, replaced on every rebuild;
* **the steps in flight** (:class:`InflightSteps`, one structure with one cap: 1, or 2 under
  async scheduling): handed to the executor, not yet done. After a crash they are exactly
  the requests "in hand", charged with the crash;
* **admission**: which requests enter the core. Normally all of them, at once. After a core
  crash, the charged requests are replayed on *probation* while every other request is
  *held* (engine/recovery/probation.py keeps each request's admission state and the
  probation queue; engine/recovery/admission_states.py is the table of its moves);
* **rebuild**: a new incarnation (:meth:`restart`) or a wake-up starts a new epoch and
  re-adds every open request from the ledger (prompt + the tokens its caller saw),
  recomputed like a preemption;
* **sleep level** (and which parts still sleep: wake-up by tags), **the pause**
  (engine/recovery/pause.py: its mode, the requests parked while paused) and **the KV
  connector switch**, which must survive restarts.

Besides admission, a step is launched (:meth:`next_step`) when awake, not draining for
sleep, under the in-flight cap, and the core has work (or finished ids to tell the worker,
even in an empty step); a step of an older epoch is dropped when it completes
(:meth:`step_done`); sleep drops the core (no step in flight: the KV cache is freed).

    >>> from actorllm.engine.recovery.ledger import RequestLedger
    >>> from actorllm.engine.recovery.blame import Blame
    >>> adm = Admission(RequestLedger(), Blame(), make_core=lambda: None, max_inflight=1)
    >>> adm.statistics().inflight_steps, adm.statistics().sleep_level
    (0, 0)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, final

import msgspec

from actorllm.core.errors import InvalidRequestError
from actorllm.core.request import RequestStatus
from actorllm.engine.actors.messages import ReplicaSchedulerStats
from actorllm.engine.recovery.admission_states import (
    AdmissionError,
    AdmissionEvent,
    AdmissionState,
    format_transitions,
)
from actorllm.engine.recovery.admission_types import AdmissionStatistics, Failure, Step
from actorllm.engine.recovery.blame import Blame, poison_message
from actorllm.engine.recovery.children import (
    ChildView,
    children_of,
    core_request,
    open_children,
    replica_entries,
    runnable,
)
from actorllm.engine.recovery.pause import Pause, PauseMode
from actorllm.engine.recovery.probation import SCOPE, Probation
from actorllm.engine.scheduling.inflight import InflightSteps
from actorllm.engine.scheduling.weight_versions import WeightVersions
from actorllm.worker.sleep_tags import sleep_parts, to_wake

if TYPE_CHECKING:
    from actorllm.core.engine_core_output import EngineCoreOutputs
    from actorllm.core.model_runner_output import ModelRunnerOutput
    from actorllm.core.scheduler import Scheduler
    from actorllm.core.scheduler_output import SchedulerOutput
    from actorllm.engine.actors.messages import NewRequest
    from actorllm.engine.recovery.ledger import LedgerEntry, RequestLedger

__all__ = [
    "SCOPE",
    "Admission",
    "AdmissionError",
    "AdmissionEvent",
    "AdmissionState",
    "AdmissionStatistics",
    "Failure",
    "Step",
    "format_transitions",
]


@final
class Admission:
    """See the module docstring. Owned by the scheduler actor (one writer, the actor's
    handlers); the dead-letter policy only calls :meth:`note_in_hand`."""

    def __init__(
        self,
        ledger: RequestLedger,
        blame: Blame,
        *,
        make_core: Callable[[], Any],
        max_inflight: int,
        has_connector: bool = False,
        kv_connector_enabled: bool = True,
        replica: int | None = None,
    ) -> None:
        self.ledger = ledger
        # The data-parallel replica whose requests this core runs (ledger entries routed to
        # it); None: the engine's only core, which runs every processed request.
        self.replica = replica
        self.blame = blame
        self._make_core = make_core
        self.inflight = InflightSteps(max_inflight)  # owner: here
        self.weight_versions = WeightVersions()  # owner: here (each step's weight version)
        self.sleep_level = 0  # 0 = awake; owner: here
        self.asleep: frozenset[str] = frozenset()  # sleep tags still asleep; owner: here
        self.pause = Pause()  # owner: here (survives restarts)
        self.has_connector = has_connector
        self._connector_enabled = kv_connector_enabled  # owner: here (survives rebuilds)
        self.pinned_loras: frozenset[str] = frozenset()  # the workers' pinned adapters
        self.epoch = ledger.epoch  # the epoch of self.core (the ledger owns the counter)
        self.core: Scheduler = make_core()
        # Each request's admission state and the probation queue; owner: here.
        self._probation = Probation(ledger, blame)
        self.steps_done = 0  # lifetime count
        # vLLM's iteration tokens of each recent step that produced outputs, newest last
        # (EngineCoreOutputs.iteration_tokens), and how many such steps ran in all: metrics
        # read the tail they have not seen.
        self.iteration_tokens: deque[int] = deque(maxlen=4096)
        self.iterations_done = 0
        # Published for readers outside the scheduler actor (the waiting-queue bound, read
        # in the caller's task): the child ids running in the core, an immutable tuple the
        # owner replaces in publish() (the actor calls it after each message). Nothing else
        # here may be read from outside: ask the actor (GetStats).
        self.running: tuple[str, ...] = ()
        self._running_stale = False  # the core's running set may have changed since
        # A scheduled step with no tokens that only tells the worker which requests finished,
        # held while another step is in flight: its ids ride on the next step (or it goes
        # alone once nothing is in flight). Launched, it would take an in-flight slot, and
        # a request arriving just after a batch ended would wait a whole step for it.
        self._held: SchedulerOutput | None = None  # owner: here; of self.epoch's core

    # -- lifecycle ------------------------------------------------------------------------

    def state(self, rid: str) -> AdmissionState:
        """The admission state of request ``rid`` (ADMITTED when none is recorded)."""
        return self._probation.state(rid)

    def note_in_hand(self, request_ids: Iterable[str]) -> None:
        """The scheduler crashed holding a message about these requests."""
        self._probation.note_in_hand(request_ids)

    def restart(self) -> list[Failure]:
        """A new scheduler incarnation: charge the crash, start a new epoch, rebuild."""
        steps = self.inflight.drain()
        self.weight_versions.drain()
        poison = self._probation.crash(c for so in steps for c in so.num_scheduled_tokens)
        self._new_epoch()
        return [Failure(rid, poison_message("model step, scheduler or executor")) for rid in poison]

    def _new_epoch(self) -> None:
        self.epoch = self.ledger.new_epoch(self.replica or 0)  # before reading the ledger
        self.core = self._new_core()
        self._held = None  # the worker forgets every request of the old epoch anyway
        self._running_stale = True
        self._probation.rebuild()
        if self.sleep_level:
            return  # requests wait in the ledger until wake_up
        if self.pause.paused:
            self.pause.rebuilt = True  # every open request waits for resume
            return
        self._add_all()

    def _add_all(self) -> None:
        """Add every open request of this replica from the ledger (a new epoch)."""
        self._probation.prune()
        for entry in replica_entries(self.ledger, self.replica):
            if self.state(entry.request_id) is AdmissionState.ADMITTED:
                self._enter(entry.request_id)  # else failed, aborted, or waiting for its group
        self._probation.probe_next(self._add_from_ledger)

    def _new_core(self) -> Scheduler:
        self.core.close()  # its steps' results will be dropped: nothing may wait on it
        core = self._make_core()
        core.admit_waiting = self.pause.admits_waiting
        core.pin_loras(self.pinned_loras)
        if self.has_connector:
            core.set_kv_connector_enabled(self._connector_enabled)
        return core

    def pin_loras(self, names: frozenset[str]) -> None:
        """The adapters pinned on the workers (they hold slots in every step's count),
        kept for every core rebuilt after."""
        self.pinned_loras = names
        self.core.pin_loras(names)

    # -- requests -------------------------------------------------------------------------

    def add(self, request: NewRequest) -> Failure | None:
        """A processed request arrived (AddRequest); returns a failure if the core refused it.

        Asleep or closed: nothing (the ledger keeps it, a rebuild adds it). Failed or
        aborted: ignored. A suspect waits for its group (which is added from the ledger);
        a held request stays held; while a probation group is queued a new one is held;
        else it enters the core."""
        rid = request.request_id
        if self.sleep_level or rid not in self.ledger:
            return None
        if self.state(rid) is not AdmissionState.ADMITTED:
            return None  # suspect, probing, held, failed or aborted: not now
        if self.pause.paused:
            self.pause.park(rid)  # added at resume
            return None
        if self._probation.hold(rid):
            return None
        return self._add(rid, request, children_of(request))

    def adopt(self, request_ids: Iterable[str]) -> None:
        """Requests moved here from a replica that died: added from the ledger (prompt +
        the tokens their callers saw, recomputed like a preemption)."""
        if self.sleep_level:
            return  # the wake-up rebuild adds them (the ledger routes them here)
        for rid in request_ids:
            if self.state(rid) is AdmissionState.ADMITTED and runnable(self.ledger, rid):
                self._enter(rid)

    def _enter(self, rid: str) -> None:
        """``rid`` (admitted) enters the core from the ledger, unless it is parked while
        paused or held while a probation group is queued."""
        if self.pause.paused:
            self.pause.park(rid)
        elif not self._probation.hold(rid):
            self._add_from_ledger(rid)

    def _add_from_ledger(self, rid: str) -> None:
        entry = self.ledger.get(rid)
        if entry is None or entry.prompt_token_ids is None:
            return
        # Validated before: only a changed model could refuse it (then it is FAILED).
        self._add(rid, entry, open_children(entry))

    def _add(
        self, rid: str, parent: NewRequest | LedgerEntry, children: list[ChildView]
    ) -> Failure | None:
        core = self.core
        for child in children:
            if core.get_request(child.child_id) is not None:
                continue
            try:
                core.add_request(core_request(parent, child))
            except InvalidRequestError as exc:
                self.fail(rid, [c.child_id for c in children])
                return Failure(rid, str(exc))
        return None

    def abort(self, rid: str, child_ids: list[str], status: RequestStatus) -> None:
        """Finish a request's children (abort, failure); a later AddRequest is ignored."""
        event = AdmissionEvent.ABORT if rid in self.ledger else AdmissionEvent.CLOSE
        self._end(rid, event, child_ids, status)

    def fail(self, rid: str, child_ids: list[str]) -> None:
        """Failed here: finished in the core now, skipped by rebuilds until it is closed."""
        self._end(rid, AdmissionEvent.FAIL, child_ids, RequestStatus.FINISHED_ERROR)

    def _end(
        self, rid: str, event: AdmissionEvent, child_ids: list[str], status: RequestStatus
    ) -> None:
        """``rid`` ended here (``event``): its children finish in the core; the next
        probation group goes when it was the last member of its group not cleared yet."""
        old = self._probation.move(rid, event)
        self.pause.forget(rid)
        self.core.finish_requests(child_ids, status)
        self._running_stale = True
        if self._probation.ended(rid, old):
            self._probation.probe_next(self._add_from_ledger)

    def poll_grammars(self) -> list[Failure]:
        """Admit the requests whose structured-outputs grammar compiled; fail those whose
        compile failed (the core finished them)."""
        core = self.core
        if self.sleep_level:
            return []
        if core.has_waiting_for_grammar():
            core.poll_grammars()
        failures = []
        for child_id, error in core.take_grammar_failures():
            entry = self.ledger.entry_of_child(child_id)
            if entry is None or self.state(entry.request_id) is AdmissionState.FAILED:
                continue
            self.fail(entry.request_id, list(entry.children))
            failures.append(Failure(entry.request_id, error))
        return failures

    def stop(self, child_ids: list[str]) -> None:
        """A stop string matched in these children."""
        self.core.finish_requests(child_ids, RequestStatus.FINISHED_STOPPED)
        self._running_stale = True

    # -- steps ----------------------------------------------------------------------------

    def next_step(self, *, draining: bool = False) -> Step | None:
        """The next step to launch, or None (asleep, draining, at the cap, or no work)."""
        core = self.core
        if self.sleep_level or draining or self.inflight.full:
            return None
        if not self.pause.schedules_running:
            return None  # paused with mode keep: every request frozen where it stands
        held, self._held = self._held, None
        if core.has_unfinished_requests() or core.has_finished_requests():
            so = core.schedule()
            self._running_stale = True
            if held is not None:  # the held ids ride on this step
                so = msgspec.structs.replace(
                    so, finished_req_ids=held.finished_req_ids + so.finished_req_ids
                )
        elif held is not None:
            so = held
        else:
            return None
        if so.is_empty and not so.finished_req_ids and not so.preempted_req_ids:
            return None  # nothing fits until a step in flight frees blocks
        if so.is_empty and not so.preempted_req_ids and self.inflight:
            self._held = so  # finished ids only, a step in flight: not worth a slot
            return None
        self.inflight.add(so)
        self.weight_versions.launched(so.step_id)
        return Step(self.epoch, so, core.take_connector_metadata())

    def step_done(
        self, epoch: int, step_id: int, output: ModelRunnerOutput
    ) -> EngineCoreOutputs | None:
        """Apply a finished step; None when it belongs to an older epoch."""
        if epoch != self.epoch:
            return None  # computed before a rebuild: its requests are being recomputed
        so = self.inflight.get(step_id)
        if so is None:
            return None
        outputs = self.core.update_from_output(so, output)
        self._running_stale = True
        self.inflight.pop(step_id)  # after: a crash in update_from_output charges the step
        version = self.weight_versions.done(step_id)
        if outputs is not None and outputs.outputs:
            outputs = msgspec.structs.replace(outputs, weight_version=version)
        self.steps_done += 1
        if outputs is not None and outputs.outputs:  # vLLM counts the steps with outputs
            self.iterations_done += 1
            self.iteration_tokens.append(outputs.iteration_tokens)
        if self._probation.step_ran(so.num_scheduled_tokens):
            self._probation.probe_next(self._add_from_ledger)
        return outputs

    # -- sleep and the connector ----------------------------------------------------------

    def sleep(self, level: int, tags: list[str] | None = None) -> None:
        """The worker freed its memory (no step in flight; ``tags``: what it freed, None:
        everything): the core's blocks are gone either way."""
        assert not self.inflight, "sleep with steps in flight"
        self.sleep_level = level
        self.asleep = sleep_parts(tags)
        self.core = self._new_core()
        self._held = None  # waking up starts a new epoch: the worker forgets them all
        self._running_stale = True

    def wake_up(self, tags: list[str] | None = None) -> bool:
        """The worker restored what ``tags`` names (None: everything); once nothing sleeps
        any more: new epoch, rebuilt from the ledger. Returns whether it is fully awake."""
        if not self.sleep_level:
            return True
        self.asleep -= to_wake(self.asleep, tags)
        if self.asleep:
            return False  # steps wait for the rest (e.g. the KV cache after the weights)
        self.sleep_level = 0
        self._new_epoch()
        return True

    # -- pause (engine/recovery/pause.py) -------------------------------------------------

    def pause_generation(self, mode: PauseMode) -> None:
        """Pause: new requests are parked; under ``keep`` no step is launched, else the
        running ones go on (the control plane aborted every request first for ``abort``)."""
        self.pause.pause(mode)
        self.core.admit_waiting = False

    def pause_complete(self) -> bool:
        """No step in flight and, unless frozen (``keep``), nothing running in the core."""
        if not self.pause.paused or self.inflight:
            return False
        return not self.pause.schedules_running or not self.core.running

    def resume_generation(self) -> None:
        """Leave the pause: parked requests enter the core in arrival order (the whole
        ledger when a core epoch began while paused); frozen ones go on."""
        if not self.pause.paused:
            return
        parked, rebuilt = self.pause.resume()
        self.core.admit_waiting = True
        self._running_stale = True
        if self.sleep_level:
            return  # the wake-up's rebuild adds every request
        if rebuilt:
            self._add_all()
            return
        for rid in parked:  # unless ended, or charged/held by a crash since
            if self.state(rid) is AdmissionState.ADMITTED and runnable(self.ledger, rid):
                self._enter(rid)

    @property
    def kv_connector_enabled(self) -> bool:
        return self.has_connector and self._connector_enabled

    def set_kv_connector_enabled(self, enabled: bool) -> None:
        if not self.has_connector:
            raise InvalidRequestError(
                "no KV connector is configured (start the engine with kv_connector='offload').",
                param="enabled",
            )
        self._connector_enabled = enabled
        self.core.set_kv_connector_enabled(enabled)

    def statistics(self) -> AdmissionStatistics:
        probation = self._probation
        probing = probation.in_state(AdmissionState.PROBING)
        return AdmissionStatistics(
            epoch=self.epoch,
            inflight_steps=len(self.inflight),
            max_inflight_steps=self.inflight.cap,
            on_probation=sorted(probing),
            probation_groups=max(0, len(probation.groups) - (1 if probing else 0)),
            held=probation.counts[AdmissionState.HELD],
            tombstones=probation.counts[AdmissionState.ABORTED],
            states={s.name: n for s, n in probation.counts.items()},
            sleep_level=self.sleep_level,
            kv_connector_enabled=self.kv_connector_enabled,
            steps_done=self.steps_done,
            asleep=sorted(self.asleep),
            pause=self.pause.statistics(),
        )

    def publish(self) -> None:
        """Replace :attr:`running` when the core's running set may have changed (after a
        schedule, a step, a finish or a rebuild); O(running), once per such message."""
        if self._running_stale:
            self._running_stale = False
            self.running = tuple(r.request_id for r in self.core.running)

    def replica_stats(self) -> ReplicaSchedulerStats:
        """``GetStats``'s answer: the core's figures and this object's own."""
        return ReplicaSchedulerStats(
            core=self.core.statistics(),
            steps_done=self.steps_done,
            iterations_done=self.iterations_done,
            iteration_tokens=list(self.iteration_tokens),
            is_sleeping=self.sleep_level > 0,
            kv_connector_enabled=self.kv_connector_enabled,
        )

    def waiting_children(self) -> Iterator[str]:
        """Children kept out of the core on purpose (probation queue, held requests,
        requests parked while paused: all of them after a rebuild while paused)."""
        if self.pause.rebuilt:
            for open_entry in replica_entries(self.ledger, self.replica):
                yield from open_entry.children
            return
        for rid in [*self._probation.waiting(), *self.pause.parked]:
            entry = self.ledger.get(rid)
            if entry is not None:
                yield from entry.children
