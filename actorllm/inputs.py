"""Prompt types, where vLLM keeps them (``vllm.inputs``).

    from actorllm.inputs import TextPrompt, TokensPrompt

The definitions live in :mod:`actorllm.compat.vllm.offline_prompts`; this module only gives them
vLLM's import path.
"""

from actorllm.compat.vllm.offline_prompts import Prompt as PromptType
from actorllm.compat.vllm.offline_prompts import TextPrompt, TokensPrompt

__all__ = ["PromptType", "TextPrompt", "TokensPrompt"]
