"""Model classes keyed on config.json's ``architectures``.

>>> resolve_model_class("Qwen3ForCausalLM").__name__
'LlamaForCausalLM'
>>> resolve_model_class("GPT2LMHeadModel")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
actorllm.models.registry.UnsupportedArchitectureError: ... (supported: LlamaForCausalLM, ...)
"""

from __future__ import annotations

from actorllm.models.llama import LlamaForCausalLM

# All four share one implementation; their differences are config switches (see llama.py).
MODEL_REGISTRY: dict[str, type[LlamaForCausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
}


class UnsupportedArchitectureError(ValueError):
    """config.json names an architecture actorllm cannot run."""

    def __init__(self, architecture: str) -> None:
        self.architecture = architecture
        self.supported = sorted(MODEL_REGISTRY)
        super().__init__(
            f"architecture {architecture!r} is not supported "
            f"(supported: {', '.join(self.supported)})"
        )


def resolve_model_class(architecture: str) -> type[LlamaForCausalLM]:
    """The model class for ``architecture``; raises :class:`UnsupportedArchitectureError`."""
    try:
        return MODEL_REGISTRY[architecture]
    except KeyError:
        raise UnsupportedArchitectureError(architecture) from None


def supported_architectures() -> list[str]:
    return sorted(MODEL_REGISTRY)
