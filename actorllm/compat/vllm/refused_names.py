"""vLLM's public names for features actorllm has not built: each imports, so a renamed
script loads, and refuses with a ``NotImplementedError`` naming it and why when used.

    >>> DataPrompt(data=b"...", data_format="image")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    NotImplementedError: DataPrompt: IO processor plugins are not supported ...
"""

from __future__ import annotations

from typing import Any, NoReturn

from actorllm.compat.vllm.not_built import refuse, refused_type

# vllm.inputs
ExplicitEncoderDecoderPrompt = refused_type(
    "ExplicitEncoderDecoderPrompt",
    "encoder-decoder models are not supported (only decoder-only prompts: a string, "
    "TextPrompt, TokensPrompt or EmbedsPrompt)",
)
DataPrompt = refused_type(
    "DataPrompt", "IO processor plugins are not supported (give text, token ids or embeddings)"
)


def initialize_ray_cluster(*args: Any, **kwargs: Any) -> NoReturn:
    """vLLM's executor helper (``vllm.initialize_ray_cluster``): refused. actorllm's Ray
    backend connects and places its workers itself."""
    refuse(
        "initialize_ray_cluster",
        "actorllm's Ray backend connects to the cluster and places its workers itself: "
        "give LLM(..., distributed_executor_backend='ray') (docs/distributed.md)",
    )
