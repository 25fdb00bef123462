"""vLLM's ``vllm.transformers_utils`` import paths (``.tokenizer``: ``get_tokenizer``, where
vLLM <= 0.10 kept it)."""
