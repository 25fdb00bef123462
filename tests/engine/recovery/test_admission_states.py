"""Admission states as data (engine/recovery/admission_states.py): the printed table, illegal moves,
and the per-state counts ``Admission.statistics()`` reports."""

from __future__ import annotations

import pytest

from actorllm.core.request import RequestStatus
from actorllm.engine.recovery.admission import (
    AdmissionError,
    AdmissionEvent,
    AdmissionState,
    format_transitions,
)
from actorllm.engine.recovery.admission_states import TRANSITIONS, next_state
from tests.engine.recovery.test_admission import engine, open_request

TABLE = """\
ADMITTED --HOLD--> HELD
ADMITTED --CHARGE--> SUSPECT
ADMITTED --FAIL--> FAILED
ADMITTED --ABORT--> ABORTED
ADMITTED --CLOSE--> ADMITTED
SUSPECT  --PROBE--> PROBING
SUSPECT  --CHARGE--> SUSPECT
SUSPECT  --RELEASE--> ADMITTED
SUSPECT  --FAIL--> FAILED
SUSPECT  --ABORT--> ABORTED
SUSPECT  --CLOSE--> ADMITTED
PROBING  --CLEAR--> ADMITTED
PROBING  --CHARGE--> SUSPECT
PROBING  --REBUILD--> SUSPECT
PROBING  --FAIL--> FAILED
PROBING  --ABORT--> ABORTED
PROBING  --CLOSE--> ADMITTED
HELD     --ADMIT--> ADMITTED
HELD     --CHARGE--> SUSPECT
HELD     --REBUILD--> ADMITTED
HELD     --FAIL--> FAILED
HELD     --ABORT--> ABORTED
HELD     --CLOSE--> ADMITTED
FAILED   --FAIL--> FAILED
FAILED   --ABORT--> ABORTED
FAILED   --CLOSE--> ADMITTED
ABORTED  --FAIL--> ABORTED
ABORTED  --ABORT--> ABORTED
ABORTED  --CLOSE--> ADMITTED"""


def test_the_transition_table_prints_as_documented():
    assert format_transitions() == TABLE


def test_every_state_is_in_the_table_and_the_endings_reach_every_live_state():
    assert set(TRANSITIONS) == set(AdmissionState)
    for state in (AdmissionState.ADMITTED, AdmissionState.SUSPECT, AdmissionState.HELD):
        assert next_state(state, AdmissionEvent.ABORT) is AdmissionState.ABORTED


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (AdmissionState.ADMITTED, AdmissionEvent.PROBE),  # only a suspect is probed
        (AdmissionState.HELD, AdmissionEvent.CLEAR),  # only a probing request is cleared
        (AdmissionState.FAILED, AdmissionEvent.HOLD),  # a failed request never comes back
        (AdmissionState.ABORTED, AdmissionEvent.CHARGE),
    ],
)
def test_an_illegal_transition_raises(state, event):
    with pytest.raises(AdmissionError, match=f"from {state.name} on {event.name}"):
        next_state(state, event)


def test_admission_checks_every_change_against_the_table():
    adm, ledger = engine()
    open_request(adm, ledger, "a")
    adm.abort("a", ["a"], RequestStatus.FINISHED_ABORTED)
    assert adm.state("a") is AdmissionState.ABORTED
    with pytest.raises(AdmissionError):
        adm._probation.move("a", AdmissionEvent.PROBE)
    assert adm.state("a") is AdmissionState.ABORTED  # unchanged by the refused move


def test_statistics_count_requests_per_state():
    adm, ledger = engine()
    for i in range(4):
        open_request(adm, ledger, f"r{i}")
    assert adm.next_step() is not None
    adm.restart()  # the step's four requests are charged: two groups of two
    open_request(adm, ledger, "late")
    stats = adm.statistics()
    assert stats.states == {"SUSPECT": 2, "PROBING": 2, "HELD": 1, "FAILED": 0, "ABORTED": 0}
    assert (stats.held, stats.on_probation, stats.probation_groups) == (1, ["r0", "r1"], 1)


def test_aborted_requests_are_forgotten_once_the_ledger_closes_them():
    adm, ledger = engine()
    for i in range(200):
        open_request(adm, ledger, f"r{i}")
        adm.abort(f"r{i}", [f"r{i}"], RequestStatus.FINISHED_ABORTED)
        ledger.close(f"r{i}")  # the output processor ends it
    assert adm.statistics().tombstones < 100  # pruned as they pile up, not kept forever


def test_the_running_set_is_what_the_owner_last_published():
    adm, ledger = engine()
    open_request(adm, ledger, "a")
    assert adm.next_step() is not None
    assert adm.running == ()  # readers see the last published value, never the core
    adm.publish()
    assert adm.running == ("a",)
    published = adm.running
    adm.abort("a", ["a"], RequestStatus.FINISHED_ABORTED)
    assert adm.running is published  # unchanged until the owner publishes again
    adm.publish()
    assert adm.running == ()


def test_get_stats_answer_carries_the_admission_figures():
    adm, ledger = engine()
    open_request(adm, ledger, "a")
    assert adm.next_step() is not None
    stats = adm.replica_stats()
    assert stats.core.num_running_reqs == 1 and stats.steps_done == 0
    assert (stats.is_sleeping, stats.kv_connector_enabled, stats.iteration_tokens) == (
        False,
        False,
        [],
    )


def _check_invariants(adm) -> None:
    states = adm._probation.states
    for state in AdmissionState:
        if state is not AdmissionState.ADMITTED:
            assert adm._probation.counts[state] == sum(1 for s in states.values() if s is state)
    probing = {r for r, s in states.items() if s is AdmissionState.PROBING}
    if probing:
        assert probing <= set(adm._probation.groups[0])  # only the front group is probed
    elif not adm.sleep_level:
        assert not adm._probation.groups  # awake: a queued group is always being probed
    kept_out = {r for r, s in states.items() if s in (AdmissionState.SUSPECT, AdmissionState.HELD)}
    assert not kept_out & set(adm.core.requests)  # suspects and held wait outside the core


@pytest.mark.parametrize("seed", range(25))
def test_random_crashes_aborts_and_sleeps_keep_the_states_consistent(seed):
    import random

    from tests.core.scheduler.sched_helpers import FakeWorker
    from tests.engine.recovery.test_admission import BLOCK, deliver

    rng = random.Random(seed)
    adm, ledger = engine(max_inflight=rng.choice([1, 2]))
    worker, steps, n = FakeWorker(BLOCK), [], 0
    for _ in range(300):
        op = rng.random()
        if op < 0.15 and n < 30:
            open_request(adm, ledger, f"r{n}", max_tokens=rng.randint(1, 8))
            n += 1
        elif op < 0.22:  # a crash: the steps in flight are charged
            steps.clear()
            worker = FakeWorker(BLOCK)
            for failure in adm.restart():
                ledger.close(failure.request_id)
        elif op < 0.27 and len(ledger):
            rid = rng.choice([e.request_id for e in ledger])
            entry = ledger.get(rid)
            adm.abort(rid, list(entry.children), RequestStatus.FINISHED_ABORTED)
            ledger.close(rid)
        elif op < 0.30 and not adm.inflight and not steps:
            if adm.sleep_level:
                adm.wake_up()
                worker = FakeWorker(BLOCK)
            else:
                adm.sleep(1)
        elif steps and rng.random() < 0.6:
            step = steps.pop(0)
            out = adm.step_done(
                step.epoch, step.scheduler_output.step_id, worker.execute(step.scheduler_output)
            )
            if out is not None:
                deliver(ledger, out)
        elif (step := adm.next_step()) is not None:
            steps.append(step)
        _check_invariants(adm)
