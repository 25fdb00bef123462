"""``system_fingerprint`` of chat and text completions (vLLM's ``--fingerprint-mode``).

* ``full`` (default): ``actorllm-<version>[-tp<N>][-pp<N>][-dp<N>]-<hash8>``;
* ``hash``: ``actorllm-<version>-<hash8>``;
* ``custom``: ``--fingerprint-value`` as given;
* ``none``: null.

``hash8`` is the start of a SHA-256 over the engine's whole configuration (model, dtype,
quantization, parallelism, scheduler and cache settings...), so it changes exactly when
the server was started differently: what OpenAI's field is for (a client can tell that the
backend changed). Computed once per server.

    >>> from actorllm.engine.config.engine_config import EngineConfig
    >>> system_fingerprint(EngineConfig(model="m"), "custom", "v1")
    'v1'
    >>> system_fingerprint(EngineConfig(model="m", tensor_parallel_size=2), "full")[-12:-9]
    'tp2'
"""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec

from actorllm import __version__
from actorllm.engine.config.engine_config import EngineConfig

FingerprintMode = Literal["full", "hash", "custom", "none"]


def system_fingerprint(
    config: EngineConfig, mode: FingerprintMode, value: str | None = None
) -> str | None:
    """The fingerprint ``mode`` gives for an engine started with ``config``."""
    if mode == "none":
        return None
    if mode == "custom":
        return value
    digest = hashlib.sha256(msgspec.json.encode(config, order="sorted")).hexdigest()[:8]
    parts = [f"actorllm-{__version__}"]
    if mode == "full":
        for tag, size in (
            ("tp", config.tensor_parallel_size),
            ("pp", config.pipeline_parallel_size),
            ("dp", config.data_parallel_size),
        ):
            if size > 1:
                parts.append(f"{tag}{size}")
    parts.append(digest)
    return "-".join(parts)
