"""vLLM's ``vllm.v1`` import paths (``actorllm.v1.engine.async_llm.AsyncLLM``)."""
