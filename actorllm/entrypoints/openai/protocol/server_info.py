"""What the server says about itself: ``/v1/models``, ``/version``, ``/load``."""

from __future__ import annotations

import msgspec


class ModelPermission(msgspec.Struct, kw_only=True):
    """vLLM's (OpenAI's legacy) permission entry, one in every model card, with its
    values."""

    id: str  # "modelperm-<hex>"
    object: str = "model_permission"
    created: int
    allow_create_engine: bool = False
    allow_sampling: bool = True
    allow_logprobs: bool = True
    allow_search_indices: bool = False
    allow_view: bool = True
    allow_fine_tuning: bool = False
    organization: str = "*"
    group: str | None = None
    is_blocking: bool = False


class ModelCard(msgspec.Struct, kw_only=True):
    id: str
    object: str = "model"
    created: int  # the listing's time, as vLLM
    owned_by: str = "actorllm"
    root: str | None = None  # the base model's path as given (vLLM's), an adapter's path
    parent: str | None = None  # a LoRA adapter's base model (vLLM's)
    max_model_len: int | None = None
    permission: list[ModelPermission] = msgspec.field(default_factory=list)


class ModelList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[ModelCard]


class VersionResponse(msgspec.Struct, kw_only=True):
    version: str


class LoadResponse(msgspec.Struct, kw_only=True):
    """``GET /load``: generation requests in flight (``--enable-server-load-tracking``)."""

    server_load: int
