"""Model classes keyed on config.json's ``architectures``.

>>> resolve_model_class("Qwen3MoeForCausalLM").__name__
'LlamaForCausalLM'
>>> resolve_model_class("BertForMaskedLM")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
actorllm.models.registry.UnsupportedArchitectureError: ... (supported: ...)
"""

from __future__ import annotations

from actorllm.models.base import CausalLM
from actorllm.models.gpt_oss import GptOssForCausalLM
from actorllm.models.llama import LlamaForCausalLM

# The decoder families share one implementation; their differences are config switches
# (models/families.py, models/llama.py).
MODEL_REGISTRY: dict[str, type[CausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
    "Phi3ForCausalLM": LlamaForCausalLM,
    "GraniteForCausalLM": LlamaForCausalLM,
    "GemmaForCausalLM": LlamaForCausalLM,
    "Gemma2ForCausalLM": LlamaForCausalLM,
    "Gemma3ForCausalLM": LlamaForCausalLM,
    "Olmo2ForCausalLM": LlamaForCausalLM,
    "MixtralForCausalLM": LlamaForCausalLM,
    "Qwen2MoeForCausalLM": LlamaForCausalLM,
    "Qwen3MoeForCausalLM": LlamaForCausalLM,
    "OlmoeForCausalLM": LlamaForCausalLM,
    "SmolLM3ForCausalLM": LlamaForCausalLM,
    "Ernie4_5ForCausalLM": LlamaForCausalLM,
    "ArceeForCausalLM": LlamaForCausalLM,
    "Olmo3ForCausalLM": LlamaForCausalLM,
    "Exaone4ForCausalLM": LlamaForCausalLM,
    "GlmForCausalLM": LlamaForCausalLM,
    "Glm4ForCausalLM": LlamaForCausalLM,
    "SeedOssForCausalLM": LlamaForCausalLM,
    "GraniteMoeForCausalLM": LlamaForCausalLM,
    "Starcoder2ForCausalLM": LlamaForCausalLM,
    "StableLmForCausalLM": LlamaForCausalLM,
    "ApertusForCausalLM": LlamaForCausalLM,
    "CohereForCausalLM": LlamaForCausalLM,
    "Cohere2ForCausalLM": LlamaForCausalLM,
    "OPTForCausalLM": LlamaForCausalLM,
    "PhiForCausalLM": LlamaForCausalLM,
    "GPTNeoXForCausalLM": LlamaForCausalLM,
    "GPTJForCausalLM": LlamaForCausalLM,
    "GPTBigCodeForCausalLM": LlamaForCausalLM,
    "FalconForCausalLM": LlamaForCausalLM,
    "PhiMoEForCausalLM": LlamaForCausalLM,  # Phi-3.5-MoE's config.json
    "PhimoeForCausalLM": LlamaForCausalLM,  # transformers 5's save_pretrained
    "GptOssForCausalLM": GptOssForCausalLM,  # the same decoder, its own checkpoint layout
    "GPT2LMHeadModel": LlamaForCausalLM,
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


def resolve_model_class(architecture: str) -> type[CausalLM]:
    """The model class for ``architecture``; raises :class:`UnsupportedArchitectureError`."""
    try:
        return MODEL_REGISTRY[architecture]
    except KeyError:
        raise UnsupportedArchitectureError(architecture) from None


def supported_architectures() -> list[str]:
    return sorted(MODEL_REGISTRY)
