from __future__ import annotations

import msgspec
import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsError
from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP


@pytest.mark.parametrize(
    ("kwargs", "match", "param"),
    [
        ({}, "got none", "structured_outputs"),
        ({"regex": "a", "choice": ["a"]}, "got regex, choice", "structured_outputs"),
        ({"choice": []}, "must not be empty", "structured_outputs.choice"),
        ({"choice": "abc"}, "list of strings", "structured_outputs.choice"),  # not a, b or c
        ({"json": "{not json"}, "not valid JSON", "structured_outputs.json"),
        ({"json": "[1]"}, "must be a JSON schema", "structured_outputs.json"),
        ({"json": [1]}, "must be a JSON schema", "structured_outputs.json"),
        ({"regex": ""}, "non-empty", "structured_outputs.regex"),
        ({"structural_tag": "[]"}, "JSON object", "structured_outputs.structural_tag"),
        ({"json_object": True, "backend": "outlines"}, "must be one of",
         "structured_outputs.backend"),
        ({"json_object": "yes"}, "boolean", "structured_outputs.json_object"),
        ({"json_object": True, "disable_any_whitespace": "no"}, "boolean",
         "structured_outputs.disable_any_whitespace"),
        ({"json_object": True, "whitespace_pattern": 3}, "string",
         "structured_outputs.whitespace_pattern"),
    ],
)  # fmt: skip
def test_shape_errors_are_typed_and_name_the_field(kwargs: dict, match: str, param: str) -> None:
    with pytest.raises(StructuredOutputsError, match=match) as info:
        SOP(**kwargs)
    assert isinstance(info.value, InvalidRequestError)
    assert info.value.param == param and str(info.value).startswith(param + " ")


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


def test_vllm_010_guided_decoding_spelling() -> None:
    from actorllm.sampling_params import GuidedDecodingParams

    spec = GuidedDecodingParams(choice=["a", "b"])
    params = SamplingParams(guided_decoding=spec)
    assert params.structured_outputs == spec and params.guided_decoding is None
    assert params.clone(max_tokens=3).structured_outputs == spec
    with pytest.raises(ValueError, match="guided_decoding"):
        SamplingParams(guided_decoding=spec, structured_outputs=SOP(regex="x"))
