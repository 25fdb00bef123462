"""OutputProcessor driven with hand-built EngineCoreOutputs (no scheduler)."""

from __future__ import annotations

import pytest

from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs, FinishReason
from actorllm.core.model_runner_output import TokenLogprobs
from actorllm.core.output_processor import OutputProcessor, ProcessedOutputs
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from tests.helpers.tokenizers import ENDOFTEXT_ID, IM_END_ID, demo_tokenizer

CUMULATIVE, DELTA, FINAL_ONLY = (
    RequestOutputKind.CUMULATIVE,
    RequestOutputKind.DELTA,
    RequestOutputKind.FINAL_ONLY,
)
PROMPT = [274, 324]  # " the of"


def ids(text: str) -> list[int]:
    return demo_tokenizer().encode(text, add_special_tokens=False).ids


def out(req_id: str, tokens: list[int], **kw: object) -> EngineCoreOutput:
    return EngineCoreOutput(req_id=req_id, new_token_ids=tokens, **kw)  # type: ignore[arg-type]


def step(op: OutputProcessor, *outputs: EngineCoreOutput, t: float = 0.0) -> ProcessedOutputs:
    return op.process_outputs(EngineCoreOutputs(step_id=0, outputs=list(outputs), timestamp=t))


def run_tokens(
    op: OutputProcessor, req_id: str, tokens: list[int], finish: FinishReason | None = None
) -> list[RequestOutput]:
    """One token per step; the last step carries ``finish``."""
    results = []
    for i, tok in enumerate(tokens):
        last = i == len(tokens) - 1
        res = step(op, out(req_id, [tok], finish_reason=finish if last else None), t=float(i + 1))
        results += [ro for _, ro in res.request_outputs]
    return results


def new_op(req_id: str = "r", **params: object) -> OutputProcessor:
    op = OutputProcessor(demo_tokenizer())
    op.add_request(req_id, "p", PROMPT, SamplingParams(**params), arrival_time=0.5)  # type: ignore[arg-type]
    return op


# -- output kinds ------------------------------------------------------------------------


def test_cumulative_reports_everything_so_far() -> None:
    text = "Hi 龘 there"
    tokens = ids(text)
    op = new_op(output_kind=CUMULATIVE)
    outs = run_tokens(op, "r", tokens, FinishReason.LENGTH)
    assert len(outs) == len(tokens)
    for n, ro in enumerate(outs, 1):
        assert ro.request_id == "r" and ro.prompt == "p" and ro.prompt_token_ids == PROMPT
        assert ro.outputs[0].token_ids == tokens[:n]
        assert text.startswith(ro.outputs[0].text)
        assert "\ufffd" not in ro.outputs[0].text
    final = outs[-1]
    assert final.finished and final.outputs[0].text == text
    assert final.outputs[0].finish_reason == "length"
    assert not any(ro.finished for ro in outs[:-1])
    assert final.metrics is not None
    assert (final.metrics.arrival_time, final.metrics.first_token_time) == (0.5, 1.0)
    assert final.metrics.last_token_time == final.metrics.finished_time == float(len(tokens))
    assert op.num_unfinished == 0 and not op.has_request("r")


def test_delta_reports_only_what_is_new() -> None:
    text = "A 🦜 flies, 中文!"
    tokens = ids(text)
    op = new_op(output_kind=DELTA)
    outs = run_tokens(op, "r", tokens, FinishReason.LENGTH)
    assert [ro.outputs[0].token_ids for ro in outs] == [[t] for t in tokens]
    assert "".join(ro.outputs[0].text for ro in outs) == text
    assert all(ro.outputs[0].finish_reason is None for ro in outs[:-1])
    assert outs[-1].outputs[0].finish_reason == "length" and outs[-1].finished


def test_final_only_reports_once() -> None:
    tokens = ids("just once")
    op = new_op(output_kind=FINAL_ONLY)
    outs = run_tokens(op, "r", tokens, FinishReason.LENGTH)
    assert len(outs) == 1 and outs[0].finished
    assert outs[0].outputs[0].text == "just once"
    assert outs[0].outputs[0].token_ids == tokens


def test_text_is_empty_without_detokenization() -> None:
    tokens = ids("hello stop")
    op = OutputProcessor(None)  # no tokenizer at all
    op.add_request("r", None, PROMPT, SamplingParams(logprobs=0), arrival_time=0.0)
    assert step(op, out("unknown", [1])).request_outputs == []  # unknown ids are ignored
    lp = tl(tokens[0], -1.0, 1, [])
    ro = step(op, out("r", tokens, new_logprobs=[lp])).request_outputs[0][1]
    assert ro.outputs[0].text == "" and ro.outputs[0].token_ids == tokens
    assert ro.outputs[0].logprobs is not None
    assert ro.outputs[0].logprobs[0][tokens[0]].decoded_token is None
    # detokenize=False: no text, and stop strings (which need text) do not apply.
    op = new_op(detokenize=False, stop=["stop"])
    final = run_tokens(op, "r", tokens, FinishReason.LENGTH)[-1].outputs[0]
    assert final.text == "" and final.token_ids == tokens and final.finish_reason == "length"


def test_stop_token_is_kept_in_ids_but_not_in_text() -> None:
    stop_tok = ids(" of")[0]
    tokens = [*ids("one two"), stop_tok]
    op = new_op(stop_token_ids=[stop_tok])
    final = run_tokens(op, "r", tokens, FinishReason.STOP)[-1].outputs[0]
    assert final.text == "one two" and final.token_ids == tokens
    op = new_op(stop_token_ids=[stop_tok], include_stop_str_in_output=True)
    final = run_tokens(op, "r", tokens, FinishReason.STOP)[-1].outputs[0]
    assert final.text == "one two of"
    # EOS with special tokens shown: still not part of the text.
    op = new_op(skip_special_tokens=False)
    final = run_tokens(op, "r", [*ids("x"), IM_END_ID, ENDOFTEXT_ID], FinishReason.STOP)[-1]
    assert final.outputs[0].text == "x<|im_end|>"


def test_ends_inside_a_character_like_full_decode() -> None:
    tokens = ids("a龘")[:-1]
    op = new_op()
    final = run_tokens(op, "r", tokens, FinishReason.LENGTH)[-1].outputs[0]
    assert final.text == demo_tokenizer().decode(tokens) and final.text.endswith("\ufffd")


# -- stop strings ------------------------------------------------------------------------


def test_stop_string_split_across_steps_in_delta_stream() -> None:
    text = "The answer: 42</answer> and more"
    tokens = ids(text)
    op = new_op(output_kind=DELTA, stop=["</answer>"])
    shown, finished_at, aborts = "", None, []
    for i, tok in enumerate(tokens):
        res = step(op, out("r", [tok]), t=float(i))
        aborts += res.reqs_to_abort
        for _, ro in res.request_outputs:
            shown += ro.outputs[0].text
            assert "<" not in shown  # never a piece of the stop string
            if ro.finished:
                finished_at = i
                final = ro.outputs[0]
    assert shown == "The answer: 42"
    assert finished_at is not None and aborts == ["r"]
    assert final.finish_reason == "stop" and final.stop_reason == "</answer>"
    assert op.num_unfinished == 0
    # A late output for the stopped request (async scheduling) is ignored.
    assert step(op, out("r", [tokens[-1]])).request_outputs == []


def test_stop_string_in_one_step_keeps_all_ids_truncates_text() -> None:
    tokens = ids("abc STOP def")
    op = new_op(stop=["STOP"])
    res = step(op, out("r", tokens))
    ((rid, ro),) = res.request_outputs
    assert rid == "r" and ro.finished and res.finished_ids == ["r"]
    assert ro.outputs[0].text == "abc " and ro.outputs[0].token_ids == tokens
    op = new_op(stop=["STOP"], include_stop_str_in_output=True)
    assert step(op, out("r", tokens)).request_outputs[0][1].outputs[0].text == "abc STOP"


def test_stop_string_at_the_start_and_when_the_scheduler_also_finished() -> None:
    op = new_op(stop=["Hi"])
    res = step(op, out("r", ids("Hi there"), finish_reason=FinishReason.LENGTH))
    ro = res.request_outputs[0][1]
    assert ro.outputs[0].text == "" and ro.outputs[0].stop_reason == "Hi"
    assert ro.outputs[0].finish_reason == "stop"
    assert res.reqs_to_abort == []  # the scheduler already finished it


def test_min_tokens_protects_early_stop_strings() -> None:
    tokens = ids("x STOP y STOP z")
    op = new_op(stop=["STOP"], min_tokens=4)
    final = run_tokens(op, "r", tokens)[-1]
    assert final.finished and final.outputs[0].text == "x STOP y "


# -- n > 1 -------------------------------------------------------------------------------


def test_fan_out_ids_and_seeds() -> None:
    op = OutputProcessor(demo_tokenizer())
    reqs = op.add_request("u", None, PROMPT, SamplingParams(n=3, seed=7), arrival_time=0.0)
    assert [r for r, _ in reqs] == ["0_u", "1_u", "2_u"]
    assert [(p.n, p.seed) for _, p in reqs] == [(1, 7), (1, 8), (1, 9)]
    assert op.engine_request_ids("u") == ["0_u", "1_u", "2_u"]
    assert op.has_request("1_u") and op.num_unfinished == 1
    with pytest.raises(ValueError):
        op.add_request("u", None, PROMPT, SamplingParams(), arrival_time=0.0)
    unseeded = op.add_request("v", None, PROMPT, SamplingParams(n=2), arrival_time=0.0)
    assert [p.seed for _, p in unseeded] == [None, None]
    wrapped = op.add_request("w", None, PROMPT, SamplingParams(n=2, seed=2**64 - 1), 0.0)
    assert [p.seed for _, p in wrapped] == [2**64 - 1, 0]  # stays a valid 64-bit seed


@pytest.mark.parametrize("kind", [CUMULATIVE, DELTA])
def test_n_streams_changed_children_and_finishes_with_the_last(kind: RequestOutputKind) -> None:
    op = OutputProcessor(demo_tokenizer())
    op.add_request("u", "p", PROMPT, SamplingParams(n=3, output_kind=kind), arrival_time=0.0)
    a, b, c = ids(" the"), ids(" of"), ids(" return")
    res = step(op, out("2_u", c), out("0_u", a))
    ((uid, ro),) = res.request_outputs
    assert uid == "u" and ro.request_id == "u" and not ro.finished
    assert [(o.index, o.text) for o in ro.outputs] == [(0, " the"), (2, " return")]
    res = step(op, out("1_u", b, finish_reason=FinishReason.LENGTH))
    ro = res.request_outputs[0][1]
    assert [o.index for o in ro.outputs] == [1] and not ro.finished and res.finished_ids == []
    res = step(
        op,
        out("0_u", b, finish_reason=FinishReason.LENGTH),
        out("2_u", a, finish_reason=FinishReason.LENGTH),
    )
    ro = res.request_outputs[0][1]
    assert ro.finished and res.finished_ids == ["u"] and op.num_unfinished == 0
    texts = {o.index: o.text for o in ro.outputs}
    if kind == CUMULATIVE:
        assert texts == {0: " the of", 2: " return the"}
    else:
        assert texts == {0: " of", 2: " the"}


def test_n_final_only_emits_all_children_sorted_once() -> None:
    op = OutputProcessor(demo_tokenizer())
    op.add_request("u", "p", PROMPT, SamplingParams(n=2, output_kind=FINAL_ONLY), arrival_time=0.0)
    assert step(op, out("1_u", ids(" of"), finish_reason=FinishReason.LENGTH)).request_outputs == []
    assert step(op, out("0_u", ids(" the"))).request_outputs == []
    res = step(op, out("0_u", ids(" of"), finish_reason=FinishReason.STOP, stop_reason=5))
    ((_, ro),) = res.request_outputs
    assert ro.finished and [o.index for o in ro.outputs] == [0, 1]
    assert [o.text for o in ro.outputs] == [" the", " of"]
    assert [o.finish_reason for o in ro.outputs] == ["stop", "length"]
    assert ro.outputs[0].stop_reason == 5


def test_n_explicit_children_form() -> None:
    op = OutputProcessor(demo_tokenizer())
    params = SamplingParams(n=2, seed=1, output_kind=FINAL_ONLY)
    for i in range(2):
        ((eid, child),) = op.add_request(f"{i}_u", "p", PROMPT, params, 0.0, parent_id="u", index=i)
        assert eid == f"{i}_u" and child.n == 1 and child.seed == 1 + i
    assert step(op, out("0_u", [5], finish_reason=FinishReason.LENGTH)).request_outputs == []
    res = step(op, out("1_u", [6], finish_reason=FinishReason.LENGTH))
    assert res.finished_ids == ["u"] and len(res.request_outputs[0][1].outputs) == 2


# -- logprobs ----------------------------------------------------------------------------


def tl(chosen: int, lp: float, rank: int, top: list[tuple[int, float]]) -> TokenLogprobs:
    return TokenLogprobs(
        token_ids=[chosen, *(t for t, _ in top)], logprobs=[lp, *(p for _, p in top)], rank=rank
    )


def test_sample_logprobs_conversion_and_cumulative() -> None:
    the, of = ids(" the")[0], ids(" of")[0]
    op = new_op(logprobs=2, output_kind=DELTA)
    lp1 = tl(the, -0.5, 1, [(the, -0.5), (of, -1.0)])
    lp2 = tl(of, -2.0, 3, [(the, -0.25), (IM_END_ID, -1.5)])
    r1 = step(op, out("r", [the], new_logprobs=[lp1])).request_outputs[0][1].outputs[0]
    r2 = step(op, out("r", [of], new_logprobs=[lp2])).request_outputs[0][1].outputs[0]
    assert r1.logprobs is not None and r2.logprobs is not None
    assert len(r1.logprobs) == 1 and len(r2.logprobs) == 1  # DELTA: only the new position
    first, second = r1.logprobs[0], r2.logprobs[0]
    assert list(first) == [the, of]
    assert (first[the].logprob, first[the].rank, first[the].decoded_token) == (-0.5, 1, " the")
    assert list(second) == [of, the, IM_END_ID]  # chosen first, then the top-k
    assert [second[t].rank for t in second] == [3, 1, 2]
    assert second[IM_END_ID].decoded_token == "<|im_end|>"
    assert r1.cumulative_logprob == -0.5 and r2.cumulative_logprob == -2.5


def test_no_logprobs_requested_gives_none() -> None:
    op = new_op()
    ro = step(op, out("r", [5])).request_outputs[0][1]
    assert ro.outputs[0].logprobs is None and ro.outputs[0].cumulative_logprob is None
    assert ro.prompt_logprobs is None


@pytest.mark.parametrize("kind", [CUMULATIVE, DELTA])
def test_prompt_logprobs_accumulate_across_chunks(kind: RequestOutputKind) -> None:
    prompt = [274, 324, 349, 491]
    op = OutputProcessor(demo_tokenizer())
    op.add_request("r", None, prompt, SamplingParams(prompt_logprobs=1, output_kind=kind), 0.0)
    chunk1 = [tl(324, -1.0, 2, [(274, -0.5)])]  # positions 1 of a 2-token first chunk
    chunk2 = [tl(349, -2.0, 1, [(349, -2.0)]), tl(491, -3.0, 4, [(274, -0.1)])]
    # A partial prefill reports nothing to the caller yet...
    assert step(op, out("r", [], new_prompt_logprobs=chunk1)).request_outputs == []
    ro = step(op, out("r", [5], new_prompt_logprobs=chunk2)).request_outputs[0][1]
    plp = ro.prompt_logprobs
    assert plp is not None and len(plp) == len(prompt) and plp[0] is None
    assert [next(iter(p)) for p in plp[1:] if p] == [324, 349, 491]
    assert plp[1] is not None and plp[1][274].rank == 1 and plp[1][324].rank == 2
    assert plp[3] is not None and plp[3][491].decoded_token == "def"
    later = step(op, out("r", [6])).request_outputs[0][1].prompt_logprobs
    assert later == ([] if kind == DELTA else plp)


# -- abort / fail ------------------------------------------------------------------------


def test_abort_returns_a_final_output_and_forgets() -> None:
    op = new_op(output_kind=DELTA, stop=["zzz"])
    step(op, out("r", ids("hello wor")))
    ro = op.abort_request("r")
    assert ro is not None and ro.finished
    assert ro.outputs[0].finish_reason == "abort"
    assert ro.outputs[0].text == "or"  # the tail held back for "zzz", released
    assert not op.has_request("r") and op.abort_request("r") is None
    assert step(op, out("r", [5])).request_outputs == []


def test_abort_n_aborts_unfinished_children_only() -> None:
    op = OutputProcessor(demo_tokenizer())
    op.add_request("u", None, PROMPT, SamplingParams(n=2, output_kind=FINAL_ONLY), 0.0)
    step(op, out("0_u", [5], finish_reason=FinishReason.LENGTH))
    assert op.engine_request_ids("u") == ["1_u"]
    ro = op.abort_request("u")
    assert ro is not None and ro.finished
    assert [o.finish_reason for o in ro.outputs] == ["length", "abort"]
    assert op.num_unfinished == 0 and op.engine_request_ids("u") == []


def test_fail_request_carries_the_error() -> None:
    op = new_op()
    step(op, out("r", [5]))
    ro = op.fail_request("r", "poison request")
    assert ro.finished and ro.error == "poison request"
    assert ro.outputs[0].finish_reason == "error" and ro.outputs[0].token_ids == [5]
    assert not op.has_request("r")
    unknown = op.fail_request("nope", "bad")
    assert unknown.finished and unknown.error == "bad" and unknown.request_id == "nope"
