"""What ``LLM`` and ``LLMEngine`` share: an engine on its own thread, its lifetime, and the
control plane as blocking calls.

Closing is optional: ``close()``, ``with``, ``del`` and the end of the script all stop the
engine and its threads (see :mod:`actorllm.engine.engine_thread`).
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any, Self

from actorllm.engine.async_engine import AsyncEngine
from actorllm.engine.config import EngineConfig
from actorllm.engine.engine_thread import EngineThread


class SyncFacade:
    """An engine driven from synchronous code. ``model`` is a model directory, an
    ``EngineConfig`` or None (the demo model); keyword arguments are ``EngineConfig``
    fields; ``backend`` is the event loop the engine runs on ("trio" or "asyncio")."""

    def __init__(
        self,
        model: str | Path | EngineConfig | None = None,
        *,
        backend: str = "trio",
        **config: Any,
    ) -> None:
        name = f"actorllm-{type(self).__name__.lower()}"
        self._thread = EngineThread(model, config, backend=backend, name=name)
        self.engine: AsyncEngine = self._thread.engine
        # Dropping the last reference (``del llm``) closes the engine; the thread module
        # closes every engine still open at interpreter exit.
        self._finalizer = weakref.finalize(self, self._thread.close)

    # -- control plane --------------------------------------------------------------------

    def sleep(self, level: int = 1) -> None:
        """Free the KV cache (level 2: the weights too) until :meth:`wake_up`."""
        self._thread.call(self.engine.sleep, level)

    def wake_up(self) -> None:
        self._thread.call(self.engine.wake_up)

    def is_sleeping(self) -> bool:
        return self._thread.call(self.engine.is_sleeping)

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block; False (nothing done) while any block is in use."""
        return self._thread.call(self.engine.reset_prefix_cache)

    def get_tokenizer(self) -> Any:
        """The Hugging Face tokenizer the engine uses."""
        return self.engine.tokenizer

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the engine and its threads (idempotent)."""
        self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
