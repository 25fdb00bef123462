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
  crash, precise blame (engine/blame.py) decides: the charged requests go on *probation* in
  groups, and while a group is on probation it runs without any other newcomer (the other
  requests are *held*), so a crash during probation is charged to that group only. A crash
  of a group splits it in halves (bisection), until a request is replayed alone; if it
  crashes alone again it is failed as poison. A group is cleared, and the next one
  admitted, once each of its requests completed a step; the held requests enter when no
  group is left;
* **rebuild**: a new incarnation (:meth:`restart`) or a wake-up starts a new epoch and
  re-adds every open request from the ledger (prompt + the tokens its caller saw),
  recomputed like a preemption;
* **sleep level** and **the KV connector switch**, which must survive restarts.

=====================================  ====================================================
call                                   decision
=====================================  ====================================================
``restart()`` (new incarnation)        charge the steps in flight (+ a dead letter's
                                       request) to Blame; poison -> failures; the charged
                                       -> probation groups (halves of the charged set);
                                       new epoch, new core, rebuild (unless asleep)
``add(request)``                       asleep, closed, aborted or failed: nothing (the
                                       ledger keeps it); on probation: waits for its group;
                                       probation running: held; else into the core
``next_step(draining)``                a step when awake, not draining for sleep, under the
                                       cap, and the core has work (or finished ids to tell
                                       the worker, even in an empty step)
``step_done(epoch, step_id, output)``  older epoch: dropped; else update_from_output; the
                                       step's suspects are cleared; a cleared group lets
                                       the next group (or the held requests) in
``abort`` / ``stop``                   finish the children in the core; an abort of a
                                       request not added yet leaves a tombstone
``sleep(level)`` / ``wake_up()``       no step in flight: drop the core (the KV cache is
                                       freed); wake-up: new epoch, rebuild
=====================================  ====================================================

    >>> from actorllm.engine.ledger import RequestLedger
    >>> from actorllm.engine.blame import Blame
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
from actorllm.core.request import Request, RequestStatus
from actorllm.engine.blame import Blame, poison_message
from actorllm.engine.inflight import InflightSteps

if TYPE_CHECKING:
    from actorllm.core.engine_core_output import EngineCoreOutputs
    from actorllm.core.model_runner_output import ModelRunnerOutput
    from actorllm.core.scheduler import Scheduler
    from actorllm.core.scheduler.kv_connector import KVConnectorMetadata
    from actorllm.core.scheduler_output import SchedulerOutput
    from actorllm.engine.ledger import RequestLedger
    from actorllm.engine.messages import NewRequest

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
    on_probation: list[str]  # the group being replayed
    probation_groups: int  # groups waiting behind it
    held: int  # requests waiting for probation to end
    tombstones: int  # aborted before they were added
    sleep_level: int
    kv_connector_enabled: bool
    steps_done: int


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
        self.sleep_level = 0  # 0 = awake; owner: here
        self.has_connector = has_connector
        self._connector_enabled = kv_connector_enabled  # owner: here (survives rebuilds)
        self.epoch = ledger.epoch  # the epoch of self.core (the ledger owns the counter)
        self.core: Scheduler = make_core()
        self._groups: deque[list[str]] = deque()  # probation: suspects to replay, in order
        self._probing: set[str] = set()  # the front group's members not yet cleared
        self._held: list[str] = []  # innocents waiting for probation to end
        self._failed: set[str] = set()  # failed here, until the ledger closes them
        self._tombstones: set[str] = set()  # aborted before their AddRequest arrived
        self._in_hand: list[str] = []  # a dead letter's requests, charged at restart
        self.steps_done = 0  # lifetime count
        # Tokens scheduled in each recent step, newest last (metrics read the tail).
        self.iteration_tokens: deque[int] = deque(maxlen=4096)

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
        failures = self._charge(in_hand) if in_hand else []
        self._new_epoch()
        return failures

    def _new_epoch(self) -> None:
        self.epoch = self.ledger.new_epoch(self.replica or 0)  # before reading the ledger
        self.core = self._new_core()
        self._probing = set()
        self._held = []
        if self.sleep_level:
            return  # requests wait in the ledger until wake_up
        self._failed = {r for r in self._failed if r in self.ledger}
        self._tombstones = {r for r in self._tombstones if r in self.ledger}
        waiting = {r for group in self._groups for r in group}
        for entry in self.ledger:
            rid = entry.request_id
            if not entry.processed or rid in self._failed or rid in self._tombstones:
                continue
            if self.replica is not None and entry.replica != self.replica:
                continue  # another replica's, or not routed yet
            if rid in waiting:
                continue
            if self._groups:
                self._held.append(rid)
            else:
                self._add_from_ledger(rid)
        self._probe_next()

    def _new_core(self) -> Scheduler:
        self.core.close()  # its steps' results will be dropped: nothing may wait on it
        core = self._make_core()
        if self.has_connector:
            core.set_kv_connector_enabled(self._connector_enabled)
        return core

    def _charge(self, in_hand: list[str]) -> list[Failure]:
        poison = self.blame.crash(SCOPE, in_hand)
        self._failed.update(poison)
        charged = [r for r in dict.fromkeys(in_hand) if self.blame.is_suspect(SCOPE, r)]
        charged = [r for r in charged if r in self.ledger]
        if charged:
            members = set(charged)
            groups = [[r for r in g if r not in members] for g in self._groups]
            half = (len(charged) + 1) // 2
            front = [charged[:half], charged[half:]] if len(charged) > 1 else [charged]
            self._groups = deque(g for g in [*front, *groups] if g)
        return [Failure(rid, poison_message("model step, scheduler or executor")) for rid in poison]

    def _probe_next(self) -> None:
        """Admit the next probation group alone, or the held requests when none is left."""
        while self._groups and not self._probing:
            group = [r for r in self._groups[0] if self._runnable(r)]
            if not group:
                self._groups.popleft()
                continue
            self._groups[0] = group
            self._probing = set(group)
            for rid in group:
                self._add_from_ledger(rid)
        if not self._groups and self._held:
            held, self._held = self._held, []
            for rid in held:
                self._add_from_ledger(rid)

    def _runnable(self, rid: str) -> bool:
        entry = self.ledger.get(rid)
        return (
            entry is not None
            and entry.processed
            and rid not in self._failed
            and any(not c.finished for c in entry.children.values())
        )

    # -- requests -------------------------------------------------------------------------

    def add(self, request: NewRequest) -> Failure | None:
        """A processed request arrived (AddRequest); returns a failure if the core refused it."""
        rid = request.request_id
        if self.sleep_level or rid not in self.ledger or rid in self._failed:
            return None
        if self._tombstones and rid in self._tombstones:
            return None
        if any(rid in g for g in self._groups):
            return None  # on probation: admitted with its group (from the ledger)
        if self._groups:
            if rid not in self._held:
                self._held.append(rid)
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
        )

    def adopt(self, request_ids: Iterable[str]) -> None:
        """Requests moved here from a replica that died: added from the ledger (prompt +
        the tokens their callers saw, recomputed like a preemption)."""
        if self.sleep_level:
            return  # the wake-up rebuild adds them (the ledger routes them here)
        for rid in request_ids:
            if not self._runnable(rid) or rid in self._tombstones:
                continue
            if self._groups:
                if rid not in self._held:
                    self._held.append(rid)
            else:
                self._add_from_ledger(rid)

    def _add_from_ledger(self, rid: str) -> None:
        entry = self.ledger.get(rid)
        if entry is None or entry.prompt_token_ids is None:
            return
        children = [
            (c.child_id, c.params, c.emitted) for c in entry.children.values() if not c.finished
        ]
        failure = self._add(
            rid,
            entry.prompt_token_ids,
            entry.eos_token_id,
            entry.arrival_time,
            entry.priority,
            children,
            entry.cache_salt,
        )
        if failure is not None:  # validated before: only a changed model could refuse it
            self._failed.add(rid)

    def _add(
        self,
        rid: str,
        prompt_token_ids: list[int],
        eos_token_id: int | None,
        arrival_time: float,
        priority: int,
        children: list[tuple[str, Any, list[int]]],
        cache_salt: str | None = None,
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
                    )
                )
            except InvalidRequestError as exc:
                self.fail(rid, [c[0] for c in children])
                return Failure(rid, str(exc))
        return None

    def abort(self, rid: str, child_ids: list[str], status: RequestStatus) -> None:
        """Finish a request's children (abort, failure); a later AddRequest is ignored."""
        if rid in self.ledger:
            self._tombstones.add(rid)
        self.core.finish_requests(child_ids, status)
        self._forget(rid)

    def fail(self, rid: str, child_ids: list[str]) -> None:
        """Failed here: finished in the core now, skipped by rebuilds until it is closed."""
        self._failed.add(rid)
        self.core.finish_requests(child_ids, RequestStatus.FINISHED_ERROR)
        self._forget(rid)

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
            if entry is None or entry.request_id in self._failed:
                continue
            self.fail(entry.request_id, list(entry.children))
            failures.append(Failure(entry.request_id, error))
        return failures

    def stop(self, child_ids: list[str]) -> None:
        """A stop string matched in these children."""
        self.core.finish_requests(child_ids, RequestStatus.FINISHED_STOPPED)

    def _forget(self, rid: str) -> None:
        self.blame.forget(rid)
        if rid in self._probing:
            self._probing.discard(rid)
            if not self._probing:
                self._groups.popleft()
                self._probe_next()
        if rid in self._held:
            self._held.remove(rid)

    # -- steps ----------------------------------------------------------------------------

    def next_step(self, *, draining: bool = False) -> Step | None:
        """The next step to launch, or None (asleep, draining, at the cap, or no work)."""
        core = self.core
        if self.sleep_level or draining or self.inflight.full:
            return None
        if not (core.has_unfinished_requests() or core.has_finished_requests()):
            return None
        so = core.schedule()
        if so.is_empty and not so.finished_req_ids and not so.preempted_req_ids:
            return None  # nothing fits until a step in flight frees blocks
        self.inflight.add(so)
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
        self.inflight.pop(step_id)  # after: a crash in update_from_output charges the step
        self.steps_done += 1
        self.iteration_tokens.append(so.total_num_scheduled_tokens)
        if self._probing or self.blame.has_suspects(SCOPE):
            ran = self._request_ids(so.num_scheduled_tokens)
            self.blame.cleared(SCOPE, ran)
            if self._probing:
                self._probing.difference_update(ran)
                self._probing = {r for r in self._probing if r in self.ledger}
                if not self._probing:
                    self._groups.popleft()
                    self._probe_next()
        return outputs

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
        self.core = self._new_core()

    def wake_up(self) -> None:
        """The worker is awake again: new epoch, rebuilt from the ledger."""
        self.sleep_level = 0
        self._new_epoch()

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
        return AdmissionStatistics(
            epoch=self.epoch,
            inflight_steps=len(self.inflight),
            max_inflight_steps=self.inflight.cap,
            on_probation=sorted(self._probing),
            probation_groups=max(0, len(self._groups) - (1 if self._probing else 0)),
            held=len(self._held),
            tombstones=len(self._tombstones),
            sleep_level=self.sleep_level,
            kv_connector_enabled=self.kv_connector_enabled,
            steps_done=self.steps_done,
        )

    def waiting_children(self) -> Iterator[str]:
        """Children kept out of the core on purpose (probation queue, held requests)."""
        for rid in [*(r for g in self._groups for r in g), *self._held]:
            entry = self.ledger.get(rid)
            if entry is not None and rid not in self._probing:
                yield from entry.children


class _ChildView(NamedTuple):
    child_id: str
    params: Any
    emitted: list[int]


def _children_of(request: NewRequest) -> list[_ChildView]:
    return [_ChildView(c.child_id, c.params, []) for c in request.children]
