"""Weight-only quantized linears: :class:`PackedLinear` (GPTQ, AWQ, compressed-tensors
pack-quantized) keeps
``w_packed`` uint8 ``[O, I * bits / 8]`` (4-bit: input column ``2k`` in the low nibble of
byte ``k``, ``2k + 1`` in the high one), ``w_scales`` / ``w_offsets`` float32 ``[O, G]``
(``w = q * scale + offset``, the offset ``-zero * scale``, ``G = I / group_size``) and, for
GPTQ's activation order
(``desc_act``, a ``g_idx`` that is not ``i // group_size``), ``in_perm`` ``[I]``: the input
columns sorted by group, so each group is contiguous (the inputs are permuted the same way
in the forward). The forward dequantizes one tile of output rows at a time
(:data:`TILE_ELEMENTS` weights) and multiplies it, so no full-precision copy of a weight
ever exists beyond one tile. Up to ``MAX_ROWS`` rows (decode) the native kernel reads the
packed weight instead. 4-bit weights quantize the inputs to int8 per row and group (W4A8,
vLLM's ``VLLM_CPU_INT4_W4A8``, on by default; ``kernels/quant_gemm.py``) for every row
count, prefill included, so a token's numbers do not depend on how it was batched. On
hosts with AMX-INT8 tiles or AVX512-VNNI, a weight whose shape the tile kernel takes is
stored in its layout instead (``tiled``: ``kernels/w4a8_amx.py``; the same bytes, scales
and offsets stored ``[G, O]``) and every row count runs that kernel (:func:`tiled_kernel`:
the tiles, or ``kernels/w4a8_vnni.py`` on vectors, with the same numbers).

Tensor parallel, row-parallel GPTQ with activation order: a rank's input rows belong to
any of the layer's groups, in uneven counts, so (as vLLM) every rank keeps the scales and
zero points of all ``G`` groups and ``col_groups [I]`` names each input column's group;
its forward dequantizes through that index (no native kernel). A shard whose rows happen
to form whole groups keeps only those groups, in the ordinary layout.

Checkpoint layouts (as vLLM and the quantizers write them; ``pf = 32 / bits``):

* GPTQ: ``qweight`` int32 ``[I / pf, O]`` (input row ``r * pf + j`` in bits ``j * bits``
  of row ``r``), ``qzeros`` int32 ``[G, O / pf]`` (packed along columns, the same way),
  stored as ``zero - 1`` (v1 format; ``checkpoint_format: gptq_v2`` stores ``zero``),
  ``scales [G, O]``, ``g_idx`` int32 ``[I]``. Symmetric: the zero is ``2 ** (bits - 1)``
  whatever ``qzeros`` holds, as vLLM's kernels read it.
* AWQ (GEMM): ``qweight`` int32 ``[I, O / 8]`` and ``qzeros`` int32 ``[G, O / 8]``, packed
  along output columns with nibble ``k`` holding column ``[0, 2, 4, 6, 1, 3, 5, 7][k]`` of
  its 8; ``scales [G, O]``.
* compressed-tensors pack-quantized: ``weight_packed`` int32 ``[O, I / pf]`` (along the
  input, like GPTQ's but transposed), values offset by ``2 ** (bits - 1)``,
  ``weight_scale [O, G]``, ``weight_shape`` int64 ``[2]``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from actorllm.kernels import w4a8_amx, w4a8_vnni
from actorllm.kernels.quant_gemm import (
    MAX_ROWS,
    announce_a8,
    w4a8_inputs,
    wq_dequant,
    wq_linear,
)
from actorllm.models.quant.base import (
    TILE_ELEMENTS,
    QuantLoadError,
    param,
    refuse,
    tile_inputs,
)
from actorllm.models.quant.spec import QuantSpec

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble k of an AWQ int32 holds column AWQ_ORDER[k]


def unpack_int32(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """int32 values holding ``32 / bits`` fields each, low bits first -> the fields as
    uint8, the packed ``dim`` grown ``32 / bits`` times (field ``j`` of element ``k`` at
    ``k * pf + j``)."""
    pf = 32 // bits
    shifts = torch.arange(0, 32, bits, dtype=torch.int32, device=packed.device)  # [pf]
    moved = packed.movedim(dim, -1).unsqueeze(-1)  # [..., N, 1]
    fields = (moved >> shifts) & ((1 << bits) - 1)  # [..., N, pf]
    out = fields.reshape(*moved.shape[:-2], moved.shape[-2] * pf).to(torch.uint8)
    return out.movedim(-1, dim)


def pack_rows(q: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 values ``[O, I]`` -> the forward's layout ``[O, I * bits / 8]``."""
    if bits == 8:
        return q.contiguous()
    return (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous()


class PackedLinear(nn.Module):
    """A 4/8-bit group-quantized linear (weight-only); ``x [..., I] -> [..., O]``."""

    quantized_projection = True  # LoRA adapters add to it (models/lora_adapter.py)

    # The forward's layout (buffers, set by finish_loading; see the module doc).
    w_packed: torch.Tensor  # uint8 [O, I * bits / 8]
    w_scales: torch.Tensor  # float32 [O, G]
    w_offsets: torch.Tensor  # float32 [O, G]: -zero * scale (w = q * scale + offset)
    in_perm: torch.Tensor | None  # [I] or None
    col_groups: torch.Tensor | None  # int64 [I]: each column's group (uneven groups) or None
    native_bias: torch.Tensor | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool,
        spec: QuantSpec,
        dtype: torch.dtype,
        shard_sizes: list[int] | None = None,
        row_shard: tuple[int, int] | None = None,
    ) -> None:
        """``row_shard``: (rank, ranks) of a row-parallel layer's input split (tensor
        parallel), which GPTQ's ``g_idx`` numbers groups across."""
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.spec, self.bits = spec, spec.bits
        self.group_size = in_features if spec.group_size == -1 else spec.group_size
        self.shard_sizes = shard_sizes  # the fused projection's output sizes (None: one)
        # 4-bit: the native kernel quantizes the inputs to int8 (W4A8, as vLLM's CPU build)
        self.act_int8 = self.bits == 4 and w4a8_inputs()
        pf = 32 // self.bits
        i, o, g = in_features, out_features, in_features // self.group_size
        # GPTQ numbers the groups of the whole layer: this shard's first one, and how many
        # groups' scales it holds (all of them for an act-order row shard, as vLLM).
        self.first_group, self.scale_groups = 0, g
        if row_shard is not None and spec.group_size != -1:
            self.first_group = row_shard[0] * g
            if spec.desc_act:
                self.scale_groups = g * row_shard[1]
        sizes = shard_sizes or [o]
        if i % self.group_size or i % pf:
            raise refuse(spec, f"an input size of {i} with group_size {spec.group_size}")
        if spec.scheme in ("gptq", "awq") and any(s % pf for s in sizes):
            raise refuse(spec, f"output sizes {sizes} not divisible by {pf}")
        self.optional_params: tuple[str, ...] = ()
        if spec.scheme == "gptq":
            self.qweight = param((i // pf, o), torch.int32)
            self.qzeros = param((self.scale_groups, o // pf), torch.int32)
            self.scales = param((self.scale_groups, o), dtype)
            n = len(shard_sizes) if shard_sizes else 0
            self.g_idx = param((n, i) if n else (i,), torch.int32)
            self.optional_params = ("g_idx",)  # absent: i // group_size
        elif spec.scheme == "awq":
            self.qweight = param((i, o // pf), torch.int32)
            if not spec.sym:
                self.qzeros = param((g, o // pf), torch.int32)
            self.scales = param((g, o), dtype)
        else:  # pack_quantized
            if not spec.sym:
                raise refuse(spec, "asymmetric pack-quantized weights (weight_zero_point)")
            self.weight_packed = param((o, i // pf), torch.int32)
            self.weight_scale = param((o, g), dtype)
            n = len(shard_sizes) if shard_sizes else 0
            self.weight_shape = param((n, 2) if n else (2,), torch.int64)
        self.bias = param((o,), dtype) if bias else None
        self.finished = False
        self.tiled = False  # w_packed in the AMX tile kernel's layout (finish_loading)

    @torch.no_grad()
    def init_dummy(self, gen: torch.Generator) -> None:
        """Random packed weights (load_format=dummy): values uniform over the bit range,
        scales giving weights of std ~0.02, as the float dummy weights."""
        scale = 0.02 / (0.4 * 2**self.bits)  # (q - zero) has std ~0.4 * 2^bits
        for name, p in self.named_parameters():
            if name == "bias":
                p.zero_()
            elif p.dtype == torch.int32:
                p.copy_(torch.randint(-(2**31), 2**31, p.shape, dtype=torch.int64, generator=gen))
            elif name == "weight_shape":
                sizes = self.shard_sizes or [self.out_features]
                p.copy_(torch.tensor([[s, self.in_features] for s in sizes]).view(p.shape))
            else:
                p.fill_(scale)

    def extra_repr(self) -> str:
        s = self.spec
        return (
            f"in={self.in_features}, out={self.out_features}, {s.method} {s.bits}-bit, "
            f"group_size={s.group_size}"
        )

    # -- loading ------------------------------------------------------------------------

    def shard_view(self, leaf: str, data: torch.Tensor, shard: int) -> torch.Tensor:
        """The part of checkpoint-layout parameter ``leaf`` that fused shard ``shard``
        (q/k/v, gate/up) fills."""
        sizes = self.shard_sizes
        assert sizes is not None
        if leaf in ("g_idx", "weight_shape"):
            return data[shard]
        start, size = sum(sizes[:shard]), sizes[shard]
        pf = 32 // self.bits
        if self.spec.scheme == "pack_quantized" or leaf == "bias":
            return data.narrow(0, start, size)
        if leaf == "scales":
            return data.narrow(1, start, size)
        if self.spec.scheme == "gptq" and leaf == "qweight":
            return data.narrow(1, start, size)
        return data.narrow(1, start // pf, size // pf)  # packed along columns

    @torch.no_grad()
    def finish_loading(self, absent: frozenset[str] = frozenset()) -> None:
        """Repack the checkpoint's tensors into the forward's layout and drop them;
        ``absent``: the optional ones the checkpoint did not have."""
        s, bits = self.spec, self.bits
        i, o, gs = self.in_features, self.out_features, self.group_size
        half = float(1 << (bits - 1))
        perm: torch.Tensor | None = None
        col_groups: torch.Tensor | None = None  # [I]: uneven groups (act-order row shard)
        if s.scheme == "gptq":
            q = unpack_int32(self.qweight.data, bits, 0).t()  # [O, I]
            scales = self.scales.data.t()  # [O, G]
            if s.sym:
                zeros = torch.full_like(scales, half)
            else:
                zeros = (unpack_int32(self.qzeros.data, bits, 1).t() + s.zero_offset).to(
                    scales.dtype
                )  # [O, G]
            g = self._gptq_groups(self.g_idx.data, "g_idx" in absent)  # [I]
            scales, zeros, perm, col_groups = self._gptq_order(g, scales, zeros)
            if perm is not None:
                q = q[:, perm]
            del self.qweight, self.qzeros, self.scales, self.g_idx
        elif s.scheme == "awq":
            q = _awq_columns(unpack_int32(self.qweight.data, bits, 1)).t()  # [O, I]
            scales = self.scales.data.t()  # [O, G]
            if s.sym:
                zeros = torch.full_like(scales, half)
            else:
                zeros = _awq_columns(unpack_int32(self.qzeros.data, bits, 1)).t().to(scales.dtype)
                del self.qzeros
            del self.qweight, self.scales
        else:
            shapes = self.weight_shape.data.reshape(-1, 2)
            expect = [[size, i] for size in (self.shard_sizes or [o])]
            if shapes.tolist() != expect:
                raise QuantLoadError(f"weight_shape {shapes.tolist()} != expected {expect}")
            q = unpack_int32(self.weight_packed.data, bits, 1)  # [O, I]
            scales = self.weight_scale.data  # [O, G]
            zeros = torch.full_like(scales, half)
            del self.weight_packed, self.weight_scale, self.weight_shape
        assert tuple(q.shape) == (o, i), (q.shape, o, i)
        # W4A8 in the tile layout where the host has a kernel for it (AMX-INT8 or
        # AVX512-VNNI): the same bytes in the tiles' order, scales and offsets stored
        # [G, O] (the tensors below are [O, G] views).
        self.tiled = (
            self.act_int8
            and q.device.type == "cpu"
            and col_groups is None
            and w4a8_amx.takes(o, i, gs)
            and tiled_kernel() is not None
        )
        packed = w4a8_amx.tile_layout(q) if self.tiled else pack_rows(q, bits)
        self.register_buffer("w_packed", packed)  # [O, I * bits / 8]
        # Scales and offsets in float32 (1 / group_size of the weights' count), as the
        # native kernel reads them; buffers, so the runner's weight accounting counts them.
        fscales = scales.float()
        offsets = -(zeros.float() * fscales)
        self.register_buffer("w_scales", _stored(fscales, self.tiled))  # [O, G]
        self.register_buffer("w_offsets", _stored(offsets, self.tiled))  # [O, G]
        self.register_buffer("in_perm", perm)  # [I] or None
        self.register_buffer("col_groups", col_groups)  # [I] or None
        bias = None if self.bias is None else self.bias.detach().float()
        self.register_buffer("native_bias", bias, False)
        self.tile_rows = max(1, min(o, TILE_ELEMENTS // i))
        self.groups = i // gs
        self.finished = True

    def _gptq_groups(self, g_idx: torch.Tensor, absent: bool) -> torch.Tensor:
        """GPTQ's ``g_idx`` (``[S, I]`` for a fused projection: the shards must agree, they
        quantize the same input) -> each input row's group, int64 ``[I]``, in the layer's
        numbering (absent: in order)."""
        if absent:
            return self.first_group + torch.arange(self.in_features) // self.group_size
        rows = g_idx.reshape(-1, self.in_features).long()  # [S, I]
        if not bool((rows == rows[0]).all()):
            raise QuantLoadError("the fused projection's shards have different g_idx")
        return rows[0]

    def _gptq_order(
        self, g: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Each input row's group ``g [I]`` (the layer's numbering) and the loaded
        ``scales`` / ``zeros`` ``[O, G']`` -> (scales, zeros ``[O, G]``, the input
        permutation making groups contiguous or None, each column's group when the groups
        are uneven or None: then no permutation)."""
        if scales.shape[1] == self.in_features // self.group_size:  # this shard's groups
            return scales, zeros, self._gptq_perm(g - self.first_group), None
        # An act-order row shard holding every group's scales.
        picked = _whole_groups(g, self.group_size)
        if picked is None:
            return scales, zeros, None, g
        # Its rows are whole groups: keep theirs only.
        g = torch.searchsorted(picked, g)
        return scales[:, picked], zeros[:, picked], self._gptq_perm(g), None

    def _gptq_perm(self, g: torch.Tensor) -> torch.Tensor | None:
        """Each input row's group ``[I]`` -> the input permutation that makes groups
        contiguous (None: already in order)."""
        natural = torch.arange(self.in_features) // self.group_size
        if torch.equal(g, natural):
            return None
        perm = torch.argsort(g, stable=True)
        if not torch.equal(g[perm], natural):
            raise QuantLoadError(f"g_idx does not give every group {self.group_size} input rows")
        return perm

    # -- forward ------------------------------------------------------------------------

    def dequantized(self, start: int, stop: int) -> torch.Tensor:
        """Output rows ``[start, stop)`` of the weight, float32 ``[stop - start, I]``
        (input columns in ``in_perm`` order)."""
        if self.tiled:  # the rows, in the standard layout, of the whole tiles holding them
            tile = w4a8_amx.TILE
            first, end = start // tile * tile, -(-stop // tile) * tile
            codes = w4a8_amx.untile(self.w_packed[first:end])  # [end - first, I]
            p = pack_rows(codes[start - first : stop - first], 4)  # [t, I / 2]
        else:
            p = self.w_packed[start:stop]  # [t, I * bits / 8]
        if self.col_groups is None:
            native = wq_dequant(p, self.bits, self.w_scales[start:stop],
                                self.w_offsets[start:stop], self.group_size)  # fmt: skip
            if native is not None:
                return native
        if self.bits == 4:
            q = torch.stack((p & 0xF, p >> 4), dim=-1).view(p.shape[0], -1)  # [t, I]
        else:
            q = p
        if self.col_groups is not None:  # uneven groups: each column's scale by index
            s = self.w_scales[start:stop][:, self.col_groups]  # [t, I]
            b = self.w_offsets[start:stop][:, self.col_groups]
            return q.float() * s + b
        s = self.w_scales[start:stop].unsqueeze(-1)  # [t, G, 1]
        b = self.w_offsets[start:stop].unsqueeze(-1)
        w = q.view(q.shape[0], self.groups, -1).float() * s + b  # [t, G, gs]
        return w.view(q.shape[0], self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., I] -> [..., O]."""
        assert self.finished, "finish_loading() before the forward"
        rows = x.reshape(-1, self.in_features)  # [M, I]
        if self.in_perm is not None:
            rows = rows[:, self.in_perm]  # groups contiguous, as the weight's columns
        o, t = self.out_features, self.tile_rows
        kernel = tiled_kernel() if self.tiled and rows.device.type == "cpu" else None
        if kernel is not None:
            tiled = kernel(
                rows, self.w_packed, self.w_scales.t(),
                self.w_offsets.t(), self.group_size, self.native_bias,
            )  # fmt: skip
            if tiled is not None:
                announce_a8(4)
                return tiled.view(*x.shape[:-1], o)
        few = rows.shape[0] <= MAX_ROWS or self.act_int8  # W4A8: every row count
        if few and rows.device.type == "cpu" and self.col_groups is None and not self.tiled:
            # Few rows (decode), or W4A8: the native kernel reads the packed weight once.
            native = wq_linear(
                rows.float().contiguous(), self.w_packed, self.bits, self.w_scales,
                self.w_offsets, self.group_size, self.native_bias, self.act_int8,
            )  # fmt: skip
            if native is not None:
                return native.to(x.dtype).view(*x.shape[:-1], o)
        xs = tile_inputs(rows)  # [M, I] in the tiles' dtype
        if t >= o:
            out = F.linear(xs, self.dequantized(0, o).to(xs.dtype)).to(rows.dtype)
        else:
            out = torch.empty(rows.shape[0], o, dtype=rows.dtype, device=rows.device)
            for start in range(0, o, t):
                stop = min(o, start + t)
                w = self.dequantized(start, stop).to(xs.dtype)  # [t, I]
                out[:, start:stop] = xs @ w.t()  # [M, t]
        if self.bias is not None:
            out += self.bias
        return out.view(*x.shape[:-1], o)


@functools.cache  # every 4-bit forward asks; the host's answer does not change
def tiled_kernel() -> Callable[..., torch.Tensor | None] | None:
    """The kernel that runs W4A8 on the tile layout here: AMX-INT8 tiles, else AVX512-VNNI
    vectors (bit for bit the tiles' numbers), else None (the row layout's kernels)."""
    if w4a8_amx.available():
        return w4a8_amx.linear
    if w4a8_vnni.available():
        return w4a8_vnni.linear
    return None


def _stored(t: torch.Tensor, transposed: bool) -> torch.Tensor:
    """``t [O, G]`` as a buffer: contiguous, or (the tile kernel's) stored ``[G, O]`` and
    viewed back as ``[O, G]``."""
    return t.t().contiguous().t() if transposed else t.contiguous()


def _whole_groups(g: torch.Tensor, group_size: int) -> torch.Tensor | None:
    """The groups (ascending, int64) that rows ``g [I]`` fill, if each of them has exactly
    ``group_size`` rows; else None."""
    picked, counts = torch.unique(g, return_counts=True)
    return picked if bool((counts == group_size).all()) else None


def _awq_columns(fields: torch.Tensor) -> torch.Tensor:
    """Unpacked AWQ fields ``[R, O]`` in nibble order -> columns in order."""
    r, o = fields.shape
    order = torch.tensor(AWQ_ORDER)
    inverse = torch.argsort(order)  # column c sits in nibble inverse[c]
    return fields.view(r, o // 8, 8)[:, :, inverse].reshape(r, o)
