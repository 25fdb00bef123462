"""The scheduler with draft tokens (speculative decoding), driven by hand: drafts become
lookahead positions of a decode, the budget and the context length cut them, rejected
ones are stepped back over, stop tokens cut an accepted run, preemption drops them, and
every block returns to the pool."""

from __future__ import annotations

from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.request import Request, RequestStatus
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler, SchedulerConfig


def _sched(**kw: int) -> Scheduler:
    cfg = {"max_model_len": 64, "num_blocks": 40, "block_size": 4, **kw}
    return Scheduler(SchedulerConfig(**cfg))  # type: ignore[arg-type]


def _step(s: Scheduler, sampled: dict[str, list[int]], drafts: dict[str, list[int]]):
    so = s.schedule()
    ids = list(so.num_scheduled_tokens)
    ro = ModelRunnerOutput(
        step_id=so.step_id,
        req_ids=ids,
        sampled_token_ids=[sampled.get(r, []) for r in ids],
        draft_token_ids=drafts,
    )
    return so, s.update_from_output(so, ro)


def test_drafts_are_scheduled_verified_and_rolled_back() -> None:
    s = _sched()
    s.add_request(Request("a", [1, 2, 3, 4, 5], SamplingParams(max_tokens=20)))
    so, _ = _step(s, {"a": [7]}, {"a": [8, 9, 10]})
    assert so.num_scheduled_tokens == {"a": 5} and not so.scheduled_spec_decode_tokens
    req = s.requests["a"]
    assert req.spec_token_ids == [8, 9, 10]
    # Next step: the last token plus three drafts; the first draft accepted, then 11.
    so, out = _step(s, {"a": [8, 11]}, {"a": [12]})
    assert so.num_scheduled_tokens == {"a": 4}
    assert so.scheduled_spec_decode_tokens == {"a": [8, 9, 10]}
    assert out.outputs[0].new_token_ids == [8, 11]
    assert req.num_tokens == 8 and req.num_computed_tokens == 7  # 2 rejected: stepped back
    st = s.statistics()
    assert (st.spec_num_drafts, st.spec_num_draft_tokens, st.spec_num_accepted_tokens) == (
        1, 3, 1,
    )  # fmt: skip
    assert st.spec_accepted_per_pos == [1, 0, 0]
    s.finish_requests(["a"], RequestStatus.FINISHED_ABORTED)
    assert s.kv_cache_manager.num_free_blocks == 39  # nothing leaked


def test_budget_and_context_length_cut_drafts() -> None:
    s = _sched(max_num_batched_tokens=3)
    s.add_request(Request("a", [1, 2], SamplingParams(max_tokens=30)))
    _step(s, {"a": [5]}, {"a": [6, 7, 8, 9]})
    so, _ = _step(s, {"a": [6, 7, 1]}, {})
    assert so.num_scheduled_tokens == {"a": 3}
    assert so.scheduled_spec_decode_tokens == {"a": [6, 7]}  # two fit the budget of 3
    s2 = _sched(max_model_len=8, num_blocks=6)
    s2.add_request(Request("b", [1, 2, 3, 4, 5], SamplingParams(max_tokens=30)))
    _step(s2, {"b": [6]}, {"b": [7, 8, 9]})
    so, _ = _step(s2, {"b": [7, 1]}, {})
    assert so.scheduled_spec_decode_tokens == {"b": [7]}  # the context holds 8 tokens


def test_a_stop_token_inside_an_accepted_run_ends_it() -> None:
    s = _sched()
    s.add_request(Request("a", [1, 2, 3], SamplingParams(max_tokens=20), eos_token_id=0))
    _step(s, {"a": [4]}, {"a": [5, 0, 6]})
    _, out = _step(s, {"a": [5, 0, 6, 9]}, {"a": [1]})
    assert out.outputs[0].new_token_ids == [5, 0]
    assert out.outputs[0].finish_reason == "stop"
    assert "a" not in s.requests and s.kv_cache_manager.num_free_blocks == 39


def test_preemption_drops_drafts() -> None:
    s = _sched(num_blocks=5, max_model_len=16)  # 4 usable blocks of 4
    s.add_request(Request("a", [1, 2, 3, 4, 5, 6], SamplingParams(max_tokens=8)))
    s.add_request(Request("b", [1, 2, 3, 4, 5, 7], SamplingParams(max_tokens=8)))
    _step(s, {"a": [8], "b": [8]}, {"a": [9, 9, 9], "b": [9, 9, 9]})
    so = s.schedule()  # 10 tokens + 3 drafts each: no room for both
    assert so.preempted_req_ids
    for rid in so.preempted_req_ids:
        assert s.requests[rid].spec_token_ids == []
        assert rid not in so.scheduled_spec_decode_tokens
