"""What the server says about itself: ``/v1/models``, ``/version``, ``/load``."""

from __future__ import annotations

import msgspec


class ModelCard(msgspec.Struct, kw_only=True):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "actorllm"
    root: str | None = None
    parent: str | None = None  # a LoRA adapter's base model (vLLM's)
    max_model_len: int | None = None


class ModelList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[ModelCard]


class VersionResponse(msgspec.Struct, kw_only=True):
    version: str


class LoadResponse(msgspec.Struct, kw_only=True):
    """``GET /load``: generation requests in flight (``--enable-server-load-tracking``)."""

    server_load: int
