"""``AsyncLLM``, where vLLM keeps it (``vllm.v1.engine.async_llm``); defined in
:mod:`actorllm.engine.async_llm_engine`."""

from actorllm.engine.async_llm_engine import AsyncLLM

__all__ = ["AsyncLLM"]
