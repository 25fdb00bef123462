"""The engine: supervised actors over the core and the worker thread.

``LLM`` and ``LLMEngine`` are vLLM's front doors (``actorllm.compat.vllm``); they are
reachable here too, loaded on first use from the top-level package so that the engine
itself never imports the compatibility layer.
"""

from typing import TYPE_CHECKING, Any

from actorllm.engine.async_engine import AsyncEngine
from actorllm.engine.config import EngineConfig
from actorllm.engine.errors import EngineDeadError, InvalidRequestError, RequestFailedError
from actorllm.engine.stats import EngineStats

if TYPE_CHECKING:
    from actorllm import LLM as LLM
    from actorllm import LLMEngine as LLMEngine

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


def __getattr__(name: str) -> Any:
    if name in ("LLM", "LLMEngine"):
        import actorllm

        return getattr(actorllm, name)
    raise AttributeError(f"module 'actorllm.engine' has no attribute {name!r}")
