"""Quantized linears: the checkpoint's packed tensors are loaded as they are on disk, then
(:meth:`finish_loading`) repacked once into the layout the forward reads; they stay packed.

Weight-only formats (GPTQ, AWQ, compressed-tensors pack-quantized): :class:`PackedLinear`
(``packed.py``); int8 and fp8 weights with float scales: :class:`Int8Linear`,
:class:`Fp8Linear` (``scaled.py``); what they share: ``base.py``.

Fused projections (``qkv_proj``, ``gate_up_proj``) are built here too: the loader writes
each of q/k/v (gate/up) into its output columns through :meth:`shard_view`, which knows
along which dimension (and with which packing factor) each checkpoint tensor is split.
"""

from __future__ import annotations

import torch

from actorllm.models.quant.base import QuantLoadError, tile_inputs
from actorllm.models.quant.packed import PackedLinear, pack_rows, unpack_int32
from actorllm.models.quant.scaled import Fp8Linear, Int8Linear
from actorllm.models.quant.spec import QuantSpec

__all__ = [
    "QUANT_LINEARS", "Fp8Linear", "Int8Linear", "PackedLinear", "QuantLinear", "QuantLoadError",
    "pack_rows", "quant_linear", "tile_inputs", "unpack_int32",
]  # fmt: skip

QUANT_LINEARS = (PackedLinear, Int8Linear, Fp8Linear)
QuantLinear = PackedLinear | Int8Linear | Fp8Linear


def quant_linear(
    spec: QuantSpec,
    in_features: int,
    out_features: int,
    bias: bool,
    dtype: torch.dtype,
    shard_sizes: list[int] | None = None,
    row_shard: tuple[int, int] | None = None,
) -> QuantLinear:
    """The linear of ``spec``'s scheme. ``row_shard``: (rank, ranks) of a row-parallel
    layer's input split; only the packed formats need it (their group index, GPTQ's
    ``g_idx``, numbers groups across the ranks). W8A8's per-channel and fp8's per-tensor
    or per-block scales follow a rank's columns as they are."""
    args = (in_features, out_features, bias, spec, dtype, shard_sizes)
    if spec.scheme == "w8a8_int8":
        return Int8Linear(*args)
    if spec.scheme == "fp8":
        return Fp8Linear(*args)
    return PackedLinear(*args, row_shard)
