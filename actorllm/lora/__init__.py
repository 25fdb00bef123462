"""vLLM's ``vllm.lora`` import paths (``from actorllm.lora.request import LoRARequest``)."""
