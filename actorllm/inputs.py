"""Prompt types, where vLLM keeps them (``vllm.inputs``).

    from actorllm.inputs import EmbedsPrompt, PromptType, TextPrompt, TokensPrompt

The definitions live in :mod:`actorllm.compat.vllm.offline_prompts`; this module only gives them
vLLM's import path. ``ExplicitEncoderDecoderPrompt`` and ``DataPrompt`` import and refuse by
name when built (:mod:`actorllm.compat.vllm.refused_names`); vLLM's engine-input types
(``TokensInput``, ``MultiModal*``...) are its renderer's internals and are not here.
"""

from actorllm.compat.vllm.offline_prompts import EmbedsPrompt, TextPrompt, TokensPrompt
from actorllm.compat.vllm.offline_prompts import Prompt as PromptType
from actorllm.compat.vllm.offline_prompts import Prompt as SingletonPrompt
from actorllm.compat.vllm.refused_names import DataPrompt, ExplicitEncoderDecoderPrompt

__all__ = [
    "DataPrompt",
    "EmbedsPrompt",
    "ExplicitEncoderDecoderPrompt",
    "PromptType",
    "SingletonPrompt",
    "TextPrompt",
    "TokensPrompt",
]
