"""The scheduler with structured outputs, against a fake tracker: WAITING_FOR_FSM holds no
seat or blocks; bitmask rows only for sampling structured requests; matchers advance and
end requests; under async scheduling a structured request runs every step, its row
following the token still in flight."""

from __future__ import annotations

import numpy as np
import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.request import Request, RequestStatus
from actorllm.core.scheduler import Scheduler, SchedulerConfig
from actorllm.core.scheduler_output import GrammarBitmask, SchedulerOutput
from actorllm.core.structured_outputs_params import StructuredOutputsError
from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP
from tests.core.scheduler.sched_helpers import make_request


class FakeTracker:
    """Grammar 'a token < 10, three times, then done'; compiles finish when told."""

    def __init__(self) -> None:
        self.ready: set[str] = set()  # request ids whose compile finished
        self.failed: dict[str, str] = {}
        self.accepted: dict[str, list[int]] = {}
        self.masks_for: list[list[str]] = []
        self.after: list[list[int] | None] = []  # each bitmask call's ``after``
        self.closed = False

    def add(self, request: Request) -> None:
        self.accepted[request.request_id] = []

    def poll(self, request: Request) -> bool:
        rid = request.request_id
        if rid in self.failed:
            raise StructuredOutputsError(self.failed[rid])
        if rid in self.ready:
            self.accepted[rid] = list(request.output_token_ids)  # rebuilt from tokens
            return True
        return False

    def accept(self, req_id: str, token_ids: list[int]) -> bool:
        if any(t >= 10 for t in token_ids):
            return False
        self.accepted[req_id].extend(token_ids)
        return True

    def is_terminated(self, req_id: str) -> bool:
        return len(self.accepted[req_id]) >= 3

    def bitmask(self, req_ids: list[str], after: list[int] | None = None) -> GrammarBitmask:
        self.masks_for.append(list(req_ids))
        self.after.append(after)
        return GrammarBitmask(req_ids=req_ids, bitmask=np.zeros((len(req_ids), 1), np.int32))

    def remove(self, req_id: str) -> None:
        self.accepted.pop(req_id, None)

    def close(self) -> None:
        self.closed = True


def _sched(tracker: FakeTracker, **kw: object) -> Scheduler:
    cfg = SchedulerConfig(max_model_len=128, num_blocks=64, block_size=4, **kw)  # type: ignore[arg-type]
    return Scheduler(cfg, grammar=tracker)


def _structured(rid: str, prompt_len: int = 5, **kw: object) -> Request:
    return make_request(
        rid, list(range(1, prompt_len + 1)), structured_outputs=SOP(regex="a"), **kw
    )


def _step(s: Scheduler, so: SchedulerOutput, token: int = 4) -> list:
    sampled = [
        [token] if s.requests[r].num_computed_tokens >= s.requests[r].num_tokens else []
        for r in so.num_scheduled_tokens
    ]
    ro = ModelRunnerOutput(step_id=so.step_id, req_ids=list(so.num_scheduled_tokens),
                           sampled_token_ids=sampled)  # fmt: skip
    return s.update_from_output(so, ro).outputs


def test_waits_for_its_grammar_without_a_seat() -> None:
    t = FakeTracker()
    s = _sched(t)
    s.add_request(_structured("g"))
    s.add_request(make_request("plain", [1, 2, 3]))
    assert s.requests["g"].status is RequestStatus.WAITING_FOR_FSM
    so = s.schedule()
    assert list(so.num_scheduled_tokens) == ["plain"]
    assert s.kv_cache_manager.get_block_ids("g") == ([],)
    assert s.statistics().num_waiting_reqs == 1
    t.ready.add("g")
    so = s.schedule()
    assert "g" in so.num_scheduled_tokens
    assert so.grammar_bitmask is not None and so.grammar_bitmask.req_ids == ["g"]


def test_bitmask_only_for_structured_rows_that_sample() -> None:
    t = FakeTracker()
    t.ready.add("g")
    s = _sched(t, max_num_batched_tokens=8, enable_chunked_prefill=True)
    s.add_request(_structured("g", prompt_len=12))
    s.add_request(make_request("plain", [1, 2]))
    so = s.schedule()  # g's first chunk does not reach its last prompt token
    assert so.grammar_bitmask is None
    _step(s, so)
    so = s.schedule()
    assert so.grammar_bitmask is not None and so.grammar_bitmask.req_ids == ["g"]


def test_tokens_advance_the_matcher_and_completion_stops() -> None:
    t = FakeTracker()
    t.ready.add("g")
    s = _sched(t)
    s.add_request(_structured("g", ignore_eos=True, max_tokens=50))
    outs = []
    while s.has_unfinished_requests():
        outs += _step(s, s.schedule())
    assert t.accepted == {}  # removed when finished
    assert [o.finish_reason.value for o in outs if o.finish_reason] == ["stop"]
    assert sum(len(o.new_token_ids) for o in outs) == 4  # the grammar's 3, then its stop


def test_rejected_token_is_an_error_not_invalid_output() -> None:
    t = FakeTracker()
    t.ready.add("g")
    s = _sched(t)
    s.add_request(_structured("g"))
    outs = _step(s, s.schedule(), token=42)
    assert outs[0].finish_reason is not None and outs[0].finish_reason.value == "error"


def test_compile_failure_finishes_with_the_error() -> None:
    t = FakeTracker()
    s = _sched(t)
    s.add_request(_structured("g"))
    t.failed["g"] = "bad regex"
    assert s.schedule().is_empty
    assert s.take_grammar_failures() == [("g", "structured_outputs bad regex")]
    assert "g" not in s.requests
    # A failure known at add time raises at once.
    t.failed["h"] = "bad"
    with pytest.raises(StructuredOutputsError):
        s.add_request(_structured("h"))
    assert "h" not in s.requests


def test_abort_while_waiting_for_fsm() -> None:
    t = FakeTracker()
    s = _sched(t)
    s.add_request(_structured("g"))
    assert s.finish_requests(["g"], RequestStatus.FINISHED_ABORTED) == ["g"]
    assert not s.waiting_for_fsm and "g" not in t.accepted


def test_async_scheduling_runs_a_structured_request_every_step() -> None:
    """Step 2 is planned while step 1's token is in flight: its row follows that token
    (``after`` counts it), so the request does not skip every other step."""
    t = FakeTracker()
    t.ready.add("g")
    s = _sched(t, async_scheduling=True)
    s.add_request(_structured("g"))
    s.add_request(make_request("plain", [1, 2, 3]))
    so1 = s.schedule()
    so2 = s.schedule()  # step 1 in flight
    assert {"plain", "g"} <= set(so2.num_scheduled_tokens)
    assert t.masks_for == [["g"], ["g"]] and t.after == [[0], [1]]
    _step(s, so1)
    assert t.accepted["g"] == [4]
    _step(s, so2)
    so3 = s.schedule()
    assert t.after[-1] == [2] and t.accepted["g"] == [4, 4]
    _step(s, so3)  # the third token completes the grammar
    s.close()
    assert t.closed


def test_recovered_request_rebuilds_its_matcher_from_outputs() -> None:
    t = FakeTracker()
    t.ready.add("g")
    s = _sched(t)
    s.add_request(_structured("g", output_token_ids=[1, 2], max_tokens=10))
    assert t.accepted["g"] == [1, 2]
    outs = _step(s, s.schedule())
    assert outs[0].finish_reason is None  # the third token completes the grammar ...
    outs = _step(s, s.schedule())
    assert outs[0].finish_reason is not None  # ... and the stop token after it ends it


def test_refused_without_a_tracker() -> None:
    s = Scheduler(SchedulerConfig(max_model_len=64, num_blocks=32, block_size=4))
    with pytest.raises(InvalidRequestError, match="structured outputs"):
        s.add_request(_structured("g"))
