"""vLLM's exception names (``actorllm.exceptions``) catch what they caught in vLLM."""

import pytest

from actorllm import SamplingParams
from actorllm.core.errors import InvalidRequestError, RequestTooLongError
from actorllm.engine.errors import EngineError, RequestFailedError
from actorllm.exceptions import (
    GenerationError,
    MaxQueuedTokensError,
    QueueOverflowError,
    VLLMClientError,
    VLLMServerError,
    VLLMValidationError,
)


def test_a_bad_sampling_parameter_is_a_validation_error():
    with pytest.raises(VLLMValidationError) as info:
        SamplingParams(n=0)
    assert info.value.param == "n"
    assert isinstance(info.value, VLLMClientError)


def test_the_names_are_the_engines_errors_in_the_same_role():
    assert VLLMValidationError is VLLMClientError is InvalidRequestError
    assert issubclass(RequestTooLongError, VLLMValidationError)
    assert VLLMServerError is EngineError
    assert GenerationError is RequestFailedError
    assert issubclass(QueueOverflowError, VLLMServerError)
    assert issubclass(MaxQueuedTokensError, VLLMServerError)
