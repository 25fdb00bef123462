"""Triton kernels, one file per op, each with the signature of its torch reference.

``actorllm.kernels.ops.get_ops("triton")`` imports this package lazily. On CUDA the kernels
compile; without a GPU they run only in Triton's interpreter, which needs
``TRITON_INTERPRET=1`` in the environment *before triton is first imported* (tests do this
in ``tests/kernels/conftest.py``). Importing always works where triton is installed;
launching on tensors that cannot run here raises :class:`TritonUnsupportedError`, and
:func:`supports_device` says in advance. See ``docs/kernels.md`` for layouts and tiling.
"""

from actorllm.kernels.triton._runtime import INTERPRET, TritonUnsupportedError, supports_device
from actorllm.kernels.triton.activation import silu_and_mul
from actorllm.kernels.triton.attention import choose_num_splits, paged_attention
from actorllm.kernels.triton.kv_cache import write_kv_cache
from actorllm.kernels.triton.layernorm import fused_add_rms_norm, rms_norm
from actorllm.kernels.triton.moe import fused_moe
from actorllm.kernels.triton.rotary import apply_rotary
from actorllm.kernels.triton.sampling import (
    exponential_noise,
    sample_from_logits,
    sample_from_logits_seeded,
)
from actorllm.kernels.triton.token_bitmask import apply_token_bitmask

__all__ = [
    "INTERPRET",
    "TritonUnsupportedError",
    "apply_rotary",
    "apply_token_bitmask",
    "choose_num_splits",
    "exponential_noise",
    "fused_add_rms_norm",
    "fused_moe",
    "paged_attention",
    "rms_norm",
    "sample_from_logits",
    "sample_from_logits_seeded",
    "silu_and_mul",
    "supports_device",
    "write_kv_cache",
]
