"""plan_step: which rows a step has, in which order, whichever way they are found."""

from __future__ import annotations

import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import NewRequestData
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.step_inputs import SchedulerProtocolError, plan_step


def _batch(prompts: dict[str, list[int]]) -> InputBatch:
    b = InputBatch(max_num_seqs=4, max_model_len=32, block_size=4)
    for k, (rid, p) in enumerate(prompts.items()):
        b.add_request(
            NewRequestData(req_id=rid, prompt_token_ids=p, output_token_ids=[],
                           sampling_params=SamplingParams(), block_ids=([k + 1, k + 5],),
                           num_computed_tokens=0)
        )  # fmt: skip
    return b


def _rows(plan) -> tuple[list[str], list[int], list[int], list[int]]:
    return plan.req_ids, plan.slots.tolist(), plan.num_scheduled.tolist(), plan.input_ids.tolist()


def test_every_held_request_scheduled_is_planned_in_slot_order() -> None:
    b = _batch({"a": [1, 2], "b": [3], "c": [4, 5, 6], "d": [7]})
    b.remove_request("a")
    b.condense()  # "d" moves into slot 0
    schedule = {"b": 1, "c": 3, "d": 1}  # (not in slot order)
    assert _rows(plan_step(b, schedule)) == (["d", "b", "c"], [0, 1, 2], [1, 1, 3], [7, 3, 4, 5, 6])
    # The same rows as when one of them is left out, for the ones planned.
    assert _rows(plan_step(b, {"c": 3, "d": 1})) == (["d", "c"], [0, 2], [1, 3], [7, 4, 5, 6])


def test_a_hole_before_condensing_is_not_a_row() -> None:
    b = _batch({"a": [1, 2], "b": [3], "c": [4]})
    b.remove_request("b")  # slot 1 empty, num_reqs still 3
    assert _rows(plan_step(b, {"a": 2, "c": 1})) == (["a", "c"], [0, 2], [2, 1], [1, 2, 4])


def test_an_unknown_request_is_named_also_when_the_counts_match() -> None:
    b = _batch({"a": [1, 2], "b": [3]})
    with pytest.raises(SchedulerProtocolError, match="'x' is unknown to the worker"):
        plan_step(b, {"a": 2, "x": 1})
    with pytest.raises(SchedulerProtocolError, match="'x' is unknown to the worker"):
        plan_step(b, {"x": 1})
