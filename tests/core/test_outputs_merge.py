"""merge_outputs: an unread output folded with the next one says what both said in turn."""

from __future__ import annotations

from actorllm.core.outputs import (
    CompletionOutput,
    Logprob,
    RequestMetrics,
    RequestOutput,
    merge_outputs,
)


def _out(
    pieces: list[CompletionOutput],
    *,
    finished: bool = False,
    prompt_logprobs: list | None = None,
    t: float = 1.0,
) -> RequestOutput:
    return RequestOutput(
        request_id="r",
        prompt="p",
        prompt_token_ids=[1, 2],
        prompt_logprobs=prompt_logprobs,
        outputs=pieces,
        finished=finished,
        num_cached_tokens=int(t),
        metrics=RequestMetrics(arrival_time=0.0, last_token_time=t),
    )


def _lp(token: int) -> dict[int, Logprob]:
    return {token: Logprob(logprob=-float(token), rank=1, decoded_token=str(token))}


def test_deltas_concatenate_text_ids_and_logprobs_and_the_newer_fields_win() -> None:
    a = _out(
        [CompletionOutput(index=0, text="he", token_ids=[5], logprobs=[_lp(5)])],
        prompt_logprobs=[None],
    )
    b = _out(
        [
            CompletionOutput(
                index=0,
                text="llo",
                token_ids=[6, 7],
                logprobs=[_lp(6), _lp(7)],
                cumulative_logprob=-18.0,
                finish_reason="stop",
                stop_reason=7,
            )
        ],
        finished=True,
        prompt_logprobs=[_lp(2)],
        t=2.0,
    )
    b_before = RequestOutput(**{f: getattr(b, f) for f in b.__struct_fields__})
    merge_outputs(a, b, delta=True)
    (c,) = a.outputs
    assert (c.text, c.token_ids, c.logprobs) == ("hello", [5, 6, 7], [_lp(5), _lp(6), _lp(7)])
    assert (c.cumulative_logprob, c.finish_reason, c.stop_reason) == (-18.0, "stop", 7)
    assert a.finished and a.prompt_logprobs == [None, _lp(2)]
    assert a.num_cached_tokens == 2 and a.metrics == RequestMetrics(
        arrival_time=0.0, last_token_time=2.0
    )
    assert b == b_before and b.outputs[0].token_ids == [6, 7]  # new is left as it was


def test_a_delta_folds_any_number_of_steps_exactly() -> None:
    """Folding step by step equals concatenating every step's delta (n = 2, samples
    changing on different steps)."""
    steps = [
        [CompletionOutput(index=1, text="x", token_ids=[1])],
        [
            CompletionOutput(index=0, text="a", token_ids=[2]),
            CompletionOutput(index=1, text="y", token_ids=[3]),
        ],
        [CompletionOutput(index=0, text="b", token_ids=[4], finish_reason="length")],
    ]
    merged = _out(
        [
            CompletionOutput(index=p.index, text=p.text, token_ids=list(p.token_ids))
            for p in steps[0]
        ]
    )
    for pieces in steps[1:]:
        merge_outputs(merged, _out(pieces), delta=True)
    assert [(c.index, c.text, c.token_ids, c.finish_reason) for c in merged.outputs] == [
        (0, "ab", [2, 4], "length"),
        (1, "xy", [1, 3], None),
    ]
    assert all(c.logprobs is None for c in merged.outputs)


def test_cumulative_outputs_replace_the_unread_samples() -> None:
    a = _out([CompletionOutput(index=0, text="a", token_ids=[1])], prompt_logprobs=[None])
    b = _out(
        [CompletionOutput(index=0, text="ab", token_ids=[1, 2], finish_reason="length")],
        finished=True,
        prompt_logprobs=[None, _lp(2)],
    )
    merge_outputs(a, b, delta=False)
    assert a.outputs == b.outputs and a.outputs[0] is not b.outputs[0]
    assert a.finished and a.prompt_logprobs == [None, _lp(2)]
