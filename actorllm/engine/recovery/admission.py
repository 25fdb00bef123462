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
  crash, precise blame (engine/recovery/blame.py) puts the charged requests on *probation*, in
  groups replayed one at a time while every other request is *held*; a group that crashes
  again is split in halves, and a request that crashes alone is failed as poison. Each
  request's admission state (admitted, suspect, probing, held, failed, aborted) and every
  move between them is data in engine/recovery/admission_states.py (``format_transitions()``
  prints it, with which call fires which event); :meth:`Admission._move` is the only way
  a state changes, checked against that table;
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
from typing import TYPE_CHECKING, Any, NamedTuple, final

import msgspec

from actorllm.core.errors import InvalidRequestError
from actorllm.core.lora import LoRARequest
from actorllm.core.prompt_embeds import PromptEmbeds
from actorllm.core.request import Request, RequestStatus
from actorllm.engine.actors.messages import ReplicaSchedulerStats
from actorllm.engine.recovery.admission_states import (
    AdmissionError,
    AdmissionEvent,
    AdmissionState,
    format_transitions,
    next_state,
)
from actorllm.engine.recovery.blame import Blame, poison_message
from actorllm.engine.recovery.pause import Pause, PauseMode, PauseStatistics
from actorllm.engine.scheduling.inflight import InflightSteps
from actorllm.engine.scheduling.weight_versions import WeightVersions
from actorllm.worker.sleep_tags import SLEEP_TAGS, to_wake

if TYPE_CHECKING:
    from actorllm.core.engine_core_output import EngineCoreOutputs
    from actorllm.core.model_runner_output import ModelRunnerOutput
    from actorllm.core.scheduler import Scheduler
    from actorllm.core.scheduler.kv_connector import KVConnectorMetadata
    from actorllm.core.scheduler_output import SchedulerOutput
    from actorllm.engine.actors.messages import NewRequest
    from actorllm.engine.recovery.ledger import RequestLedger

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

SCOPE = "core"  # Blame scope of the scheduler, executor and model step


class Failure(NamedTuple):
    """A request to fail for its caller."""

    request_id: str
    reason: str


class Step(NamedTuple):
    """A step to hand to the executor."""

    epoch: int
    scheduler_output: SchedulerOutput
    connector_meta: KVConnectorMetadata | None


class AdmissionStatistics(msgspec.Struct, frozen=True, kw_only=True):
    epoch: int
    inflight_steps: int
    max_inflight_steps: int
    on_probation: list[str]  # the group being replayed (its members not cleared yet)
    probation_groups: int  # groups waiting behind it
    held: int  # requests waiting for probation to end
    tombstones: int  # aborted, kept out of the core until the ledger closes them
    # {state name: requests in it}, every state but ADMITTED (the default, not recorded).
    states: dict[str, int]
    sleep_level: int
    kv_connector_enabled: bool
    steps_done: int
    asleep: list[str] = []  # sleep tags still asleep (a wake-up by tags restores some)
    pause: PauseStatistics | None = None


_RECORDED = [s for s in AdmissionState if s is not AdmissionState.ADMITTED]


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
        self.epoch = ledger.epoch  # the epoch of self.core (the ledger owns the counter)
        self.core: Scheduler = make_core()
        # {request_id: its admission state}, for every request not simply ADMITTED (the
        # default, which has no record); changed by _move only. Insertion order is the
        # order held requests are admitted in.
        self._states: dict[str, AdmissionState] = {}
        self._counts = dict.fromkeys(_RECORDED, 0)  # {state: records in it}
        # The probation queue: groups of suspects in the order they are replayed; the
        # front one is being probed while some member of it is PROBING. A member whose
        # state moved on (failed, aborted, cleared) is skipped when its group's turn comes.
        self._groups: deque[list[str]] = deque()
        self._prune_at = 64  # records beyond which those the ledger closed are dropped
        self._in_hand: list[str] = []  # a dead letter's requests, charged at restart
        self.steps_done = 0  # lifetime count
        # Tokens scheduled in each recent step, newest last (metrics read the tail).
        self.iteration_tokens: deque[int] = deque(maxlen=4096)
        # Published for readers outside the scheduler actor (the waiting-queue bound, read
        # in the caller's task): the child ids running in the core, an immutable tuple the
        # owner replaces in publish() (the actor calls it after each message). Nothing else
        # here may be read from outside: ask the actor (GetStats).
        self.running: tuple[str, ...] = ()
        self._running_stale = False  # the core's running set may have changed since

    # -- admission states -----------------------------------------------------------------

    def state(self, rid: str) -> AdmissionState:
        """The admission state of request ``rid`` (ADMITTED when none is recorded)."""
        return self._states.get(rid, AdmissionState.ADMITTED)

    def _move(self, rid: str, event: AdmissionEvent) -> AdmissionState:
        """Apply ``event`` to ``rid`` (checked against the table); returns the old state."""
        states = self._states
        old = states.get(rid, AdmissionState.ADMITTED)
        new = next_state(old, event)
        if new is old:
            return old
        if old is not AdmissionState.ADMITTED:
            self._counts[old] -= 1
            del states[rid]
        if new is not AdmissionState.ADMITTED:
            self._counts[new] += 1
            states[rid] = new
            if len(states) > self._prune_at:
                self._prune()
        return old

    def _prune(self) -> None:
        """Drop the records of failed and aborted requests the ledger closed (they stay
        recorded until then, so that no rebuild or late AddRequest adds them). Amortized:
        runs when the records doubled since last time. The other states end by themselves
        (a closed suspect is released at its group's turn, a closed probing member at the
        next step, a closed held one when probation ends)."""
        final = (AdmissionState.FAILED, AdmissionState.ABORTED)
        for rid in [r for r, s in self._states.items() if s in final and r not in self.ledger]:
            self._move(rid, AdmissionEvent.CLOSE)
        self._prune_at = 2 * len(self._states) + 64

    def _in_state(self, state: AdmissionState) -> list[str]:
        return [r for r, s in self._states.items() if s is state]

    # -- lifecycle ------------------------------------------------------------------------

    def note_in_hand(self, request_ids: Iterable[str]) -> None:
        """The scheduler crashed holding a message about these requests."""
        self._in_hand.extend(request_ids)

    def restart(self) -> list[Failure]:
        """A new scheduler incarnation: charge the crash, start a new epoch, rebuild."""
        in_hand = self._request_ids(
            c for so in self.inflight.drain() for c in so.num_scheduled_tokens
        )
        in_hand.extend(self._in_hand)
        self._in_hand = []
        self.weight_versions.drain()
        failures = self._charge(in_hand) if in_hand else []
        self._new_epoch()
        return failures

    def _new_epoch(self) -> None:
        self.epoch = self.ledger.new_epoch(self.replica or 0)  # before reading the ledger
        self.core = self._new_core()
        self._running_stale = True
        for rid in [*self._in_state(AdmissionState.PROBING), *self._in_state(AdmissionState.HELD)]:
            self._move(rid, AdmissionEvent.REBUILD)
        if self.sleep_level:
            return  # requests wait in the ledger until wake_up
        if self.pause.paused:
            self.pause.rebuilt = True  # every open request waits for resume
            return
        self._add_all()

    def _add_all(self) -> None:
        """Add every open request of this replica from the ledger (a new epoch)."""
        self._prune()
        for entry in self.ledger:
            rid = entry.request_id
            if not entry.processed:
                continue
            if self.replica is not None and entry.replica != self.replica:
                continue  # another replica's, or not routed yet
            if self.state(rid) is not AdmissionState.ADMITTED:
                continue  # failed, aborted, or waiting for its probation group
            if self._groups:
                self._move(rid, AdmissionEvent.HOLD)
            else:
                self._add_from_ledger(rid)
        self._probe_next()

    def _new_core(self) -> Scheduler:
        self.core.close()  # its steps' results will be dropped: nothing may wait on it
        core = self._make_core()
        core.admit_waiting = self.pause.admits_waiting
        if self.has_connector:
            core.set_kv_connector_enabled(self._connector_enabled)
        return core

    def _charge(self, in_hand: list[str]) -> list[Failure]:
        poison = self.blame.crash(SCOPE, in_hand)
        for rid in poison:
            self._move(rid, AdmissionEvent.FAIL)
        charged = [
            r
            for r in dict.fromkeys(in_hand)
            if self.blame.is_suspect(SCOPE, r)
            and r in self.ledger
            and self.state(r) not in (AdmissionState.FAILED, AdmissionState.ABORTED)
        ]
        if charged:
            members = set(charged)
            groups = [[r for r in g if r not in members] for g in self._groups]
            half = (len(charged) + 1) // 2
            front = [charged[:half], charged[half:]] if len(charged) > 1 else [charged]
            self._groups = deque(g for g in [*front, *groups] if g)
            for rid in charged:
                self._move(rid, AdmissionEvent.CHARGE)
        return [Failure(rid, poison_message("model step, scheduler or executor")) for rid in poison]

    def _probe_next(self) -> None:
        """Admit the next probation group alone, or the held requests when none is left."""
        while self._groups and not self._counts[AdmissionState.PROBING]:
            group = []
            for rid in self._groups[0]:
                if self.state(rid) is not AdmissionState.SUSPECT:
                    continue  # failed, aborted or closed since it was charged
                if self._runnable(rid):
                    group.append(rid)
                else:
                    self._move(rid, AdmissionEvent.RELEASE)  # nothing left to replay
            if not group:
                self._groups.popleft()
                continue
            self._groups[0] = group
            for rid in group:
                self._move(rid, AdmissionEvent.PROBE)
            for rid in group:
                self._add_from_ledger(rid)
        if not self._groups and self._counts[AdmissionState.HELD]:
            for rid in self._in_state(AdmissionState.HELD):
                self._move(rid, AdmissionEvent.ADMIT)
                self._add_from_ledger(rid)

    def _runnable(self, rid: str) -> bool:
        """Processed, still in the ledger, with a child left to run."""
        entry = self.ledger.get(rid)
        return (
            entry is not None
            and entry.processed
            and any(not c.finished for c in entry.children.values())
        )

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
        if self._states and rid in self._states:
            return None  # suspect, probing, held, failed or aborted: not now
        if self.pause.paused:
            self.pause.park(rid)  # added at resume
            return None
        if self._groups:
            self._move(rid, AdmissionEvent.HOLD)
            return None
        children = [(c.child_id, c.params, c.emitted) for c in _children_of(request)]
        return self._add(
            rid,
            request.prompt_token_ids,
            request.eos_token_id,
            request.arrival_time,
            request.priority,
            children,
            request.cache_salt,
            request.lora_request,
            request.prompt_embeds,
        )

    def adopt(self, request_ids: Iterable[str]) -> None:
        """Requests moved here from a replica that died: added from the ledger (prompt +
        the tokens their callers saw, recomputed like a preemption)."""
        if self.sleep_level:
            return  # the wake-up rebuild adds them (the ledger routes them here)
        for rid in request_ids:
            if self.state(rid) is not AdmissionState.ADMITTED or not self._runnable(rid):
                continue
            if self.pause.paused:
                self.pause.park(rid)
            elif self._groups:
                self._move(rid, AdmissionEvent.HOLD)
            else:
                self._add_from_ledger(rid)

    def _add_from_ledger(self, rid: str) -> None:
        entry = self.ledger.get(rid)
        if entry is None or entry.prompt_token_ids is None:
            return
        children = [
            (c.child_id, c.params, c.emitted) for c in entry.children.values() if not c.finished
        ]
        self._add(
            rid,
            entry.prompt_token_ids,
            entry.eos_token_id,
            entry.arrival_time,
            entry.priority,
            children,
            entry.cache_salt,
            entry.lora_request,
            entry.prompt_embeds,
        )  # validated before: only a changed model could refuse it (then it is FAILED)

    def _add(
        self,
        rid: str,
        prompt_token_ids: list[int],
        eos_token_id: int | None,
        arrival_time: float,
        priority: int,
        children: list[tuple[str, Any, list[int]]],
        cache_salt: str | None = None,
        lora_request: LoRARequest | None = None,
        prompt_embeds: PromptEmbeds | None = None,
    ) -> Failure | None:
        core = self.core
        for child_id, params, emitted in children:
            if core.get_request(child_id) is not None:
                continue
            try:
                core.add_request(
                    Request(
                        child_id,
                        prompt_token_ids,
                        params,
                        eos_token_id=eos_token_id,
                        arrival_time=arrival_time,
                        priority=priority,
                        output_token_ids=emitted,
                        cache_salt=cache_salt,
                        lora_request=lora_request,
                        prompt_embeds=prompt_embeds,
                    )
                )
            except InvalidRequestError as exc:
                self.fail(rid, [c[0] for c in children])
                return Failure(rid, str(exc))
        return None

    def abort(self, rid: str, child_ids: list[str], status: RequestStatus) -> None:
        """Finish a request's children (abort, failure); a later AddRequest is ignored."""
        event = AdmissionEvent.ABORT if rid in self.ledger else AdmissionEvent.CLOSE
        old = self._move(rid, event)
        self.pause.forget(rid)
        self.core.finish_requests(child_ids, status)
        self._running_stale = True
        self._forget(rid, old)

    def fail(self, rid: str, child_ids: list[str]) -> None:
        """Failed here: finished in the core now, skipped by rebuilds until it is closed."""
        old = self._move(rid, AdmissionEvent.FAIL)
        self.pause.forget(rid)
        self.core.finish_requests(child_ids, RequestStatus.FINISHED_ERROR)
        self._running_stale = True
        self._forget(rid, old)

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

    def _forget(self, rid: str, old: AdmissionState) -> None:
        """``rid`` ended here (it was in state ``old``): the next probation group goes when
        it was the last member of its group not cleared yet."""
        self.blame.forget(rid)
        if old is AdmissionState.PROBING and not self._counts[AdmissionState.PROBING]:
            self._groups.popleft()
            self._probe_next()

    # -- steps ----------------------------------------------------------------------------

    def next_step(self, *, draining: bool = False) -> Step | None:
        """The next step to launch, or None (asleep, draining, at the cap, or no work)."""
        core = self.core
        if self.sleep_level or draining or self.inflight.full:
            return None
        if not self.pause.schedules_running:
            return None  # paused with mode keep: every request frozen where it stands
        if not (core.has_unfinished_requests() or core.has_finished_requests()):
            return None
        so = core.schedule()
        self._running_stale = True
        if so.is_empty and not so.finished_req_ids and not so.preempted_req_ids:
            return None  # nothing fits until a step in flight frees blocks
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
        self.iteration_tokens.append(so.total_num_scheduled_tokens)
        probing = self._counts[AdmissionState.PROBING]
        if probing or self.blame.has_suspects(SCOPE):
            ran = self._request_ids(so.num_scheduled_tokens)
            self.blame.cleared(SCOPE, ran)
            if probing:
                self._clear_probing(ran)
        return outputs

    def _clear_probing(self, ran: list[str]) -> None:
        """Members of the group on probation that completed a step are cleared (and those
        the ledger closed are forgotten); the next group goes once none is left."""
        for rid in ran:
            if self.state(rid) is AdmissionState.PROBING:
                self._move(rid, AdmissionEvent.CLEAR)
        for rid in self._in_state(AdmissionState.PROBING):
            if rid not in self.ledger:
                self._move(rid, AdmissionEvent.CLOSE)
        if not self._counts[AdmissionState.PROBING]:
            self._groups.popleft()
            self._probe_next()

    def _request_ids(self, child_ids: Iterable[str]) -> list[str]:
        ids = []
        for child_id in child_ids:
            entry = self.ledger.entry_of_child(child_id)
            if entry is not None:
                ids.append(entry.request_id)
        return list(dict.fromkeys(ids))

    # -- sleep and the connector ----------------------------------------------------------

    def sleep(self, level: int) -> None:
        """The worker freed its memory (no step in flight): the core's blocks are gone."""
        assert not self.inflight, "sleep with steps in flight"
        self.sleep_level = level
        self.asleep = frozenset(SLEEP_TAGS)
        self.core = self._new_core()
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
        for rid in parked:
            if self.state(rid) is not AdmissionState.ADMITTED or not self._runnable(rid):
                continue  # ended, or charged/held by a crash since
            if self._groups:
                self._move(rid, AdmissionEvent.HOLD)
            else:
                self._add_from_ledger(rid)

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
        probing = self._in_state(AdmissionState.PROBING)
        return AdmissionStatistics(
            epoch=self.epoch,
            inflight_steps=len(self.inflight),
            max_inflight_steps=self.inflight.cap,
            on_probation=sorted(probing),
            probation_groups=max(0, len(self._groups) - (1 if probing else 0)),
            held=self._counts[AdmissionState.HELD],
            tombstones=self._counts[AdmissionState.ABORTED],
            states={s.name: n for s, n in self._counts.items()},
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
            iteration_tokens=list(self.iteration_tokens),
            is_sleeping=self.sleep_level > 0,
            kv_connector_enabled=self.kv_connector_enabled,
        )

    def waiting_children(self) -> Iterator[str]:
        """Children kept out of the core on purpose (probation queue, held requests,
        requests parked while paused: all of them after a rebuild while paused)."""
        if self.pause.rebuilt:
            for open_entry in self.ledger:
                if open_entry.processed and self.replica in (None, open_entry.replica):
                    yield from open_entry.children
            return
        suspects = [r for g in self._groups for r in g if self.state(r) is AdmissionState.SUSPECT]
        held = self._in_state(AdmissionState.HELD)
        for rid in [*dict.fromkeys(suspects), *held, *self.pause.parked]:
            entry = self.ledger.get(rid)
            if entry is not None:
                yield from entry.children


class _ChildView(NamedTuple):
    child_id: str
    params: Any
    emitted: list[int]


def _children_of(request: NewRequest) -> list[_ChildView]:
    return [_ChildView(c.child_id, c.params, []) for c in request.children]
