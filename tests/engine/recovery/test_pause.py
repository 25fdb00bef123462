"""Pause and resume in admission (engine/recovery/pause.py, engine/recovery/admission.py),
with plain calls: the admission tests' real core, fake worker and ledger."""

from __future__ import annotations

import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.engine.recovery.pause import Pause, PauseState, check_mode
from tests.core.scheduler.sched_helpers import FakeWorker
from tests.engine.recovery.test_admission import (
    BLOCK,
    deliver,
    engine,
    open_request,
    reference_tokens,
    run,
)


def step_once(adm, ledger, worker: FakeWorker) -> bool:
    """One step launched and applied; False when admission gives none."""
    step = adm.next_step()
    if step is None:
        return False
    out = adm.step_done(
        step.epoch, step.scheduler_output.step_id, worker.execute(step.scheduler_output)
    )
    assert out is not None
    deliver(ledger, out)
    return True


def emitted(ledger, rid: str) -> list[int]:
    entry = ledger.get(rid)
    return list(entry.children[rid].emitted)


def test_the_pause_object_maps_modes_to_states_and_parks_in_order() -> None:
    p = Pause()
    assert not p.paused and p.schedules_running and p.admits_waiting
    p.pause("wait")
    assert p.state is PauseState.PAUSED_NEW and p.schedules_running and not p.admits_waiting
    p.park("b")
    p.park("a")
    p.forget("b")
    p.pause("keep")  # changing the mode keeps what is parked
    assert p.state is PauseState.PAUSED_ALL and not p.schedules_running
    assert p.resume() == (["a"], False)
    assert not p.paused and p.statistics().pauses == 2
    with pytest.raises(InvalidRequestError, match="Invalid pause mode: later") as err:
        check_mode("later")
    assert err.value.param == "mode"


def test_keep_freezes_running_requests_and_resume_continues_them_exactly() -> None:
    reference = reference_tokens(["a", "b"])  # an unpaused run
    adm, ledger = engine()
    for rid in ("a", "b"):
        open_request(adm, ledger, rid)
    entries = {rid: ledger.get(rid) for rid in ("a", "b")}
    worker = FakeWorker(BLOCK)
    for _ in range(3):
        assert step_once(adm, ledger, worker)
    adm.pause_generation("keep")
    assert adm.pause_complete()
    assert adm.next_step() is None  # frozen: nothing is scheduled
    open_request(adm, ledger, "late", max_tokens=3)  # arrives while paused: parked
    assert adm.core.get_request("late") is None and adm.statistics().pause.parked == 1
    held = {rid: adm.core.kv_cache_manager.get_block_ids(rid) for rid in entries}
    assert all(held.values())
    adm.resume_generation()
    assert {rid: adm.core.kv_cache_manager.get_block_ids(rid) for rid in entries} == held
    while step_once(adm, ledger, worker):
        pass
    assert {rid: e.children[rid].emitted for rid, e in entries.items()} == reference
    assert not ledger  # "late" ran after resume too


def test_wait_lets_running_requests_finish_and_queued_ones_wait() -> None:
    adm, ledger = engine()
    open_request(adm, ledger, "running", max_tokens=4)
    worker = FakeWorker(BLOCK)
    assert step_once(adm, ledger, worker)  # "running" has started
    open_request(adm, ledger, "queued", max_tokens=4)  # in the core's queue, not started
    adm.pause_generation("wait")
    assert not adm.pause_complete()  # "running" still runs
    open_request(adm, ledger, "new", max_tokens=4)  # parked
    while step_once(adm, ledger, worker):
        pass
    assert adm.pause_complete()
    assert "running" not in ledger and "queued" in ledger and "new" in ledger
    assert emitted(ledger, "queued") == []
    adm.resume_generation()
    while step_once(adm, ledger, worker):
        pass
    assert not ledger


def test_a_restart_while_paused_keeps_the_pause_and_every_request() -> None:
    adm, ledger = engine()
    for rid in ("a", "b"):
        open_request(adm, ledger, rid, max_tokens=6)
    worker = FakeWorker(BLOCK)
    assert step_once(adm, ledger, worker)
    adm.pause_generation("keep")
    open_request(adm, ledger, "late", max_tokens=2)
    assert adm.restart() == []  # the scheduler crashed (nothing in flight: no one charged)
    assert adm.pause.paused and adm.pause.rebuilt
    assert not adm.core.requests  # nothing added while paused
    assert sorted(adm.waiting_children()) == ["a", "b", "late"]
    assert adm.next_step() is None and adm.pause_complete()
    adm.resume_generation()
    assert sorted(adm.core.requests) == ["a", "b", "late"]
    assert run(adm, ledger) == ([], 0)


def test_sleep_and_wake_by_tags_while_paused() -> None:
    adm, ledger = engine()
    open_request(adm, ledger, "a", max_tokens=4)
    adm.pause_generation("abort")
    adm.sleep(1)
    assert adm.wake_up(["weights"]) is False and adm.statistics().asleep == ["kv_cache"]
    assert adm.next_step() is None
    assert adm.wake_up(["kv_cache"]) is True and adm.sleep_level == 0
    assert not adm.core.requests  # still paused: the rebuild waits for resume
    adm.resume_generation()
    assert run(adm, ledger) == ([], 0)
