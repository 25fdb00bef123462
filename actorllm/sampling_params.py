"""Sampling parameters, where vLLM keeps them (``vllm.sampling_params``).

    from actorllm.sampling_params import RequestOutputKind, SamplingParams
    from actorllm.sampling_params import StructuredOutputsParams

The definitions live in :mod:`actorllm.core`; this module only gives them vLLM's import
path.
"""

from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsParams

__all__ = ["RequestOutputKind", "SamplingParams", "StructuredOutputsParams"]
