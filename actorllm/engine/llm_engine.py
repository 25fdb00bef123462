"""vLLM's import path (``vllm.engine.llm_engine``); the code is in
:mod:`actorllm.compat.vllm.llm_engine`."""

from actorllm.compat.vllm.llm_engine import LLMEngine as LLMEngine

__all__ = ["LLMEngine"]
