"""vLLM's ``RequestOutput.add``: DELTA pieces aggregate into the whole answer (the same as
the FINAL_ONLY output of the same request), or newer samples replace older ones."""

from __future__ import annotations

import pytest

from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs, FinishReason
from actorllm.core.output_processor import OutputProcessor
from actorllm.core.outputs import CompletionOutput, RequestOutput, SamplingMask
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.api.step_outputs import merge_outputs
from actorllm.testing import open_test_engine


def _out(*samples: CompletionOutput, finished: bool = False) -> RequestOutput:
    return RequestOutput(
        request_id="r", prompt=None, prompt_token_ids=[1], prompt_logprobs=None,
        outputs=list(samples), finished=finished,
    )  # fmt: skip


def test_aggregate_appends_sampling_masks() -> None:
    """vLLM's: the aggregated sample's mask is its pieces' lists, in token order."""
    first = _out(
        CompletionOutput(index=0, text="a", token_ids=[1], sampling_mask=SamplingMask([[1, 4]]))
    )
    first.add(
        _out(CompletionOutput(index=0, text="b", token_ids=[2, 3],
                              sampling_mask=SamplingMask([[2], [0, 3]]))),
        aggregate=True,
    )  # fmt: skip
    mask = first.outputs[0].sampling_mask
    assert mask is not None and mask.token_ids == [[1, 4], [2], [0, 3]]


def test_aggregate_appends_and_replace_replaces() -> None:
    first = _out(CompletionOutput(index=0, text="Hel", token_ids=[1], cumulative_logprob=-1.0))
    first.add(
        _out(
            CompletionOutput(
                index=0, text="lo", token_ids=[2], cumulative_logprob=-2.0, finish_reason="length"
            ),
            CompletionOutput(index=1, text="x", token_ids=[9]),
            finished=True,
        ),
        aggregate=True,
    )
    zero, one = first.outputs
    assert (zero.text, zero.token_ids, zero.cumulative_logprob) == ("Hello", [1, 2], -2.0)
    assert zero.finish_reason == "length" and one.text == "x" and first.finished
    newer = CompletionOutput(index=0, text="Hello!", token_ids=[1, 2, 3])
    first.add(_out(newer), aggregate=False)
    assert first.outputs[0] is newer and first.finished  # finished stays


def _fold_add(outs: list[RequestOutput]) -> RequestOutput:
    whole = outs[0]
    for out in outs[1:]:
        whole.add(out, aggregate=True)
    return whole


def _fold_merge(outs: list[RequestOutput]) -> RequestOutput:
    whole = outs[0]
    for out in outs[1:]:
        whole = merge_outputs(whole, out, RequestOutputKind.DELTA)
    return whole


def _by_index(out: RequestOutput) -> list[CompletionOutput]:
    return sorted(out.outputs, key=lambda c: c.index)


def _versioned(kind: RequestOutputKind) -> list[RequestOutput]:
    """One request's outputs where weight versions are first reported mid-request."""
    op = OutputProcessor(tokenizer=None)
    op.add_request(
        "r", None, [1, 2], SamplingParams(max_tokens=9, output_kind=kind, detokenize=False), 0.0
    )
    steps = [(None, [5]), (None, [6]), ("a", [7]), ("b", [8, 9]), ("b", [10])]
    seen = []
    for i, (version, tokens) in enumerate(steps):
        last = i == len(steps) - 1
        out = EngineCoreOutput(
            req_id="r", new_token_ids=tokens, finish_reason=FinishReason.LENGTH if last else None
        )
        eco = EngineCoreOutputs(step_id=i, outputs=[out], timestamp=1.0, weight_version=version)
        seen += [o for _, o in op.process_outputs(eco).request_outputs]
    return seen


@pytest.mark.parametrize("fold", [_fold_add, _fold_merge])
def test_folded_deltas_keep_every_tokens_weight_version(fold) -> None:  # type: ignore[no-untyped-def]
    """add kept no versions when the first piece had none; merge_outputs kept only the
    newest piece's: both must give the final output's one version per token."""
    (final,) = _versioned(RequestOutputKind.FINAL_ONLY)
    whole = fold(_versioned(RequestOutputKind.DELTA))
    assert final.outputs[0].token_weight_versions == [None, None, "a", "b", "b", "b"]
    assert _by_index(whole) == _by_index(final)


@pytest.mark.anyio
@pytest.mark.parametrize("fold", [_fold_add, _fold_merge])
async def test_aggregated_deltas_are_the_final_output(anyio_backend: str, fold) -> None:  # type: ignore[no-untyped-def]
    """Every field of every sample (logprobs, cumulative logprob, finish and stop reasons
    too) and the prompt logprobs: folded DELTA outputs are the FINAL_ONLY output."""
    fields = dict(max_tokens=9, n=2, seed=3, logprobs=2, prompt_logprobs=1)
    async with open_test_engine() as engine:
        prompt = {"prompt_token_ids": [5, 6, 7, 8]}
        delta = SamplingParams(**fields, output_kind=RequestOutputKind.DELTA)  # type: ignore[arg-type]
        pieces = [o async for o in engine.generate(prompt, delta)]
        final = SamplingParams(**fields, output_kind=RequestOutputKind.FINAL_ONLY)  # type: ignore[arg-type]
        (last,) = [o async for o in engine.generate(prompt, final)]
    assert len(pieces) > 2
    whole = fold(pieces)
    assert whole.finished
    assert _by_index(whole) == _by_index(last)
    assert whole.prompt_logprobs == last.prompt_logprobs
    assert whole.num_cached_tokens == last.num_cached_tokens
