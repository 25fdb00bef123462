"""``get_tokenizer`` where vLLM <= 0.10 kept it (``vllm.transformers_utils.tokenizer``);
vLLM 0.32 has it in ``vllm.tokenizers`` (:mod:`actorllm.tokenizers`). The definition lives
in :mod:`actorllm.compat.vllm.tokenizer`.

    from actorllm.transformers_utils.tokenizer import get_tokenizer
"""

from actorllm.compat.vllm.tokenizer import cached_get_tokenizer, get_tokenizer

__all__ = ["cached_get_tokenizer", "get_tokenizer"]
