"""vLLM's import path (``vllm.entrypoints.llm``); the code is in
:mod:`actorllm.compat.vllm.llm`."""

from actorllm.compat.vllm.llm import LLM as LLM

__all__ = ["LLM"]
