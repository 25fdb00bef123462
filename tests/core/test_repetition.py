"""repetition_detection: vLLM's parameters, rule and errors."""

from __future__ import annotations

import msgspec
import pytest

from actorllm.core.repetition import RepetitionDetectionParams, has_repetition
from actorllm.core.sampling_params import SamplingParams

P = RepetitionDetectionParams


@pytest.mark.parametrize(
    ("tokens", "params", "found"),
    [
        ([1, 1, 1], P(max_pattern_size=1, min_count=3), True),
        ([1, 1], P(max_pattern_size=1, min_count=3), False),  # too short for 3 repeats
        ([4, 1, 2, 1, 2, 1, 2], P(max_pattern_size=3, min_count=3), True),
        ([1, 2, 1, 2, 1, 3], P(max_pattern_size=3, min_count=3), False),  # the tail breaks it
        ([1, 2, 3, 1, 2, 3], P(max_pattern_size=3, min_count=2), True),
        ([1, 2, 3, 1, 2, 3], P(max_pattern_size=2, min_count=2), False),  # pattern too long
        ([5, 5, 5, 5], P(max_pattern_size=2, min_pattern_size=2, min_count=2), True),  # 55 55
        ([6, 5, 5, 5], P(max_pattern_size=2, min_pattern_size=2, min_count=2), False),
        ([1, 1, 1, 1], P(), False),  # off
    ],
)
def test_has_repetition_is_vllms_rule(tokens: list[int], params: P, found: bool) -> None:
    assert has_repetition(tokens, params) is found


def test_invalid_params_are_refused_with_vllms_messages() -> None:
    with pytest.raises(ValueError, match="min_pattern_size <= max_pattern_size"):
        P(max_pattern_size=1, min_pattern_size=2, min_count=2)
    with pytest.raises(ValueError, match="min_pattern_size <= max_pattern_size"):
        P(max_pattern_size=-1)
    with pytest.raises(ValueError, match="min_count must be >= 2"):
        P(max_pattern_size=2, min_count=1)
    assert P(max_pattern_size=0, min_count=0) == P()


def test_the_field_survives_clone_and_the_wire() -> None:
    params = SamplingParams(repetition_detection=P(max_pattern_size=4, min_count=3))
    assert params.clone().repetition_detection == params.repetition_detection
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(params), type=SamplingParams)
    assert wire == params


def test_vllms_import_path() -> None:
    from actorllm.sampling_params import RepetitionDetectionParams as FromVllmPath

    assert FromVllmPath is RepetitionDetectionParams
