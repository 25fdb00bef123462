"""Linears whose weights are 8-bit numbers with float scales.

W8A8 int8 (:class:`Int8Linear`, compressed-tensors): int8 ``weight [O, I]`` with a float32
scale per output row; each call quantizes its input rows to int8 with one scale per row
(dynamic per-token, symmetric) and runs an int8 GEMM (``kernels/int8_gemm.py``). On a host
with AVX512-VNNI but no AMX-INT8 tiles, a weight the VNNI kernel takes is repacked at load
into its layout (``kernels/w8a8_vnni.py``; the same bytes, the same results) and every row
count runs that kernel.

fp8 (:class:`Fp8Linear`, ``quant_method: fp8`` and compressed-tensors FP8): e4m3 weights
with per-tensor or block scales, widened one tile of output rows at a time in the forward.
"""

from __future__ import annotations

import torch
from torch import nn

from actorllm.kernels import amx_int8_linear, w8a8_vnni
from actorllm.kernels.int8_gemm import int8_linear
from actorllm.models.quant.base import TILE_ELEMENTS, param, refuse, tile_inputs
from actorllm.models.quant.spec import QuantSpec


class Int8Linear(nn.Module):
    """W8A8 int8 (compressed-tensors): ``x [..., I] -> [..., O]`` through an int8 GEMM."""

    quantized_projection = True  # LoRA adapters add to it (models/lora_adapter.py)

    w_tiled: torch.Tensor  # uint8 [O, I], w8a8_vnni.tile_layout (tiled only: finish_loading)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool,
        spec: QuantSpec,
        dtype: torch.dtype,
        shard_sizes: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.spec = spec
        self.shard_sizes = shard_sizes
        self.optional_params: tuple[str, ...] = ()
        self.weight = param((out_features, in_features), torch.int8)  # [O, I]
        self.weight_scale = param((out_features, 1), torch.float32)  # [O, 1]
        self.bias = param((out_features,), dtype) if bias else None
        self.finished = False
        self.tiled = False  # the weight repacked for the VNNI kernel (finish_loading)

    @torch.no_grad()
    def init_dummy(self, gen: torch.Generator) -> None:
        """Random int8 weights (load_format=dummy) of std ~0.02 once scaled."""
        self.weight.copy_(torch.randint(-127, 128, self.weight.shape, generator=gen))
        self.weight_scale.fill_(0.02 / 73.0)  # uniform int8 has std ~73
        if self.bias is not None:
            self.bias.zero_()

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, w8a8 int8"

    def shard_view(self, leaf: str, data: torch.Tensor, shard: int) -> torch.Tensor:
        sizes = self.shard_sizes
        assert sizes is not None
        return data.narrow(0, sum(sizes[:shard]), sizes[shard])

    @torch.no_grad()
    def finish_loading(self, absent: frozenset[str] = frozenset()) -> None:
        """Where the host runs W8A8 on VNNI vectors, not AMX tiles, and the kernel takes the
        shape: the weight repacked into that kernel's layout (``w_tiled``, a buffer of the
        same bytes; the ``weight`` parameter dropped)."""
        w = self.weight.data
        self.tiled = (
            w.device.type == "cpu"
            and w8a8_vnni.takes(self.out_features, self.in_features)
            and w8a8_vnni.available()
            and not amx_int8_linear.available()
        )
        if self.tiled:
            del self.weight
            self.register_buffer("w_tiled", w8a8_vnni.tile_layout(w))  # uint8 [O, I]
        self.finished = True

    def int8_weight(self) -> torch.Tensor:
        """The checkpoint's int8 ``[O, I]`` weight (a copy where it is stored tiled)."""
        return w8a8_vnni.untile(self.w_tiled) if self.tiled else self.weight.data

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., I] -> [..., O]."""
        flat = x.dim() == 2
        rows = x if flat else x.reshape(-1, self.in_features)  # [M, I]
        out = None
        if self.tiled:
            out = w8a8_vnni.linear(rows, self.w_tiled, self.weight_scale, self.bias)  # [M, O]
        if out is None:  # (tiled: only where the kernel found no memory; untiling is slow)
            out = int8_linear(rows, self.int8_weight(), self.weight_scale, self.bias)
        return out if flat else out.view(*x.shape[:-1], self.out_features)


class Fp8Linear(nn.Module):
    """fp8 (e4m3) weights with a scale per tensor (per fused shard) or per block
    (``weight_scale_inv [ceil(O / bo), ceil(I / bi)]``): ``x [..., I] -> [..., O]``.

    CPUs have no fp8 GEMM: the weight stays fp8 in memory (1 byte per value) and each tile
    of output rows is widened and scaled in the forward. Activations stay in the model
    dtype (vLLM's dynamic scheme quantizes them to fp8 for its fp8 GEMMs; here they are
    not rounded at all).
    """

    quantized_projection = True  # LoRA adapters add to it (models/lora_adapter.py)

    row_scale: torch.Tensor  # float32 [O, 1], per-tensor scales (set by finish_loading)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool,
        spec: QuantSpec,
        dtype: torch.dtype,
        shard_sizes: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.spec, self.shard_sizes = spec, shard_sizes
        self.optional_params: tuple[str, ...] = ()
        self.weight = param((out_features, in_features), torch.float8_e4m3fn)  # [O, I]
        self.block = spec.block
        self.channel = spec.fp8_channel
        if self.channel:  # compressed-tensors: one scale per output row
            self.weight_scale = param((out_features, 1), torch.float32)
        elif spec.block is None:
            n = len(shard_sizes) if shard_sizes else 0
            self.weight_scale = param((n,) if n else (), torch.float32)
        else:
            bo, bi = spec.block
            if any(s % bo for s in shard_sizes or []):
                raise refuse(spec, f"fused output sizes {shard_sizes} with blocks of {bo} rows")
            rows, cols = -(-out_features // bo), -(-in_features // bi)
            self.weight_scale_inv = param((rows, cols), torch.float32)
        self.bias = param((out_features,), dtype) if bias else None
        self.finished = False

    @torch.no_grad()
    def init_dummy(self, gen: torch.Generator) -> None:
        """Random e4m3 weights (load_format=dummy) of std ~0.02 once scaled."""
        w = torch.empty(self.weight.shape).normal_(0.0, 1.0, generator=gen)
        self.weight.copy_(w.to(torch.float8_e4m3fn))
        for name, p in self.named_parameters():
            if name == "bias":
                p.zero_()
            elif name != "weight":
                p.fill_(0.02)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, fp8 block={self.block}"

    def shard_view(self, leaf: str, data: torch.Tensor, shard: int) -> torch.Tensor:
        sizes = self.shard_sizes
        assert sizes is not None
        if leaf == "weight_scale" and not self.channel:
            return data[shard]
        start, size = sum(sizes[:shard]), sizes[shard]
        if leaf == "weight_scale_inv":
            assert self.block is not None
            bo = self.block[0]
            return data.narrow(0, start // bo, -(-size // bo))
        return data.narrow(0, start, size)

    @torch.no_grad()
    def finish_loading(self, absent: frozenset[str] = frozenset()) -> None:
        """Per-tensor scales -> one per output row; block scales stay as they are."""
        if self.channel:
            rows = self.weight_scale.data.float()
            del self.weight_scale
            self.register_buffer("row_scale", rows.contiguous())  # [O, 1]
        elif self.block is None:
            scale = self.weight_scale.data.reshape(-1)  # [S] or [1]
            sizes = torch.tensor(self.shard_sizes or [self.out_features])
            rows = torch.repeat_interleave(scale, sizes.to(scale.device))  # [O]
            del self.weight_scale
            self.register_buffer("row_scale", rows.unsqueeze(1).contiguous())  # [O, 1]
        bo = self.block[0] if self.block else 1
        self.tile_rows = max(bo, (TILE_ELEMENTS // self.in_features) // bo * bo)
        self.finished = True

    def dequantized(self, start: int, stop: int) -> torch.Tensor:
        """Output rows ``[start, stop)`` of the weight, float32 ``[stop - start, I]``."""
        w = self.weight[start:stop].float()  # [t, I]
        if self.block is None:
            return w * self.row_scale[start:stop]
        bo, bi = self.block
        s = self.weight_scale_inv[start // bo : -(-stop // bo)]  # [tb, ceil(I / bi)]
        s = s.repeat_interleave(bo, 0)[: stop - start].repeat_interleave(bi, 1)
        return w * s[:, : self.in_features]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., I] -> [..., O]."""
        rows = x.reshape(-1, self.in_features)  # [M, I]
        o, t = self.out_features, self.tile_rows
        xs = tile_inputs(rows)  # [M, I] in the tiles' dtype
        out = torch.empty(rows.shape[0], o, dtype=rows.dtype, device=rows.device)
        for start in range(0, o, t):
            stop = min(o, start + t)
            out[:, start:stop] = xs @ self.dequantized(start, stop).to(xs.dtype).t()  # [M, t]
        if self.bias is not None:
            out += self.bias
        return out.view(*x.shape[:-1], o)
