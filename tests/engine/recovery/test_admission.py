"""Admission, probation and rebuild (engine/recovery/admission.py), with plain calls: a real core
``Scheduler``, the scheduler tests' fake worker, and a ledger updated the way the output
processor does it."""

from __future__ import annotations

import math
import random

import anyio
import msgspec

from actorllm.core.request import RequestStatus
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler, SchedulerConfig
from actorllm.engine.actors.messages import Child, NewRequest
from actorllm.engine.recovery.admission import Admission
from actorllm.engine.recovery.blame import MAX_ALONE, Blame
from actorllm.engine.recovery.ledger import RequestLedger
from tests.core.scheduler.sched_helpers import FakeWorker

BLOCK = 4
CONFIG = SchedulerConfig(
    max_num_seqs=64,
    max_num_batched_tokens=256,
    max_model_len=128,
    block_size=BLOCK,
    num_blocks=256,
)


def engine(max_inflight: int = 1) -> tuple[Admission, RequestLedger]:
    ledger = RequestLedger()
    adm = Admission(ledger, Blame(), make_core=lambda: Scheduler(CONFIG), max_inflight=max_inflight)
    adm.restart()
    return adm, ledger


def open_request(adm: Admission, ledger: RequestLedger, rid: str, max_tokens: int = 6) -> None:
    """What AsyncEngine and the input processor do for one request."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    ledger.open(rid, "p", params, 0, float(len(ledger)))
    prompt = [1 + (sum(map(ord, rid)) + j) % 40 for j in range(5)]
    ledger.record_processed(
        rid, prompt_text=None, prompt_token_ids=prompt, eos_token_id=None, children=[(rid, params)]
    )
    adm.add(
        NewRequest(
            request_id=rid,
            prompt_token_ids=prompt,
            eos_token_id=None,
            arrival_time=0.0,
            priority=0,
            children=[Child(child_id=rid, index=0, params=params)],
        )
    )


def deliver(ledger: RequestLedger, outputs) -> None:
    """The output processor's part: tokens into the ledger, finished requests closed."""
    for out in outputs.outputs:
        entry = ledger.entry_of_child(out.req_id)
        if entry is None:
            continue
        child = entry.children[out.req_id]
        child.emitted.extend(out.new_token_ids)
        if out.finished:
            child.finished = True
            ledger.close(entry.request_id)


def run(adm: Admission, ledger: RequestLedger, crash_if=lambda so: False, limit: int = 500):
    """Drive steps until every request ended; a step for which ``crash_if`` holds "crashes"
    the core (restart). Returns (failures, crashes)."""
    worker = FakeWorker(BLOCK)
    failures, crashes = [], 0
    for _ in range(limit):
        step = adm.next_step()
        if step is None:
            if not ledger:
                return failures, crashes
            raise AssertionError(f"stalled: {adm.statistics()}")
        if crash_if(step.scheduler_output):
            crashes += 1
            worker = FakeWorker(BLOCK)  # the new core's worker knows nothing
            for f in adm.restart():
                failures.append(f.request_id)
                ledger.close(f.request_id)  # the output processor ends it
            continue
        out = adm.step_done(
            step.epoch, step.scheduler_output.step_id, worker.execute(step.scheduler_output)
        )
        assert out is not None
        deliver(ledger, out)
    raise AssertionError("did not finish")


def reference_tokens(rids: list[str]) -> dict[str, list[int]]:
    adm, ledger = engine()
    seen: dict[str, list[int]] = {}
    for rid in rids:
        open_request(adm, ledger, rid)
    entries = {rid: ledger.get(rid) for rid in rids}
    run(adm, ledger)
    for rid, entry in entries.items():
        seen[rid] = entry.children[rid].emitted
    return seen


def test_requests_run_to_the_end_without_crashes():
    adm, ledger = engine()
    for i in range(4):
        open_request(adm, ledger, f"r{i}")
    assert run(adm, ledger) == ([], 0)
    assert adm.statistics().steps_done > 0


def test_iteration_tokens_count_the_steps_with_outputs_only():
    """vLLM's iteration tokens: one entry per step that produced outputs (the prompt when
    its prefill ends, then each generated token), whatever else ran (two steps in flight)."""
    adm, ledger = engine(max_inflight=2)
    open_request(adm, ledger, "a", max_tokens=6)
    run(adm, ledger)
    stats = adm.replica_stats()
    assert stats.iterations_done == 6 and stats.iteration_tokens == [5 + 1, 1, 1, 1, 1, 1]
    assert stats.steps_done >= stats.iterations_done


def test_a_crash_puts_the_steps_requests_on_probation_in_halves():
    adm, ledger = engine()
    for i in range(8):
        open_request(adm, ledger, f"r{i}")
    step = adm.next_step()
    assert step is not None and len(step.scheduler_output.num_scheduled_tokens) == 8
    assert adm.restart() == []  # crashed with the step in flight
    worker = FakeWorker(BLOCK)
    stats = adm.statistics()
    assert stats.on_probation == ["r0", "r1", "r2", "r3"] and stats.probation_groups == 1
    open_request(adm, ledger, "late")
    assert adm.statistics().held == 1  # innocents wait while a group is on probation
    step = adm.next_step()
    assert set(step.scheduler_output.num_scheduled_tokens) == {"r0", "r1", "r2", "r3"}
    adm.step_done(step.epoch, step.scheduler_output.step_id, worker.execute(step.scheduler_output))
    assert adm.statistics().on_probation == ["r4", "r5", "r6", "r7"]
    step = adm.next_step()
    adm.step_done(step.epoch, step.scheduler_output.step_id, worker.execute(step.scheduler_output))
    stats = adm.statistics()
    assert stats.on_probation == [] and stats.held == 0 and not adm.blame.has_suspects("core")


def test_a_poison_request_is_bisected_out_and_failed_alone():
    rids = [f"r{i}" for i in range(16)]
    reference = reference_tokens(rids)
    adm, ledger = engine()
    for rid in rids:
        open_request(adm, ledger, rid)
    entries = {rid: ledger.get(rid) for rid in rids}
    failures, crashes = run(adm, ledger, crash_if=lambda so: "r11" in so.num_scheduled_tokens)
    assert failures == ["r11"]
    # Bisection (cleared companions may share its first solo step), then MAX_ALONE alone.
    assert crashes <= math.ceil(math.log2(16)) + 1 + MAX_ALONE
    for rid in rids:
        if rid != "r11":
            assert entries[rid].children[rid].emitted == reference[rid]


def test_unrelated_crashes_never_fail_anyone_and_change_nothing():
    rids = [f"r{i}" for i in range(12)]
    reference = reference_tokens(rids)
    for seed in range(20):
        rng = random.Random(seed)
        adm, ledger = engine(max_inflight=2)
        for rid in rids:
            open_request(adm, ledger, rid)
        entries = {rid: ledger.get(rid) for rid in rids}
        failures, crashes = run(adm, ledger, crash_if=lambda so, rng=rng: rng.random() < 0.2)
        assert failures == [], f"seed {seed}: innocent requests failed after {crashes} crashes"
        assert {r: e.children[r].emitted for r, e in entries.items()} == reference


def test_steps_of_an_older_epoch_are_dropped():
    adm, ledger = engine()
    open_request(adm, ledger, "a")
    step = adm.next_step()
    adm.restart()
    out = FakeWorker(BLOCK).execute(step.scheduler_output)
    assert adm.step_done(step.epoch, step.scheduler_output.step_id, out) is None
    assert ledger.epoch == adm.epoch == step.epoch + 1


def test_an_abort_before_the_request_arrives_leaves_a_tombstone():
    adm, ledger = engine()
    params = SamplingParams(max_tokens=4)
    ledger.open("x", "p", params, 0, 0.0)
    adm.abort("x", [], RequestStatus.FINISHED_ABORTED)  # the router saw no children yet
    adm.add(
        NewRequest(
            request_id="x",
            prompt_token_ids=[1, 2],
            eos_token_id=None,
            arrival_time=0.0,
            priority=0,
            children=[Child(child_id="x", index=0, params=params)],
        )
    )
    assert adm.core.get_request("x") is None and adm.statistics().tombstones == 1


def test_sleep_drops_the_core_and_wake_up_rebuilds_from_the_ledger():
    adm, ledger = engine()
    open_request(adm, ledger, "a", max_tokens=8)
    step = adm.next_step()
    deliver(
        ledger,
        adm.step_done(
            step.epoch,
            step.scheduler_output.step_id,
            FakeWorker(BLOCK).execute(step.scheduler_output),
        ),
    )
    adm.sleep(1)
    assert adm.next_step() is None and adm.core.get_request("a") is None
    open_request(adm, ledger, "b")  # waits in the ledger
    adm.wake_up()
    assert {"a", "b"} <= set(adm.core.requests)
    assert len(adm.core.get_request("a").output_token_ids) == 1  # what the caller saw


def test_the_ledger_delivers_and_closes():
    async def main() -> None:
        ledger = RequestLedger()
        receive = ledger.open("r", "p", SamplingParams(), 0, 0.0)
        assert ledger.deliver("r", ValueError("x"))
        ledger.close("r", KeyError("done"))
        items = [item async for item in receive]
        assert [type(i) for i in items] == [ValueError, KeyError]
        assert "r" not in ledger and not ledger.deliver("r", ValueError())
        assert math.isinf(receive.statistics().max_buffer_size)

    anyio.run(main)


def test_a_step_of_finished_ids_alone_waits_for_the_next_step_or_an_idle_worker():
    # Two steps in flight: once "a" finished, the core's next step has no tokens ("b" has
    # reached its limit in flight) and only a's id for the worker to forget. While a step is
    # in flight it takes no slot: the id rides on the next real step ("c"'s prefill), or
    # goes alone once nothing is in flight.
    config = msgspec.structs.replace(CONFIG, async_scheduling=True)
    for late_arrival in (True, False):
        ledger = RequestLedger()
        adm = Admission(ledger, Blame(), make_core=lambda: Scheduler(config), max_inflight=2)
        adm.restart()
        worker = FakeWorker(BLOCK)
        open_request(adm, ledger, "a", max_tokens=1)
        open_request(adm, ledger, "b", max_tokens=2)
        first, second = adm.next_step(), adm.next_step()
        assert first is not None and second is not None  # both prefills, then b's decode
        so1 = first.scheduler_output
        deliver(ledger, adm.step_done(first.epoch, so1.step_id, worker.execute(so1)))
        assert adm.next_step() is None  # only "a" to forget, "b"'s step in flight: held
        assert len(adm.inflight) == 1
        if late_arrival:
            open_request(adm, ledger, "c")
            step = adm.next_step()
            assert step is not None
            assert step.scheduler_output.finished_req_ids == ["a"]
            assert step.scheduler_output.total_num_scheduled_tokens > 0
        else:
            so2 = second.scheduler_output
            deliver(ledger, adm.step_done(second.epoch, so2.step_id, worker.execute(so2)))
            step = adm.next_step()  # nothing in flight: the ids go, a's and b's
            assert step is not None
            assert sorted(step.scheduler_output.finished_req_ids) == ["a", "b"]
            assert step.scheduler_output.total_num_scheduled_tokens == 0
