"""Pooling requests in the scheduler: prefill-only, finished by their pooled result after
the last prompt chunk, their blocks freed at once; batched with each other under the token
budget; a prompt of exactly max_model_len fits (no output token to leave room for)."""

from __future__ import annotations

import pytest

from actorllm.core.errors import RequestTooLongError
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.pooling_params import PooledData, PoolingParams
from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler, SchedulerConfig
from actorllm.core.scheduler_output import SchedulerOutput


def pooling_request(rid: str, n: int) -> Request:
    params = SamplingParams(max_tokens=1, pooling_params=PoolingParams(task="embed"))
    first = 100 * (ord(rid[0]) - ord("a") + 1)  # no shared prefix between requests
    return Request(rid, list(range(first, first + n)), params)


def run(s: Scheduler, so: SchedulerOutput, finished: set[str]) -> list:
    """The runner's answer: a vector for each request whose step reached its prompt end."""
    pooled = {
        rid: PooledData.from_floats([float(len(rid))])
        for rid in so.num_scheduled_tokens
        if rid in finished
    }
    out = ModelRunnerOutput(
        step_id=so.step_id,
        req_ids=list(so.num_scheduled_tokens),
        sampled_token_ids=[[] for _ in so.num_scheduled_tokens],
        pooled=pooled,
    )
    return s.update_from_output(so, out).outputs


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_chunked_pooling_finishes_after_its_last_chunk(async_scheduling: bool) -> None:
    cfg = SchedulerConfig(
        max_model_len=64, num_blocks=32, block_size=4, max_num_batched_tokens=16,
        async_scheduling=async_scheduling,
    )  # fmt: skip
    s = Scheduler(cfg)
    s.add_request(pooling_request("a", 40))
    s.add_request(pooling_request("b", 6))
    so1 = s.schedule()
    assert so1.num_scheduled_tokens == {"a": 16}  # a's first chunk takes the budget
    assert run(s, so1, set()) == []  # nothing to report mid-prompt
    so2 = s.schedule()
    assert so2.num_scheduled_tokens == {"a": 16}
    run(s, so2, set())
    so3 = s.schedule()
    assert so3.num_scheduled_tokens == {"a": 8, "b": 6}  # the tail batches with b
    outs = run(s, so3, {"a", "b"})
    assert [(o.req_id, o.finish_reason, o.pooled.tolist()) for o in outs] == [
        ("a", "stop", [1.0]),
        ("b", "stop", [1.0]),
    ]
    assert s.kv_cache_manager.num_free_blocks == cfg.num_blocks - 1  # nothing held
    assert not s.has_unfinished_requests()
    assert s.schedule().finished_req_ids == ["a", "b"]  # the worker drops them


def test_a_pooling_prompt_may_fill_the_context() -> None:
    s = Scheduler(SchedulerConfig(max_model_len=16, num_blocks=16, block_size=4))
    s.add_request(pooling_request("full", 16))
    so = s.schedule()
    assert so.num_scheduled_tokens == {"full": 16}
    assert run(s, so, {"full"})[0].finished
    with pytest.raises(RequestTooLongError):
        s.add_request(pooling_request("long", 17))
