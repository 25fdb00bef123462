"""The output processor's plain and silent lanes build exactly what the general path
builds."""

from __future__ import annotations

import random

from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs, FinishReason
from actorllm.core.output_processor import OutputProcessor, ProcessedOutputs
from actorllm.core.output_state import PIECES_PER_JOIN
from actorllm.core.request_stats import RequestStats
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from tests.helpers.tokenizers import demo_tokenizer

DELTA = RequestOutputKind.DELTA


FINAL = RequestOutputKind.FINAL_ONLY
KINDS = [
    SamplingParams(output_kind=DELTA),  # plain
    SamplingParams(output_kind=DELTA, detokenize=False),  # plain, no text
    SamplingParams(output_kind=DELTA, stop=["e t"]),  # stop strings: general path
    SamplingParams(output_kind=DELTA, n=2, seed=1),  # two samples: general path
    SamplingParams(output_kind=RequestOutputKind.CUMULATIVE),  # general path
    SamplingParams(output_kind=FINAL),  # silent: text decoded at the end
    SamplingParams(output_kind=FINAL, detokenize=False),  # silent, no text
    # Plain but not silent: the separators between added tokens need a decode per token.
    SamplingParams(
        output_kind=FINAL, skip_special_tokens=False, spaces_between_special_tokens=False
    ),
]
NUM_REQUESTS = 3 * len(KINDS)


def _processor(lane: bool) -> tuple[OutputProcessor, RequestStats]:
    stats = RequestStats(4096)
    op = OutputProcessor(demo_tokenizer(), stats=stats)
    for i in range(NUM_REQUESTS):
        params = KINDS[i % len(KINDS)]
        op.add_request(f"r{i}", "p", [274, 324, 5 + i], params, arrival_time=0.25 * i)
    lanes = {rid: lane for rid, (_, _, lane) in op._engine.items()}
    assert set(lanes.values()) == {0, 1, 2}  # every lane is in the test
    if not lane:  # every request down the general path
        op._engine = {rid: (state, user, 0) for rid, (state, user, _) in op._engine.items()}
    return op, stats


def _script(seed: int) -> list[EngineCoreOutputs]:
    """Random steps: some requests skip a step, some start with cached tokens, one in
    three finishes at a random step (stop or length), the first output of each carries
    its scheduled time."""
    rng = random.Random(seed)
    two = [i for i in range(NUM_REQUESTS) if KINDS[i % len(KINDS)].n == 2]
    engine_ids = [f"r{i}" for i in range(NUM_REQUESTS) if i not in two]
    engine_ids += [f"{k}_r{i}" for i in two for k in range(2)]
    ends = {rid: rng.randrange(3, 12) for rid in engine_ids if rng.random() < 0.33}
    seen: set[str] = set()
    steps = []
    for step in range(14):
        outs = []
        for rid in engine_ids:
            if (rid in ends and step > ends[rid]) or rng.random() < 0.2:
                continue
            finish = None
            if ends.get(rid) == step:
                finish = rng.choice([FinishReason.STOP, FinishReason.LENGTH])
            first = rid not in seen
            seen.add(rid)
            outs.append(
                EngineCoreOutput(
                    req_id=rid,
                    new_token_ids=[rng.randrange(3, 4000)],
                    finish_reason=finish,
                    num_cached_tokens=16 if first and rng.random() < 0.5 else 0,
                    scheduled_time=0.1 * step if first else None,
                )
            )
        steps.append(EngineCoreOutputs(step_id=step, outputs=outs, timestamp=1.0 + step))
    # Then every request ends, so the FINAL_ONLY ones show their text.
    outs = [
        EngineCoreOutput(
            req_id=rid, new_token_ids=[rng.randrange(3, 4000)], finish_reason=FinishReason.LENGTH
        )
        for rid in engine_ids
        if rid not in ends
    ]
    steps.append(EngineCoreOutputs(step_id=len(steps), outputs=outs, timestamp=20.0))
    return steps


def test_the_plain_lane_matches_the_general_path() -> None:
    for seed in range(5):
        (fast, fast_stats), (slow, slow_stats) = _processor(True), _processor(False)
        finals = 0
        for eco in _script(seed):
            a: ProcessedOutputs = fast.process_outputs(eco)
            b: ProcessedOutputs = slow.process_outputs(eco)
            assert a == b
            finals += sum(1 for _, out in a.request_outputs if out.finished and out.outputs[0].text)
        assert finals >= 6  # finished outputs with text, silent ones among them
        assert fast.statistics() == slow.statistics()
        sa, sb = fast_stats.snapshot(), slow_stats.snapshot()
        assert sa.generation_tokens == sb.generation_tokens
        assert sa.prompt_tokens == sb.prompt_tokens
        itl = "inter_token_latency_seconds"
        assert sa.histograms[itl].counts == sb.histograms[itl].counts


def test_a_long_stream_matches_the_general_path() -> None:
    """Past PIECES_PER_JOIN tokens (the plain lane joins its text pieces every that many):
    the same deltas as the general path, and a final text equal to the full decode."""
    tok = demo_tokenizer()
    steps = 2 * PIECES_PER_JOIN + 37
    rng = random.Random(7)
    ids = [rng.randrange(3, 4000) for _ in range(steps)]
    params = [SamplingParams(output_kind=DELTA), SamplingParams(output_kind=FINAL)]
    ops = [OutputProcessor(tok), OutputProcessor(tok)]
    for op in ops:
        for i, p in enumerate(params):
            op.add_request(f"r{i}", "p", [274, 324], p, arrival_time=0.0)
    fast, slow = ops
    slow._engine = {rid: (state, user, 0) for rid, (state, user, _) in slow._engine.items()}
    deltas: list[str] = []
    final = ""
    for step, token in enumerate(ids):
        finish = FinishReason.LENGTH if step == steps - 1 else None
        eco = EngineCoreOutputs(
            step_id=step,
            outputs=[
                EngineCoreOutput(req_id=f"r{i}", new_token_ids=[token], finish_reason=finish)
                for i in range(len(params))
            ],
            timestamp=1.0 + step,
        )
        a, b = fast.process_outputs(eco), slow.process_outputs(eco)
        assert a == b
        for rid, out in a.request_outputs:
            if rid == "r0":
                deltas.append(out.outputs[0].text)
            else:
                final = out.outputs[0].text
    assert "".join(deltas) == tok.decode(ids) == final
