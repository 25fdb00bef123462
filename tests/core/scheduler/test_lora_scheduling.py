"""LoRA in the scheduler: at most ``max_loras`` distinct adapters in a step, waiting
requests of other adapters are not starved, base requests never wait for adapters, and
the prefix cache never shares blocks between adapters."""

from __future__ import annotations

import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.core.lora import LoRARequest
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.request import Request, RequestStatus
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler
from actorllm.core.scheduler.config import SchedulerConfig

A, B, C = (LoRARequest(n, i + 1, f"/adapters/{n}") for i, n in enumerate("abc"))


def _sched(max_loras: int = 1) -> Scheduler:
    return Scheduler(SchedulerConfig(max_model_len=64, num_blocks=64, block_size=4,
                                     max_loras=max_loras))  # fmt: skip


def _add(s: Scheduler, rid: str, lora: LoRARequest | None, max_tokens: int = 3) -> None:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    s.add_request(Request(rid, [1, 2, 3, 4, 5, 6, 7, 8, 9], params, lora_request=lora))


def _step(s: Scheduler) -> set[str]:
    so = s.schedule()
    ids = list(so.num_scheduled_tokens)
    s.update_from_output(
        so, ModelRunnerOutput(step_id=so.step_id, req_ids=ids, sampled_token_ids=[[7]] * len(ids))
    )
    return set(ids)


def _adapters(s: Scheduler, ids: set[str]) -> set[str]:
    reqs = [s.requests[i] for i in ids if i in s.requests]
    return {r.lora_request.lora_name for r in reqs if r.lora_request is not None}


def test_at_most_max_loras_adapters_per_step_and_base_never_waits() -> None:
    s = _sched(max_loras=1)
    _add(s, "a1", A)
    _add(s, "b1", B)
    _add(s, "base", None)
    first = _step(s)
    assert first == {"a1", "base"}  # b1 waits for a slot; the base request does not
    seen: list[set[str]] = []
    for _ in range(10):
        if not s.has_unfinished_requests():
            break
        so = s.schedule()
        names = {
            r.lora_request.lora_name
            for rid in so.num_scheduled_tokens
            if (r := s.requests[rid]).lora_request is not None
        }
        seen.append(names)
        ids = list(so.num_scheduled_tokens)
        s.update_from_output(so, ModelRunnerOutput(step_id=so.step_id, req_ids=ids,
                                                   sampled_token_ids=[[7]] * len(ids)))  # fmt: skip
    assert all(len(n) <= 1 for n in seen)
    assert {"b"} in seen and not s.has_unfinished_requests()


def test_a_held_adapter_request_is_not_starved_by_later_running_adapter_ones() -> None:
    """a keeps receiving requests; b, held back, must start once a's running ones end."""
    s = _sched(max_loras=1)
    _add(s, "a0", A)
    _step(s)
    _add(s, "b0", B)
    started_b = False
    for i in range(1, 12):
        _add(s, f"a{i}", A)  # a new request of the running adapter every step
        _step(s)
        if s.requests.get("b0") is None or s.requests["b0"].num_computed_tokens:
            started_b = True
            break
    assert started_b


def test_lora_request_without_lora_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="enable_lora"):
        _add(_sched(max_loras=0), "a", A)


def test_blocks_are_never_shared_between_adapters() -> None:
    s = _sched(max_loras=3)
    for rid, lora in (("a", A), ("b", B), ("base", None)):
        _add(s, rid, lora, max_tokens=1)
    hashes = {rid: list(s.requests[rid].block_hashes) for rid in ("a", "b", "base")}
    assert len(hashes["a"]) == 2  # the same two full blocks of prompt ...
    assert not set(hashes["a"]) & set(hashes["b"])  # ... hashed apart per adapter
    assert not set(hashes["a"]) & set(hashes["base"])
    _step(s)
    _step(s)
    # A second request of adapter a hits a's cached blocks, not b's or the base's.
    _add(s, "a2", A, max_tokens=1)
    _add(s, "c", C, max_tokens=1)
    so = s.schedule()
    assert so.num_scheduled_tokens["a2"] < 9  # a prefix-cache hit
    assert so.num_scheduled_tokens["c"] == 9  # nothing shared with a, b or the base


def test_statistics_count_running_and_waiting_requests_per_adapter() -> None:
    s = _sched(max_loras=1)
    _add(s, "a1", A)
    _add(s, "a2", A)
    _add(s, "b1", B)
    _add(s, "base", None)
    _step(s)
    stats = s.statistics()
    assert stats.running_lora_adapters == {"a": 2}
    assert stats.waiting_lora_adapters == {"b": 1}
    assert _sched(max_loras=0).statistics().running_lora_adapters == {}


def test_pinned_adapters_hold_their_slots() -> None:
    # vLLM's pin_lora: a pinned adapter keeps its slot whether its requests run or not
    s = _sched(max_loras=2)
    s.pin_loras(frozenset({"a"}))
    _add(s, "b1", B)
    _add(s, "a1", A)
    _add(s, "c1", C)
    assert _step(s) == {"b1", "a1"}  # c1 waits: b and the pinned a hold both slots
    _add(s, "b3", B)
    while s.has_unfinished_requests():
        so = s.schedule()
        ids = list(so.num_scheduled_tokens)
        assert len(_adapters(s, set(ids)) | {"a"}) <= 2  # never b and c beside pinned a
        s.update_from_output(so, ModelRunnerOutput(step_id=so.step_id, req_ids=ids,
                                                   sampled_token_ids=[[7]] * len(ids)))  # fmt: skip
    s.pin_loras(frozenset())
    _add(s, "b2", B)
    _add(s, "c2", C)
    assert _step(s) == {"b2", "c2"}  # unpinned: both slots free


def test_a_request_held_back_by_max_loras_is_deferred_not_waiting_for_capacity() -> None:
    s = _sched(max_loras=1)
    _add(s, "a1", A)
    _add(s, "b1", B)
    _step(s)
    st = s.statistics()
    assert (st.num_waiting_reqs, st.num_deferred_reqs) == (1, 1)  # b1: vLLM's "deferred"
    s.finish_requests(["b1"], RequestStatus.FINISHED_ABORTED)
    assert s.statistics().num_deferred_reqs == 0  # it no longer waits
