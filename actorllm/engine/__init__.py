"""The engine: supervised actors over the core and the worker thread."""

from actorllm.engine.async_engine import AsyncEngine
from actorllm.engine.config import EngineConfig
from actorllm.engine.errors import EngineDeadError, InvalidRequestError, RequestFailedError
from actorllm.engine.llm import LLM
from actorllm.engine.llm_engine import LLMEngine
from actorllm.engine.stats import EngineStats

__all__ = [
    "LLM",
    "AsyncEngine",
    "EngineConfig",
    "EngineDeadError",
    "EngineStats",
    "InvalidRequestError",
    "LLMEngine",
    "RequestFailedError",
]
