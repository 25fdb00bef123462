"""The engine: supervised actors over the core and the worker thread.

vLLM's front doors over it (``LLM``, ``LLMEngine``, ``AsyncLLM``) are in
:mod:`actorllm.compat.vllm`, one layer up, and exported by the top-level package.
"""

from actorllm.engine.async_engine import AsyncEngine
from actorllm.engine.config import EngineConfig
from actorllm.engine.errors import EngineDeadError, InvalidRequestError, RequestFailedError
from actorllm.engine.stats import EngineStats

__all__ = [
    "AsyncEngine",
    "EngineConfig",
    "EngineDeadError",
    "EngineStats",
    "InvalidRequestError",
    "RequestFailedError",
]
