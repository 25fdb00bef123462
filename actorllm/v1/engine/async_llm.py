"""vLLM's import path (``vllm.v1.engine.async_llm``); the code is in
:mod:`actorllm.compat.vllm.async_llm`."""

from actorllm.compat.vllm.async_llm import AsyncLLM as AsyncLLM

__all__ = ["AsyncLLM"]
