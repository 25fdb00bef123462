from __future__ import annotations

import msgspec
import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsError
from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "got none"),
        ({"regex": "a", "choice": ["a"]}, "got regex, choice"),
        ({"choice": []}, "must not be empty"),
        ({"json": "{not json"}, "not valid JSON"),
        ({"json": "[1]"}, "must be a JSON schema"),
        ({"regex": ""}, "non-empty"),
        ({"structural_tag": "[]"}, "JSON object"),
        ({"json_object": True, "backend": "outlines"}, "backend must be one of"),
    ],
)
def test_shape_errors_are_typed(kwargs: dict, match: str) -> None:
    with pytest.raises(StructuredOutputsError, match=match) as info:
        SOP(**kwargs)
    assert isinstance(info.value, InvalidRequestError)
    assert info.value.param == "structured_outputs"


def test_kind_and_key() -> None:
    assert SOP(json_object=True).kind == "json_object"
    assert SOP(json_object=False, regex="x").kind == "regex"
    a = SOP(json={"a": {"type": "string"}, "b": 1}).key
    b = SOP(json='{"a": {"type": "string"},  "b": 1}').key
    assert a == b and hash(a) == hash(b)
    assert SOP(json={"b": 1, "a": {"type": "string"}}).key != a  # property order matters
    assert (
        SOP(json={"type": "object"}, disable_any_whitespace=True).key
        != SOP(json={"type": "object"}).key
    )


def test_rides_on_sampling_params_through_msgspec() -> None:
    p = SamplingParams(structured_outputs=SOP(choice=["x", "y"]))
    back = msgspec.json.decode(msgspec.json.encode(p), type=SamplingParams)
    assert back.structured_outputs == p.structured_outputs
