"""FlatLogprobs reads as the list form of logprobs does (vLLM's container)."""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence

import msgspec
import pytest

from actorllm.core.logprob_types import FlatLogprobs, Logprob, concat_logprobs
from actorllm.logprobs import create_prompt_logprobs, create_sample_logprobs

LISTED = [
    {7: Logprob(logprob=-0.5, rank=2, decoded_token="a"), 3: Logprob(logprob=-0.1, rank=1)},
    {9: Logprob(logprob=-2.0, rank=4)},
    {},
    {1: Logprob(logprob=-0.3, rank=1, decoded_token="b")},
]


def test_flat_logprobs_read_as_the_list_does() -> None:
    flat = FlatLogprobs.of(LISTED)
    assert len(flat) == len(LISTED) and flat == LISTED and LISTED == flat  # noqa: SIM300 (list on the left)
    assert list(flat) == LISTED
    for i in range(-4, 4):
        assert flat[i] == LISTED[i]
    assert list(flat[0]) == [7, 3]  # the order within a position is kept
    for s in (slice(1, 3), slice(None, 2), slice(2, None), slice(3, 1), slice(None, None, 2)):
        part = flat[s]
        assert isinstance(part, FlatLogprobs) and part == LISTED[s]
    assert isinstance(flat, MutableSequence) and isinstance(flat, Sequence)
    with pytest.raises(IndexError):
        flat[4]
    with pytest.raises(TypeError, match="Cannot set"):
        flat[0] = {}


def test_flat_logprobs_grow_join_and_cross_actors() -> None:
    flat = FlatLogprobs.of(LISTED[:2])
    joined = concat_logprobs(flat, FlatLogprobs.of(LISTED[2:]))
    assert isinstance(joined, FlatLogprobs) and joined == LISTED and len(flat) == 2
    assert concat_logprobs(LISTED[:1], None) == LISTED[:1]
    wire = msgspec.msgpack.encode(joined)
    assert msgspec.msgpack.decode(wire, type=FlatLogprobs | list[dict[int, Logprob]]) == LISTED


def test_vllms_constructors() -> None:
    assert create_sample_logprobs(True) == [] and isinstance(
        create_sample_logprobs(True), FlatLogprobs
    )
    assert create_prompt_logprobs(False) == [None]
    flat_prompt = create_prompt_logprobs(True)
    assert isinstance(flat_prompt, FlatLogprobs) and len(flat_prompt) == 1 and flat_prompt[0] == {}


def test_vllms_import_paths() -> None:
    import actorllm.logprobs
    import actorllm.outputs

    assert actorllm.logprobs.FlatLogprobs is FlatLogprobs
    assert actorllm.logprobs.Logprob is actorllm.outputs.Logprob is Logprob
