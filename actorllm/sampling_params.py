"""Sampling parameters, where vLLM keeps them (``vllm.sampling_params``).

    from actorllm.sampling_params import RequestOutputKind, SamplingParams
    from actorllm.sampling_params import StructuredOutputsParams
    from actorllm.sampling_params import GuidedDecodingParams  # vLLM <= 0.10's name
    from actorllm.sampling_params import RepetitionDetectionParams
    from actorllm.sampling_params import BeamSearchParams      # LLM.beam_search's parameters

The definitions live in :mod:`actorllm.core`; this module only gives them vLLM's import
path.
"""

from actorllm.core.beam_search import BeamSearchParams
from actorllm.core.repetition import RepetitionDetectionParams
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsParams

# vLLM <= 0.10 called it GuidedDecodingParams (``SamplingParams(guided_decoding=...)``).
GuidedDecodingParams = StructuredOutputsParams

__all__ = [
    "BeamSearchParams",
    "GuidedDecodingParams",
    "RepetitionDetectionParams",
    "RequestOutputKind",
    "SamplingParams",
    "StructuredOutputsParams",
]
