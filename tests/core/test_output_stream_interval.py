"""stream_interval (vLLM's): a streaming request's outputs batch that many new tokens; the
first and the final output go out at once; FINAL_ONLY is unaffected."""

from __future__ import annotations

import pytest

from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs, FinishReason
from actorllm.core.output_processor import OutputProcessor
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams, SamplingParamsError
from tests.helpers.tokenizers import demo_tokenizer

DELTA = RequestOutputKind.DELTA
CUMULATIVE = RequestOutputKind.CUMULATIVE
TOKENS = [72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 33]  # 12 steps


def _run(
    params: SamplingParams, engine_interval: int = 1, per_step: int = 1, n_tokens: int = 12
) -> list[list[RequestOutput]]:
    """One request fed ``per_step`` tokens a step (the last step finishes it); the
    outputs of each step."""
    op = OutputProcessor(demo_tokenizer(), stream_interval=engine_interval)
    engine_ids = [e for e, _ in op.add_request("r", None, [1, 2], params, arrival_time=0.0)]
    steps = []
    tokens = TOKENS[:n_tokens]
    for step, start in enumerate(range(0, len(tokens), per_step)):
        chunk = tokens[start : start + per_step]
        last = start + per_step >= len(tokens)
        outs = [
            EngineCoreOutput(
                req_id=e,
                new_token_ids=chunk,
                finish_reason=FinishReason.LENGTH if last else None,
            )
            for e in engine_ids
        ]
        got = op.process_outputs(EngineCoreOutputs(step_id=step, outputs=outs))
        steps.append([o for _, o in got.request_outputs])
    return steps


def _concat(steps: list[list[RequestOutput]]) -> dict[int, tuple[str, list[int]]]:
    got: dict[int, tuple[str, list[int]]] = {}
    for outs in steps:
        for out in outs:
            for c in out.outputs:
                text, ids = got.get(c.index, ("", []))
                got[c.index] = (text + c.text, ids + c.token_ids)
    return got


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=12, output_kind=DELTA),  # the plain lane
        SamplingParams(max_tokens=12, output_kind=DELTA, logprobs=1),  # the general path
        SamplingParams(max_tokens=12, output_kind=DELTA, n=2, seed=1),
    ],
    ids=["plain", "general", "n2"],
)
def test_delta_outputs_every_third_token_and_concatenate_to_the_per_token_stream(
    params: SamplingParams,
) -> None:
    every = _run(params)
    held = _run(params.clone(stream_interval=3))
    assert _concat(held) == _concat(every)
    # Outputs after steps 1 (the first token), 4, 7, 10, and 12 (the final one, 2 tokens).
    sent = [i for i, outs in enumerate(held) if outs]
    assert sent == [0, 3, 6, 9, 11]
    sizes = [len(held[i][0].outputs[0].token_ids) for i in sent]
    assert sizes == [1, 3, 3, 3, 2]
    assert held[11][0].finished and all(not held[i][0].finished for i in sent[:-1])


def test_cumulative_outputs_every_third_token_with_the_whole_text() -> None:
    params = SamplingParams(max_tokens=12, output_kind=CUMULATIVE, stream_interval=3)
    every = _run(params.clone(stream_interval=None))
    held = _run(params)
    assert [i for i, outs in enumerate(held) if outs] == [0, 3, 6, 9, 11]
    for i, outs in enumerate(held):
        if outs:
            assert outs[0].outputs[0].text == every[i][0].outputs[0].text
            assert outs[0].outputs[0].token_ids == TOKENS[: i + 1]


def test_several_tokens_a_step_count_toward_the_interval() -> None:
    held = _run(SamplingParams(max_tokens=12, output_kind=DELTA, stream_interval=3), per_step=2)
    # steps of 2 tokens: 2 (first), 4 (held), 6 (4 since: sent), 8, 10 (sent), 12 (final)
    assert [sum(len(o.outputs[0].token_ids) for o in outs) for outs in held] == [2, 0, 4, 0, 4, 2]


def test_the_request_value_is_clamped_up_to_the_engine_value() -> None:
    params = SamplingParams(max_tokens=12, output_kind=DELTA, stream_interval=2)
    assert [i for i, o in enumerate(_run(params, engine_interval=4)) if o] == [0, 4, 8, 11]
    raised = params.clone(stream_interval=6)
    assert [i for i, o in enumerate(_run(raised, engine_interval=4)) if o] == [0, 6, 11]
    engine_only = params.clone(stream_interval=None)
    assert [i for i, o in enumerate(_run(engine_only, engine_interval=4)) if o] == [0, 4, 8, 11]


def test_final_only_is_unaffected() -> None:
    params = SamplingParams(
        max_tokens=12, output_kind=RequestOutputKind.FINAL_ONLY, stream_interval=5
    )
    held = _run(params, engine_interval=3)
    assert [i for i, o in enumerate(held) if o] == [11]
    assert held[11][0].outputs[0].token_ids == TOKENS


def test_an_abort_sends_the_held_tokens() -> None:
    op = OutputProcessor(None, stream_interval=4)
    op.add_request("r", None, [1], SamplingParams(output_kind=DELTA), arrival_time=0.0)
    sent = []
    for step, tok in enumerate([5, 6, 7]):
        got = op.process_outputs(
            EngineCoreOutputs(
                step_id=step, outputs=[EngineCoreOutput(req_id="r", new_token_ids=[tok])]
            )
        )
        sent += [o.outputs[0].token_ids for _, o in got.request_outputs]
        assert got.held == {"r": 0 if step == 0 else step}
    final = op.abort_request("r")
    assert sent == [[5]] and final is not None and final.outputs[0].token_ids == [6, 7]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3"])
def test_invalid_values_are_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(SamplingParamsError, match="stream_interval") as info:
        SamplingParams(stream_interval=bad)  # type: ignore[arg-type]
    assert info.value.param == "stream_interval"
    with pytest.raises(ValueError, match="stream_interval"):
        OutputProcessor(None, stream_interval=bad)  # type: ignore[arg-type]
