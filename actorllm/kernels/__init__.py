"""Kernels: torch reference ops here, Triton kernels in ``triton/`` beside them.

Every op states its shapes; the reference is what CPU runs and what tests compare against.
"""

from actorllm.kernels.activation import silu_and_mul
from actorllm.kernels.attention import paged_attention
from actorllm.kernels.kv_cache import write_kv_cache
from actorllm.kernels.layernorm import fused_add_rms_norm, rms_norm
from actorllm.kernels.rotary import apply_rotary, build_cos_sin_cache, rope_inv_freq

__all__ = [
    "apply_rotary",
    "build_cos_sin_cache",
    "fused_add_rms_norm",
    "paged_attention",
    "rms_norm",
    "rope_inv_freq",
    "silu_and_mul",
    "write_kv_cache",
]
