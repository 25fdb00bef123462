"""vLLM's tokenizer loader, where vLLM keeps it (``vllm.tokenizers``).

    from actorllm.tokenizers import get_tokenizer

    tokenizer = get_tokenizer("/path/to/model")

The definitions live in :mod:`actorllm.compat.vllm.tokenizer`. vLLM's ``TokenizerRegistry``
(custom tokenizer classes) and ``TokenizerLike`` (its protocol) are not here: the engine
loads Hugging Face tokenizers only.
"""

from actorllm.compat.vllm.tokenizer import cached_get_tokenizer, get_tokenizer

__all__ = ["cached_get_tokenizer", "get_tokenizer"]
