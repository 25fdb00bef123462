"""Pooling parameters, where vLLM keeps them (``vllm.pooling_params``).

    from actorllm.pooling_params import PoolingParams

The definition lives in :mod:`actorllm.core.pooling_params`.
"""

from actorllm.core.pooling_params import PoolingParams

__all__ = ["PoolingParams"]
