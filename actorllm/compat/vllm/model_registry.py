"""vLLM's ``ModelRegistry`` (``from vllm import ModelRegistry``): which architectures
the engine runs, and ``register_model``, vLLM's way to add a model class, which is refused:
a vLLM model class implements vLLM's model interface (its ``forward`` over vLLM's attention
metadata, its ``load_weights``), not actorllm's ``CausalLM``, so registering one could only
fail later, at load.

    >>> "LlamaForCausalLM" in ModelRegistry.get_supported_archs()
    True
"""

from __future__ import annotations

from typing import Any, NoReturn, final

from actorllm.compat.vllm.not_built import refuse


@final
class _ModelRegistry:
    """The architectures of ``config.json`` this engine runs (``models/registry.py``)."""

    def get_supported_archs(self) -> list[str]:
        from actorllm.models.registry import supported_architectures  # imports torch

        return supported_architectures()

    def register_model(self, model_arch: str, model_cls: Any) -> NoReturn:
        refuse(
            f"ModelRegistry.register_model({model_arch!r}, ...)",
            "out-of-tree vLLM model classes cannot run here (actorllm runs only its own "
            "model code; supported architectures: ModelRegistry.get_supported_archs())",
        )


ModelRegistry = _ModelRegistry()
