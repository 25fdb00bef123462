"""The engine: supervised actors over the core and the worker thread.

vLLM's front doors over it (``LLM``, ``LLMEngine``, ``AsyncLLM``) are in
:mod:`actorllm.compat.vllm`, one layer up, and exported by the top-level package.
"""

from actorllm.engine.api.async_engine import AsyncEngine
from actorllm.engine.api.stats import EngineStats
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.errors import EngineDeadError, InvalidRequestError, RequestFailedError

__all__ = [
    "AsyncEngine",
    "EngineConfig",
    "EngineDeadError",
    "EngineStats",
    "InvalidRequestError",
    "RequestFailedError",
]
