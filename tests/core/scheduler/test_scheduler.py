"""Unit tests of the scheduler's policy: stops, chunking, preemption, prefix hits, async."""

from __future__ import annotations

import pytest
from sched_helpers import EOS, FakeWorker, check_invariants, make_request, run_step

from actorllm.core.engine_core_output import FinishReason
from actorllm.core.errors import DuplicateRequestError, EmptyPromptError, RequestTooLongError
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.repetition import RepetitionDetectionParams
from actorllm.core.request import FINISH_REASONS, Request, RequestStatus
from actorllm.core.scheduler import Scheduler, SchedulerConfig
from actorllm.core.scheduler.stopping import check_stop
from actorllm.core.scheduler_output import SchedulerOutput


def sched(**kw: object) -> Scheduler:
    base: dict[str, object] = dict(
        max_num_seqs=8, max_num_batched_tokens=64, max_model_len=64, block_size=4, num_blocks=33
    )
    base.update(kw)
    return Scheduler(SchedulerConfig(**base))  # type: ignore[arg-type]


def feed(s: Scheduler, so: SchedulerOutput, tokens: dict[str, int]):  # type: ignore[no-untyped-def]
    """Return a runner output sampling ``tokens[rid]`` for each request that samples."""
    ids = list(so.num_scheduled_tokens)
    sampled = []
    for rid in ids:
        r = s.get_request(rid)
        samples = r is not None and r.num_computed_tokens >= r.num_tokens
        sampled.append([tokens[rid]] if samples and rid in tokens else [])
    return s.update_from_output(
        so, ModelRunnerOutput(step_id=so.step_id, req_ids=ids, sampled_token_ids=sampled)
    )


def decode_until_done(s: Scheduler, rid: str, tokens: list[int]):  # type: ignore[no-untyped-def]
    outs = []
    for tok in tokens:
        so = s.schedule()
        eco = feed(s, so, {rid: tok})
        outs += [o for o in eco.outputs if o.req_id == rid]
        if outs and outs[-1].finished:
            break
    return outs


# -- stop conditions ------------------------------------------------------------------------


def test_eos_stops_with_no_stop_reason() -> None:
    s = sched()
    s.add_request(make_request("a", [1, 2, 3], max_tokens=10))
    outs = decode_until_done(s, "a", [7, EOS, 7])
    assert [o.new_token_ids for o in outs] == [[7], [EOS]]
    assert outs[-1].finish_reason is FinishReason.STOP and outs[-1].stop_reason is None
    assert s.kv_cache_manager.num_free_blocks == s.kv_cache_manager.num_usable_blocks
    assert s.schedule().finished_req_ids == ["a"]


def test_ignore_eos_keeps_going_until_max_tokens() -> None:
    s = sched()
    s.add_request(make_request("a", [1, 2, 3], max_tokens=3, ignore_eos=True))
    outs = decode_until_done(s, "a", [EOS, EOS, EOS, EOS])
    assert len(outs) == 3 and outs[-1].finish_reason is FinishReason.LENGTH


def test_stop_token_ids_report_the_token() -> None:
    s = sched()
    s.add_request(make_request("a", [1, 2, 3], max_tokens=10, stop_token_ids=[42]))
    outs = decode_until_done(s, "a", [5, 42, 6])
    assert outs[-1].finish_reason is FinishReason.STOP and outs[-1].stop_reason == 42
    assert len(outs) == 2


def test_min_tokens_gates_eos_and_stop_ids() -> None:
    s = sched()
    s.add_request(make_request("a", [1, 2], max_tokens=10, min_tokens=2, stop_token_ids=[42]))
    # Outputs 1 and 2 cannot stop; the third (preceded by min_tokens outputs) can.
    outs = decode_until_done(s, "a", [EOS, 42, 42, 5])
    assert [o.finish_reason for o in outs] == [None, None, FinishReason.STOP]
    assert outs[-1].stop_reason == 42


def test_stop_token_wins_over_max_tokens() -> None:
    s = sched()
    s.add_request(make_request("a", [1, 2], max_tokens=1))
    outs = decode_until_done(s, "a", [EOS])
    assert outs[-1].finish_reason is FinishReason.STOP


def test_max_tokens_and_max_model_len() -> None:
    s = sched(max_model_len=8, num_blocks=3)
    s.add_request(make_request("a", [1, 2, 3, 4, 5], max_tokens=100))
    outs = decode_until_done(s, "a", [9] * 10)
    assert len(outs) == 3 and outs[-1].finish_reason is FinishReason.LENGTH  # 5 + 3 = 8
    s.add_request(make_request("b", [1, 2], max_tokens=None))
    assert len(decode_until_done(s, "b", [9] * 10)) == 6


def test_add_request_validation() -> None:
    s = sched(max_model_len=8, num_blocks=3)
    with pytest.raises(EmptyPromptError):
        s.add_request(make_request("e", []))
    with pytest.raises(RequestTooLongError):
        s.add_request(make_request("l", list(range(8))))
    with pytest.raises(RequestTooLongError):  # resumed: prompt + outputs count
        s.add_request(make_request("l2", [1] * 5, output_token_ids=[2, 2, 2]))
    s.add_request(make_request("a", [1]))
    with pytest.raises(DuplicateRequestError):
        s.add_request(make_request("a", [1]))
    assert isinstance(DuplicateRequestError("x"), ValueError)


# -- chunked prefill and budgets ---------------------------------------------------------------


def test_chunking_follows_the_budget_exactly() -> None:
    s = sched(max_num_batched_tokens=10)
    s.add_request(make_request("a", list(range(1, 8))))  # 7 tokens
    s.add_request(make_request("b", list(range(1, 9))))  # 8 tokens
    so = s.schedule()
    assert so.num_scheduled_tokens == {"a": 7, "b": 3}
    feed(s, so, {"a": 50})
    so = s.schedule()
    # RUNNING first: a decodes 1, then b's remaining 5.
    assert so.num_scheduled_tokens == {"a": 1, "b": 5}
    assert [c.num_computed_tokens for c in so.scheduled_cached_reqs] == [7, 3]


def test_long_prefill_token_threshold_caps_chunks() -> None:
    s = sched(max_num_batched_tokens=32, long_prefill_token_threshold=4)
    s.add_request(make_request("a", list(range(1, 11))))
    s.add_request(make_request("b", list(range(1, 3))))
    assert s.schedule().num_scheduled_tokens == {"a": 4, "b": 2}


def test_adaptive_threshold_floors_the_cap_at_a_fair_share_of_the_budget() -> None:
    # Two requests share a 32-token budget: the fair share (16) lifts the cap of 4.
    s = sched(
        max_num_batched_tokens=32,
        long_prefill_token_threshold=4,
        long_prefill_token_threshold_adaptive=True,
    )
    s.add_request(make_request("a", list(range(1, 41))))
    s.add_request(make_request("b", list(range(1, 41))))
    assert s.schedule().num_scheduled_tokens == {"a": 16, "b": 16}


def test_adaptive_threshold_keeps_the_cap_when_the_share_is_smaller() -> None:
    s = sched(
        max_num_batched_tokens=32,
        long_prefill_token_threshold=4,
        long_prefill_token_threshold_adaptive=True,
    )
    for r in "abcdefghijkl":  # 12 requests: 32 // 12 = 2 is under the cap
        s.add_request(make_request(r, list(range(1, 11))))
    assert set(s.schedule().num_scheduled_tokens.values()) == {4}


def test_chunked_prefill_disabled_waits_whole() -> None:
    s = sched(max_num_batched_tokens=64, enable_chunked_prefill=False)
    s.add_request(make_request("a", list(range(1, 41))))
    s.add_request(make_request("b", list(range(100, 130))))  # 40 + 30 > 64: b waits whole
    so = s.schedule()
    assert so.num_scheduled_tokens == {"a": 40}
    feed(s, so, {"a": 5})
    assert s.schedule().num_scheduled_tokens == {"a": 1, "b": 30}


def test_max_num_seqs() -> None:
    s = sched(max_num_seqs=2)
    for r in "abc":
        s.add_request(make_request(r, [1, 2]))
    assert set(s.schedule().num_scheduled_tokens) == {"a", "b"}
    assert s.num_running == 2 and s.num_waiting == 1


def test_fcfs_serves_the_earliest_arrival_time_first() -> None:
    # Added late with an earlier arrival time (LLMEngine.add_request(arrival_time=...)): it
    # goes ahead of those that arrived after it; equal times keep insertion order.
    s = sched(max_num_seqs=1)
    for rid, t in [("b", 2.0), ("c", 3.0), ("a", 1.0), ("c2", 3.0), ("d", 4.0)]:
        s.add_request(make_request(rid, [1, 2], arrival_time=t))
    assert [r.request_id for r in s.waiting] == ["a", "b", "c", "c2", "d"]
    assert list(s.schedule().num_scheduled_tokens) == ["a"]


# -- preemption -------------------------------------------------------------------------------


def _fill(s: Scheduler, specs: list[tuple[str, int, float]]) -> None:
    for rid, prio, t in specs:
        s.add_request(make_request(rid, [1, 2, 3, 4], priority=prio, arrival_time=t, max_tokens=20))


def test_fcfs_preempts_the_newest_running() -> None:
    # 4 usable blocks of 4: three requests of 4 tokens hold 3; the 4th block goes to the first
    # decode; the second decode needs a block and preempts the newest (c).
    s = sched(num_blocks=5, max_model_len=16)
    _fill(s, [("a", 0, 1.0), ("b", 0, 2.0), ("c", 0, 3.0)])
    w = FakeWorker(4)
    run_step(s, w)
    so, _ = run_step(s, w)
    assert so.preempted_req_ids == ["c"]
    assert s.get_request("c").status is RequestStatus.PREEMPTED  # type: ignore[union-attr]
    assert s.get_request("c").num_preemptions == 1  # type: ignore[union-attr]
    assert list(r.request_id for r in s.waiting) == ["c"]
    check_invariants(s)


def test_the_first_output_after_a_preemption_carries_the_count() -> None:
    s = sched(num_blocks=5, max_model_len=16)
    _fill(s, [("a", 0, 1.0), ("b", 0, 2.0), ("c", 0, 3.0)])
    w = FakeWorker(4)
    seen: list[int] = []
    preempted = 0
    while s.has_unfinished_requests():
        so, outs = run_step(s, w)
        preempted += so.preempted_req_ids.count("c")
        seen += [o.num_preemptions for o in outs if o.req_id == "c"]
    # each count once, when c produced again; 0 on its other outputs
    assert preempted >= 1 and [p for p in seen if p] == list(range(1, preempted + 1))


def test_watermark_keeps_blocks_free_for_the_running_ones_growth() -> None:
    # 8 usable blocks of 4; watermark 0.25 keeps int(0.25 * 9) = 2 free: of seven one-block
    # prompts six start (the sixth leaves exactly 2), the seventh waits; without it, seven.
    def started(**kw: object) -> list[str]:
        s = sched(num_blocks=9, max_model_len=16, **kw)
        for rid in "abcdefg":
            s.add_request(make_request(rid, [1, 2, 3, 4], max_tokens=8))
        so = s.schedule()
        check_invariants(s)
        return list(so.num_scheduled_tokens)

    assert started(watermark=0.25) == list("abcdef")
    assert started() == list("abcdefg")


def test_watermark_never_stops_a_request_that_would_run_alone() -> None:
    s = sched(num_blocks=9, max_model_len=16, watermark=0.9)  # keeps 8 of 8 usable free
    for rid in "ab":
        s.add_request(make_request(rid, [1, 2, 3, 4], max_tokens=2))
    assert list(s.schedule().num_scheduled_tokens) == ["a"]  # alone: progress
    assert s.num_waiting == 1


def test_a_chunked_prompt_starts_only_if_all_of_it_fits() -> None:
    # 8 usable blocks of 4, 8 tokens a step: a (12 tokens, 3 blocks) takes 2 blocks, then
    # 1; b (24 tokens, 6 blocks) would start with a 4-token chunk beside a's last one. With
    # vLLM's scheduler_reserve_full_isl (the default) it waits until all 6 fit.
    def second_step(**kw: object) -> list[str]:
        s = sched(num_blocks=9, max_model_len=32, max_num_batched_tokens=8, **kw)
        s.add_request(make_request("a", list(range(1, 13)), max_tokens=4))
        s.add_request(make_request("b", list(range(100, 124)), max_tokens=4))
        w = FakeWorker(4)
        run_step(s, w)
        so, _ = run_step(s, w)
        check_invariants(s)
        return list(so.num_scheduled_tokens)

    assert second_step() == ["a"]
    assert second_step(reserve_full_isl=False) == ["a", "b"]


def test_watermark_out_of_range_is_refused() -> None:
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="watermark"):
            sched(watermark=bad)


def test_priority_preempts_lowest_priority_then_latest() -> None:
    s = sched(num_blocks=5, max_model_len=16, policy="priority")
    _fill(s, [("a", 1, 1.0), ("b", 2, 2.0), ("c", 0, 3.0)])
    w = FakeWorker(4)
    run_step(s, w)
    so, _ = run_step(s, w)
    assert so.preempted_req_ids == ["b"]  # the lowest priority, though not the newest
    s = sched(num_blocks=5, max_model_len=16, policy="priority")
    _fill(s, [("a", 1, 1.0), ("b", 1, 2.0), ("c", 0, 3.0)])
    w = FakeWorker(4)
    run_step(s, w)
    so, _ = run_step(s, w)
    assert so.preempted_req_ids == ["b"]  # a tie on priority: the later arrival


def test_priority_orders_waiting_and_preempts_for_a_waiting_request() -> None:
    s = sched(max_num_seqs=1, policy="priority")
    s.add_request(make_request("low", [1, 2], priority=5, arrival_time=1.0))
    s.add_request(make_request("mid", [1, 2], priority=3, arrival_time=2.0))
    assert list(s.schedule().num_scheduled_tokens) == ["mid"]
    s.add_request(make_request("high", [1, 2], priority=0, arrival_time=3.0))
    so = s.schedule()
    assert so.preempted_req_ids == ["mid"] and list(so.num_scheduled_tokens) == ["high"]
    assert [r.request_id for r in s.waiting] == ["mid", "low"]


def test_resumed_request_is_new_again_with_its_outputs() -> None:
    s = sched(num_blocks=5, max_model_len=16)
    _fill(s, [("a", 0, 1.0), ("b", 0, 2.0), ("c", 0, 3.0)])
    w = FakeWorker(4, fixed_token=9)
    for _ in range(6):
        so, _ = run_step(s, w)
        check_invariants(s)
        resumed = [n for n in so.scheduled_new_reqs if n.req_id == "c" and n.output_token_ids]
        if resumed:
            assert resumed[0].output_token_ids == [9]
            break
    else:
        s.finish_requests(["a"], RequestStatus.FINISHED_ABORTED)
        so, _ = run_step(s, w)
        (nd,) = [n for n in so.scheduled_new_reqs if n.req_id == "c"]
        assert nd.output_token_ids == [9]


def test_request_added_with_outputs_recomputes_them_and_counts_them() -> None:
    s = sched()
    s.add_request(make_request("a", [1, 2, 3], output_token_ids=[7, 8], max_tokens=3))
    so = s.schedule()
    assert so.num_scheduled_tokens == {"a": 5}
    assert so.scheduled_new_reqs[0].output_token_ids == [7, 8]
    eco = feed(s, so, {"a": 9})
    assert eco.outputs[0].new_token_ids == [9]
    assert eco.outputs[0].finish_reason is FinishReason.LENGTH  # 2 carried + 1 = max_tokens


# -- prefix caching, abort, reset ------------------------------------------------------------


def test_second_identical_prompt_hits_all_full_blocks_but_the_last_token() -> None:
    s = sched()
    w = FakeWorker(4)
    prompt = list(range(1, 13))  # 3 full blocks
    s.add_request(make_request("a", prompt))
    run_step(s, w)
    run_step(s, w)
    s.add_request(make_request("b", prompt))
    so, outs = run_step(s, w)
    (nd,) = so.scheduled_new_reqs
    assert nd.num_computed_tokens == 8  # 12 - 1 token rounded down to full blocks
    assert so.num_scheduled_tokens["b"] == 4
    assert nd.block_ids[0][:2] == s.kv_cache_manager.get_block_ids("a")[0][:2]
    assert [o.num_cached_tokens for o in outs if o.req_id == "b"] == [8]
    st = s.statistics()
    assert st.prefix_cache_hits == 8 and st.prefix_cache_queries == 24


def test_first_output_counts_the_prompt_tokens_written_to_the_cache() -> None:
    """vLLM's num_cache_creation_tokens: the prompt's tokens in full blocks minus its hits,
    on the first output only; 0 without prefix caching."""
    s = sched()
    w = FakeWorker(4)
    s.add_request(make_request("a", list(range(1, 14))))  # 13 tokens: 3 full blocks of 4
    _, first = run_step(s, w)
    _, later = run_step(s, w)
    assert [(o.num_cached_tokens, o.num_cache_creation_tokens) for o in first] == [(0, 12)]
    assert [o.num_cache_creation_tokens for o in later] == [0]
    s.add_request(make_request("b", list(range(1, 14))))
    _, outs = run_step(s, w)  # b finds a's 3 full blocks and writes none
    (b,) = [o for o in outs if o.req_id == "b"]
    assert (b.num_cached_tokens, b.num_cache_creation_tokens) == (12, 0)
    off = sched(enable_prefix_caching=False)
    off.add_request(make_request("c", list(range(1, 14))))
    _, outs = run_step(off, w)
    assert [o.num_cache_creation_tokens for o in outs] == [0]


def test_cache_salt_separates_hashes() -> None:
    s = sched()
    w = FakeWorker(4)
    s.add_request(make_request("a", list(range(1, 13)), cache_salt="x"))
    run_step(s, w)
    run_step(s, w)
    s.add_request(make_request("b", list(range(1, 13)), cache_salt="y"))
    s.add_request(make_request("c", list(range(1, 13)), cache_salt="x"))
    so, _ = run_step(s, w)
    got = {n.req_id: n.num_computed_tokens for n in so.scheduled_new_reqs}
    assert got == {"b": 0, "c": 8}


def test_prompt_logprobs_requests_skip_prefix_hits() -> None:
    s = sched()
    w = FakeWorker(4)
    s.add_request(make_request("a", list(range(1, 13))))
    run_step(s, w)
    run_step(s, w)
    s.add_request(make_request("b", list(range(1, 13)), prompt_logprobs=1))
    so, _ = run_step(s, w)
    assert so.scheduled_new_reqs[0].num_computed_tokens == 0


def test_skip_reading_prefix_cache_takes_no_hits_but_fills_the_cache() -> None:
    s = sched()
    w = FakeWorker(4)
    s.add_request(make_request("a", list(range(1, 13))))
    run_step(s, w)
    run_step(s, w)
    s.add_request(make_request("b", list(range(1, 13)), skip_reading_prefix_cache=True))
    so, _ = run_step(s, w)
    assert so.scheduled_new_reqs[0].num_computed_tokens == 0
    # Its own full blocks go into the cache: a later request with its prefix hits them.
    s.add_request(make_request("d", list(range(20, 32)), skip_reading_prefix_cache=True))
    run_step(s, w)
    run_step(s, w)
    s.add_request(make_request("e", [*range(20, 28), 99, 98, 97, 96]))
    so, _ = run_step(s, w)
    (nd,) = so.scheduled_new_reqs
    assert nd.num_computed_tokens == 8
    assert nd.block_ids[0][:2] == s.kv_cache_manager.get_block_ids("d")[0][:2]


def test_abort_frees_blocks_at_once_and_reports_next_step() -> None:
    s = sched()
    s.add_request(make_request("a", list(range(1, 10))))
    s.add_request(make_request("w", [1]))
    s.schedule()
    kv = s.kv_cache_manager
    assert kv.num_free_blocks < kv.num_usable_blocks
    assert s.finish_requests(["a", "nope", "w"], RequestStatus.FINISHED_ABORTED) == ["a", "w"]
    assert kv.num_free_blocks == kv.num_usable_blocks
    assert s.schedule().finished_req_ids == ["a", "w"]
    assert not s.has_unfinished_requests()
    with pytest.raises(ValueError):
        s.finish_requests(["x"], RequestStatus.RUNNING)


def test_reset_prefix_cache_refused_while_in_use() -> None:
    s = sched()
    w = FakeWorker(4)
    s.add_request(make_request("a", list(range(1, 13)), max_tokens=3))
    run_step(s, w)
    run_step(s, w)
    assert s.kv_cache_manager.block_pool.cached
    assert s.reset_prefix_cache() is False
    while s.has_unfinished_requests():
        run_step(s, w)
    assert s.reset_prefix_cache() is True
    assert not s.kv_cache_manager.block_pool.cached
    s.add_request(make_request("b", list(range(1, 13))))
    assert s.schedule().scheduled_new_reqs[0].num_computed_tokens == 0


# -- async scheduling ---------------------------------------------------------------------------


def test_placeholders_let_two_steps_be_in_flight() -> None:
    s = sched(async_scheduling=True)
    w = FakeWorker(4, fixed_token=9)
    s.add_request(make_request("a", [1, 2, 3], max_tokens=3))
    so1 = s.schedule()
    r = s.get_request("a")
    assert r is not None and r.num_output_placeholders == 1
    so2 = s.schedule()  # before step 1's token is back: one decode against the placeholder
    assert so2.num_scheduled_tokens == {"a": 1}
    assert so2.scheduled_cached_reqs[0].num_computed_tokens == 3
    assert r.num_output_placeholders == 2
    ro1, ro2 = w.execute(so1), w.execute(so2)
    # max_tokens=3 with 2 in flight: one more may be scheduled, then no more.
    so3 = s.schedule()
    assert so3.num_scheduled_tokens == {"a": 1}
    assert s.schedule().num_scheduled_tokens == {}
    e1 = s.update_from_output(so1, ro1)
    assert r.num_output_placeholders == 2 and r.output_token_ids == [9]
    s.update_from_output(so2, ro2)
    e3 = s.update_from_output(so3, w.execute(so3))
    assert e1.outputs[0].new_token_ids == [9]
    assert e3.outputs[0].finish_reason is FinishReason.LENGTH and r.num_output_tokens == 3
    check_invariants(s)


def test_pipeline_keeps_a_request_out_of_new_steps_until_its_token_is_back() -> None:
    """Pipeline parallel: steps in flight hold different requests (the first stage needs
    a request's last token as an input id); a request preempted meanwhile waits too."""
    s = sched(pipeline_parallel_size=2)
    w = FakeWorker(4, fixed_token=9)
    s.add_request(make_request("a", [1, 2, 3], max_tokens=5))
    so1 = s.schedule()
    r = s.get_request("a")
    assert r is not None and r.num_output_placeholders == 1
    s.add_request(make_request("b", [4, 5], max_tokens=5))
    so2 = s.schedule()  # "a" is in the pipeline: only "b" goes
    assert so2.num_scheduled_tokens == {"b": 2}
    assert s.schedule().num_scheduled_tokens == {}  # both in flight: nothing to do
    s.update_from_output(so1, w.execute(so1))
    assert r.output_token_ids == [9] and r.num_output_placeholders == 0
    assert s.schedule().num_scheduled_tokens == {"a": 1}  # its token is back
    s.update_from_output(so2, w.execute(so2))
    check_invariants(s)


def test_tokens_for_a_request_finished_meanwhile_are_discarded() -> None:
    s = sched(async_scheduling=True)
    w = FakeWorker(4, fixed_token=EOS)
    s.add_request(make_request("a", [1, 2, 3], max_tokens=10))
    so1 = s.schedule()
    so2 = s.schedule()
    ro1, ro2 = w.execute(so1), w.execute(so2)
    e1 = s.update_from_output(so1, ro1)
    assert e1.outputs[0].finish_reason is FinishReason.STOP
    assert s.update_from_output(so2, ro2).outputs == []
    assert s.schedule().finished_req_ids == ["a"]


def test_request_status_table_rejects_bad_moves() -> None:
    from actorllm.core.errors import InvalidStatusTransitionError

    r = Request("x", [1], make_request("y", [1]).sampling_params)
    r.transition(RequestStatus.RUNNING)
    r.transition(RequestStatus.FINISHED_ABORTED)
    with pytest.raises(InvalidStatusTransitionError):
        r.transition(RequestStatus.RUNNING)


# -- sliding window ---------------------------------------------------------------------


def test_sliding_window_serves_a_request_longer_than_the_pool() -> None:
    """Every layer sliding: a pool of 11 blocks (44 positions) serves a 200-token request
    in 16-token chunks, holding at most the window behind a chunk plus the chunk."""
    kw: dict[str, object] = dict(
        max_num_seqs=2, max_num_batched_tokens=16, max_model_len=256, block_size=4,
        num_blocks=12,
    )  # fmt: skip
    with pytest.raises(ValueError, match="cannot hold max_model_len=256"):
        SchedulerConfig(**kw)  # type: ignore[arg-type]
    cfg = SchedulerConfig(sliding_window=8, **kw)  # type: ignore[arg-type]
    assert cfg.blocks_for_one_request == 7  # ceil((8 - 1 + 16) / 4) + 1
    s = Scheduler(cfg)
    worker = FakeWorker(4, sliding_window=8)
    s.add_request(make_request("a", list(range(1, 201)), max_tokens=40, ignore_eos=True))
    out: list[int] = []
    while s.has_unfinished_requests():
        _, outputs = run_step(s, worker)
        check_invariants(s)
        assert s.kv_cache_manager.num_held_blocks("a") <= 7 or not s.requests
        out += [t for o in outputs for t in o.new_token_ids]
    assert len(out) == 40 and s.statistics().num_preemptions == 0


def test_repetition_detection_finishes_with_its_reason_after_min_tokens() -> None:
    detect = RepetitionDetectionParams(max_pattern_size=2, min_count=3)
    req = make_request("a", [1, 2], repetition_detection=detect, min_tokens=7)
    for n, tok in enumerate([9, 4, 5, 4, 5, 4, 5, 4, 5], 1):
        req.append_output_token_ids([tok])
        status = check_stop(req, max_model_len=64)
        if n < 7:  # the pattern is there from 6 outputs on, but min_tokens holds it
            assert status is None
        else:
            assert status is RequestStatus.FINISHED_REPETITION
            assert req.stop_reason == "repetition_detected"
            break
    assert FINISH_REASONS[RequestStatus.FINISHED_REPETITION] is FinishReason.REPETITION
