"""The CPU KV cache's size from the environment: vLLM's ``VLLM_CPU_KVCACHE_SPACE``.

vLLM's CPU build reads the cache's size in whole GiB from ``VLLM_CPU_KVCACHE_SPACE``;
``ACTORLLM_CPU_KVCACHE_SPACE`` is the same in this project's spelling and wins when both are
set. An explicit ``kv_cache_memory_bytes`` (``--kv-cache-memory-bytes``) wins over both;
unset, empty or 0 leaves the size to the engine (``worker/cpu_kv_size.py``). The engine
reads it once per start (``EngineConfig.resolved_kv_cache_memory_bytes``), so ``LLM(...)``,
``AsyncEngine.open`` and ``actorllm serve`` all see it.

    >>> kv_cache_space_bytes({"VLLM_CPU_KVCACHE_SPACE": "4"})
    4294967296
    >>> kv_cache_space_bytes({"VLLM_CPU_KVCACHE_SPACE": "4GiB"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    actorllm.engine.config.errors.EngineConfigError: VLLM_CPU_KVCACHE_SPACE: must be ...
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from actorllm.engine.config.engine_config import EngineConfigError

# First set wins: this project's spelling, then vLLM's.
KV_CACHE_SPACE_ENV = ("ACTORLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_KVCACHE_SPACE")


def kv_cache_space_bytes(environ: Mapping[str, str] = os.environ) -> int | None:
    """The KV cache's bytes the environment asks for, or None (unset, empty or 0: the
    engine sizes it). Raises ``EngineConfigError`` naming the variable for a value that is
    not a non-negative whole number."""
    for name in KV_CACHE_SPACE_ENV:
        text = environ.get(name, "").strip()
        if not text:
            continue
        try:
            gib = int(text)
        except ValueError:
            gib = -1
        if gib < 0:
            raise EngineConfigError(
                name, f"must be a whole number of GiB (4 for 4 GiB), got {text!r}."
            )
        return gib * 2**30 or None
    return None
