"""vLLM's import path (``vllm.v1.engine.exceptions``) for the errors an ``AsyncLLM`` caller
catches: ``EngineDeadError`` (the engine stopped; no request runs until a new one starts)
and ``EngineGenerateError`` (one request failed, the engine goes on), which here is
:class:`~actorllm.engine.errors.RequestFailedError`."""

from actorllm.engine.errors import EngineDeadError as EngineDeadError
from actorllm.engine.errors import RequestFailedError as EngineGenerateError

__all__ = ["EngineDeadError", "EngineGenerateError"]
