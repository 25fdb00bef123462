"""vLLM's import path for :class:`LoRARequest` (``vllm.lora.request``)."""

from actorllm.core.lora import LoRARequest

__all__ = ["LoRARequest"]
