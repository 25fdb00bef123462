"""Per-token weight versions on outputs: ``token_weight_versions`` (ours, one per token of
each output) and vLLM's ``weight_versions`` spans on the final output."""

from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs, FinishReason
from actorllm.core.output_processor import OutputProcessor
from actorllm.core.outputs import WeightVersionSpan
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams


def _run(kind: RequestOutputKind, steps: list[tuple[str | None, list[int], bool]]):
    op = OutputProcessor(tokenizer=None)
    params = SamplingParams(max_tokens=10, output_kind=kind, detokenize=False)
    op.add_request("r", None, [1, 2], params, arrival_time=0.0)
    seen = []
    for i, (version, tokens, last) in enumerate(steps):
        out = EngineCoreOutput(
            req_id="r", new_token_ids=tokens, finish_reason=FinishReason.LENGTH if last else None
        )
        eco = EngineCoreOutputs(step_id=i, outputs=[out], timestamp=1.0, weight_version=version)
        seen += [o for _, o in op.process_outputs(eco).request_outputs]
    return seen


def test_delta_outputs_carry_their_tokens_versions() -> None:
    outs = _run(
        RequestOutputKind.DELTA,
        [("a", [5], False), ("a", [6], False), ("b", [7, 8], False), ("b", [9], True)],
    )
    got = [o.outputs[0].token_weight_versions for o in outs]
    assert got == [["a"], ["a"], ["b", "b"], ["b"]]
    final = outs[-1].outputs[0]
    assert final.weight_versions == [WeightVersionSpan("a", 0, 2), WeightVersionSpan("b", 2, 5)]
    assert all(o.outputs[0].weight_versions is None for o in outs[:-1])  # final only


def test_cumulative_and_unknown_versions() -> None:
    outs = _run(
        RequestOutputKind.CUMULATIVE,
        [(None, [5], False), ("a", [6], False), ("b", [7], True)],  # None: a replay
    )
    final = outs[-1].outputs[0]
    assert final.token_ids == [5, 6, 7]
    assert final.token_weight_versions == [None, "a", "b"]
    assert final.weight_versions == [WeightVersionSpan("a", 1, 2), WeightVersionSpan("b", 2, 3)]


def test_no_version_reported_leaves_the_fields_unset() -> None:
    outs = _run(RequestOutputKind.FINAL_ONLY, [(None, [5], False), (None, [6], True)])
    final = outs[-1].outputs[0]
    assert final.token_weight_versions is None and final.weight_versions is None
