"""Logprob types, where vLLM keeps them (``vllm.logprobs``).

    from actorllm.logprobs import FlatLogprobs, Logprob

The definitions live in :mod:`actorllm.core.logprob_types`; this module only gives them
vLLM's import path.
"""

from actorllm.core.logprob_types import (
    FlatLogprobs,
    Logprob,
    LogprobsOnePosition,
    PromptLogprobs,
    SampleLogprobs,
    create_prompt_logprobs,
    create_sample_logprobs,
)

__all__ = [
    "FlatLogprobs",
    "Logprob",
    "LogprobsOnePosition",
    "PromptLogprobs",
    "SampleLogprobs",
    "create_prompt_logprobs",
    "create_sample_logprobs",
]
