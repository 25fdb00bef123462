"""vLLM's ``get_tokenizer`` (``vllm.tokenizers``; ``vllm.transformers_utils.tokenizer``
before 0.11): the tokenizer the engine loads for a model or tokenizer name, Hugging Face's
``AutoTokenizer`` from the directory ``LLM(tokenizer=...)`` would resolve (a local
directory, or a hub id downloaded without weights).

``tokenizer_mode`` "auto" and "hf" are that tokenizer (the engine's only kind); vLLM's
"mistral", "custom" and model-specific modes are refused by name. Other keyword arguments
(``trust_remote_code``, ``use_fast``, ``truncation_side``...) go to ``from_pretrained``,
as in vLLM.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from actorllm.compat.vllm.not_built import refuse
from actorllm.engine.config.engine_config import EngineConfig

_MODES = ("auto", "hf")


def get_tokenizer(
    tokenizer_name: str | Path,
    *args: Any,
    tokenizer_mode: str = "auto",
    revision: str | None = None,
    download_dir: str | None = None,
    **kwargs: Any,
) -> Any:
    """The Hugging Face tokenizer of ``tokenizer_name`` (a directory or a hub id)."""
    if tokenizer_mode not in _MODES:
        refuse(
            f"get_tokenizer(tokenizer_mode={tokenizer_mode!r})",
            f"only Hugging Face tokenizers are built (tokenizer_mode one of {_MODES})",
        )
    if "tokenizer_cls" in kwargs:
        refuse("get_tokenizer(tokenizer_cls=...)", "custom tokenizer classes are not supported")
    from transformers import AutoTokenizer

    # The engine's own resolution of LLM(tokenizer=..., tokenizer_revision=...).
    config = EngineConfig(
        tokenizer=str(tokenizer_name), tokenizer_revision=revision, download_dir=download_dir
    )
    return AutoTokenizer.from_pretrained(str(config.resolved_tokenizer()), *args, **kwargs)


# vLLM's: one tokenizer per distinct arguments (they must be hashable).
cached_get_tokenizer = lru_cache(get_tokenizer)
