"""vLLM's import path (``vllm.engine.async_llm_engine``); the code is in
:mod:`actorllm.compat.vllm.async_llm`."""

from actorllm.compat.vllm.async_llm import AsyncLLM as AsyncLLM
from actorllm.compat.vllm.async_llm import AsyncLLMEngine as AsyncLLMEngine
from actorllm.compat.vllm.engine_args import AsyncEngineArgs as AsyncEngineArgs

__all__ = ["AsyncEngineArgs", "AsyncLLM", "AsyncLLMEngine"]
