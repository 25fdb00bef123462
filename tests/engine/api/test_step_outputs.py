"""Merging a request's outputs between two ``step()`` calls, and the step mailbox."""

import threading

import pytest

from actorllm.core.errors import DuplicateRequestError
from actorllm.core.outputs import CompletionOutput, Logprob, RequestOutput
from actorllm.core.sampling_params import RequestOutputKind
from actorllm.engine.api.step_outputs import PendingOutputs, merge_outputs
from actorllm.engine.errors import EngineDeadError, RequestFailedError

DELTA, CUMULATIVE = RequestOutputKind.DELTA, RequestOutputKind.CUMULATIVE


def out(rid="r", *completions, finished=False, prompt_logprobs=None):
    return RequestOutput(
        request_id=rid,
        prompt="p",
        prompt_token_ids=[1],
        prompt_logprobs=prompt_logprobs,
        outputs=list(completions),
        finished=finished,
    )


def comp(index, text, ids, reason=None, logprobs=None):
    return CompletionOutput(
        index=index, text=text, token_ids=ids, finish_reason=reason, logprobs=logprobs
    )


def lp(token):
    return {token: Logprob(logprob=-1.0)}


def test_delta_pieces_are_joined_per_sample():
    first = out("r", comp(0, "a", [1], logprobs=[lp(1)]), comp(1, "x", [9], logprobs=[lp(9)]))
    first.prompt_logprobs = [None]
    second = out("r", comp(1, "y", [8], "length", logprobs=[lp(8)]), finished=False)
    second.prompt_logprobs = [lp(1)]
    merged = merge_outputs(first, second, DELTA)
    assert [(c.index, c.text, c.token_ids, c.finish_reason) for c in merged.outputs] == [
        (0, "a", [1], None),
        (1, "xy", [9, 8], "length"),
    ]
    assert merged.outputs[1].logprobs == [lp(9), lp(8)]
    assert merged.prompt_logprobs == [None, lp(1)]


def test_cumulative_keeps_the_newest_of_each_sample():
    first = out("r", comp(0, "a", [1]), comp(1, "x", [9]))
    second = out("r", comp(0, "ab", [1, 2], "stop"), finished=False)
    merged = merge_outputs(first, second, CUMULATIVE)
    assert [(c.text, c.finish_reason) for c in merged.outputs] == [("ab", "stop"), ("x", None)]


def test_take_merges_and_forgets_finished_requests():
    box = PendingOutputs()
    token = box.add("r", DELTA, "p", [1], 1)
    with pytest.raises(DuplicateRequestError):
        box.add("r", DELTA, "p", [1], 1)
    box.put("r", token, out("r", comp(0, "a", [1])))
    box.put("r", token, out("r", comp(0, "b", [2], "length"), finished=True))
    (merged,) = box.take()
    assert merged.outputs[0].text == "ab" and merged.finished
    assert box.num_unfinished() == 0 and box.take() == []


def test_aborted_requests_drop_late_outputs_even_under_a_reused_id():
    box = PendingOutputs()
    old = box.add("r", CUMULATIVE, "p", [1], 1)
    box.put("r", old, out("r", comp(0, "a", [1])))
    assert box.abort(["r", "other"]) == ["r"]
    new = box.add("r", CUMULATIVE, "p", [1], 1)
    box.put("r", old, out("r", comp(0, "stale", [7])))
    box.put("r", new, out("r", comp(0, "fresh", [3])))
    assert [o.outputs[0].text for o in box.take()] == ["fresh"]


def test_take_blocks_until_an_output_arrives():
    box = PendingOutputs()
    token = box.add("r", CUMULATIVE, "p", [1], 1)
    timer = threading.Timer(0.05, box.put, ("r", token, out("r", comp(0, "a", [1]))))
    timer.start()
    assert [o.outputs[0].text for o in box.take()] == ["a"]
    timer.join()


def test_a_failed_request_ends_as_error_and_a_dead_engine_raises():
    box = PendingOutputs()
    a = box.add("a", DELTA, "p", [1], 2)
    box.put("a", a, out("a", comp(0, "x", [5])))
    box.fail("a", a, RequestFailedError("a", "it crashed the engine twice"))
    (failed,) = box.take()
    assert failed.finished and "crashed" in (failed.error or "")
    assert [(c.text, c.finish_reason) for c in failed.outputs] == [("x", "error"), ("", "error")]
    b = box.add("b", DELTA, "p", [1], 1)
    box.fail("b", b, EngineDeadError("the engine died"))
    with pytest.raises(EngineDeadError):
        box.take()


def test_delta_pieces_of_flat_logprobs_merge_flat() -> None:
    from actorllm.core.logprob_types import FlatLogprobs, Logprob
    from actorllm.core.outputs import CompletionOutput, RequestOutput
    from actorllm.core.sampling_params import RequestOutputKind
    from actorllm.engine.api.step_outputs import merge_outputs

    def piece(tok: int) -> RequestOutput:
        lps = FlatLogprobs.of([{tok: Logprob(logprob=-1.0, rank=1)}])
        co = CompletionOutput(index=0, text=str(tok), token_ids=[tok], logprobs=lps)
        prompt = FlatLogprobs.of([{tok: Logprob(logprob=-2.0)}])
        return RequestOutput(
            request_id="r", prompt=None, prompt_token_ids=[1], prompt_logprobs=prompt,
            outputs=[co], finished=False,
        )  # fmt: skip

    merged = merge_outputs(piece(3), piece(4), RequestOutputKind.DELTA)
    (co,) = merged.outputs
    assert isinstance(co.logprobs, FlatLogprobs) and [list(p) for p in co.logprobs] == [[3], [4]]
    assert isinstance(merged.prompt_logprobs, FlatLogprobs) and len(merged.prompt_logprobs) == 2
