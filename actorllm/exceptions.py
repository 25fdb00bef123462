"""vLLM's exception names, where vLLM keeps them (``vllm.exceptions``), for the errors
actorllm raises in the same role, so ``except VLLMValidationError`` catches what it did:

=========================  =================================================================
``VLLMValidationError``    ``InvalidRequestError`` (a request refused; HTTP 400; ``param``
                           names the field, where vLLM says ``parameter``)
``VLLMClientError``        ``InvalidRequestError``: every error the request causes derives
                           from it
``VLLMServerError``        ``EngineError``: failures that are not the caller's fault
``GenerationError``        ``RequestFailedError``: the engine failed this one request
``QueueOverflowError``     the same: the queue of open requests is full (HTTP 503)
``MaxQueuedTokensError``   the same: the prefill token backlog is full (HTTP 503)
=========================  =================================================================

The definitions live in :mod:`actorllm.core.errors` and :mod:`actorllm.engine.errors`.
vLLM's ``VLLMError`` (one base of both kinds) has no counterpart: catch
``InvalidRequestError`` and ``EngineError``.
"""

from actorllm.core.errors import InvalidRequestError as VLLMClientError
from actorllm.core.errors import InvalidRequestError as VLLMValidationError
from actorllm.engine.errors import EngineError as VLLMServerError
from actorllm.engine.errors import MaxQueuedTokensError, QueueOverflowError
from actorllm.engine.errors import RequestFailedError as GenerationError

__all__ = [
    "GenerationError",
    "MaxQueuedTokensError",
    "QueueOverflowError",
    "VLLMClientError",
    "VLLMServerError",
    "VLLMValidationError",
]
