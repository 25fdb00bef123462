"""What the quantized linears share: the load error, their parameters' constructor, the
refusal of a shape a format cannot hold, and the dtype their dequantized tiles multiply in."""

from __future__ import annotations

import torch
from torch import nn

from actorllm.models.onednn_linear import compute_dtype
from actorllm.models.quant.spec import QuantSpec

# Weights dequantized per tile: bounds the transient float copy (1 Mi elements).
TILE_ELEMENTS = 1 << 20


class QuantLoadError(RuntimeError):
    """The checkpoint's quantized tensors are inconsistent (e.g. fused shards disagree)."""


def param(shape: tuple[int, ...], dtype: torch.dtype) -> nn.Parameter:
    """An uninitialised, frozen parameter the loader fills from the checkpoint."""
    return nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)


def refuse(spec: QuantSpec, what: str) -> NotImplementedError:
    return NotImplementedError(f"quantization method {spec.method!r}: {what} is not supported")


def tile_inputs(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` in the dtype the dequantized tiles are multiplied in: float32 for bf16 on a
    CPU without hardware bf16 GEMMs, where torch's emulated bf16 matmul is several times
    slower than float32's (a 256-token GPTQ prefill took 4.8x the bf16 model's); else as
    they are."""
    if rows.device.type != "cpu":
        return rows
    return rows.to(compute_dtype(rows.dtype))
