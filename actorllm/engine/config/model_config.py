"""``ModelConfig``: what ``LLMEngine.get_model_config()`` returns, with vLLM's names.

A read-only view of the loaded model and the settings it runs with; ``hf_config`` (the
model's ``transformers`` config) is loaded on first access.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.config.quantization_name import vllm_quantization_name


@dataclass(frozen=True)
class ModelConfig:
    model: str  # the model directory (the demo model's, when none was given)
    tokenizer: str
    served_model_name: str
    max_model_len: int  # prompt + output tokens of one request
    vocab_size: int
    dtype: str  # as configured ("auto": the checkpoint's)
    seed: int
    # The checkpoint's quantization method as vLLM names it ("auto_gptq", "fp8", ...;
    # None: unquantized): engine/config/quantization_name.py.
    quantization: str | None = None

    @classmethod
    def of(cls, config: EngineConfig, *, max_model_len: int, vocab_size: int) -> ModelConfig:
        return cls(
            model=str(config.resolved_model()),
            tokenizer=str(config.resolved_tokenizer()),
            served_model_name=config.model_name(),
            max_model_len=max_model_len,
            vocab_size=vocab_size,
            dtype=config.dtype,
            seed=config.seed,
            quantization=vllm_quantization_name(config.resolved_model(), config.resolved_device()),
        )

    def get_vocab_size(self) -> int:
        return self.vocab_size

    @cached_property
    def hf_config(self) -> Any:
        """The checkpoint's ``transformers`` config (``config.json``)."""
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(self.model)
