"""Sampling parameters, where vLLM keeps them (``vllm.sampling_params``).

    from actorllm.sampling_params import RequestOutputKind, SamplingParams

The definitions live in :mod:`actorllm.core.sampling_params`; this module only gives them
vLLM's import path.
"""

from actorllm.core.sampling_params import RequestOutputKind, SamplingParams

__all__ = [
    "RequestOutputKind",
    "SamplingParams",
    # Structured outputs: StructuredOutputsParams is re-exported here once it exists.
]
