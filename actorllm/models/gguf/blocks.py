"""GGUF quantized blocks -> the packed layout our weight-only kernels read, at load.

Every type run here is an affine code per group: ``w = q * scale + offset`` with an
unsigned integer ``q`` and one ``scale`` / ``offset`` per group of input columns, so a
tensor repacks (no rounding: the same float32 products llama.cpp computes) into
:class:`BlockWeight`: ``packed`` uint8 ``[O, I * bits / 8]`` (4-bit: column ``2k`` in the
low nibble of byte ``k``, ``2k + 1`` in the high one), ``scales`` / ``offsets`` float32
``[O, I / group_size]``. The symmetric types keep no offsets: their codes are centred on
the middle one, ``w = (q - 2^(bits - 1)) * scale`` (a float32 per group less to hold).

Block layouts (ggml-quants.c, one row of ``I`` values is ``I / block`` blocks):

* Q8_0 (34 bytes / 32 values): ``d`` f16, ``qs`` int8[32]; ``w = d * qs`` -> 8-bit
  ``qs + 128``, group 32, symmetric.
* Q4_0 (18 / 32): ``d`` f16, ``qs`` u8[16]; value ``j < 16`` is ``qs[j] & 15``, value
  ``j + 16`` is ``qs[j] >> 4``; ``w = d * (q - 8)`` -> 4-bit, group 32, symmetric.
* Q4_K (144 / 256): ``d``, ``dmin`` f16, 12 bytes of eight 6-bit (scale, min) pairs,
  ``qs`` u8[128]: 32-byte chunk ``c`` holds values ``64c + l`` (low nibbles) and
  ``64c + 32 + l`` (high); ``w = d * sc_g * q - dmin * m_g`` -> 4-bit, group 32.
* Q6_K (210 / 256): ``ql`` u8[128] (low 4 bits), ``qh`` u8[64] (high 2 bits), ``scales``
  int8[16], ``d`` f16; ``w = d * sc_g * (q - 32)``, groups of 16 -> 8-bit ``q + 96``,
  symmetric (a 6-bit code in a byte: 10 bits per weight with the scale instead of 6.56;
  there is no 6-bit kernel).
* F32 / F16 / BF16: plain floats (:func:`float_rows`).

Other types are refused by :func:`check_type`, naming the tensor and the type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gguf
import numpy as np
import torch

from actorllm.kernels.quant_gemm import wq_dequant

T = gguf.GGMLQuantizationType
FLOAT_TYPES = (T.F32, T.F16, T.BF16)
BLOCK_TYPES = (T.Q8_0, T.Q4_0, T.Q4_K, T.Q6_K)
# Input columns per scale / offset once repacked (what a row-parallel split must keep whole).
GROUP_SIZE = {T.Q8_0: 32, T.Q4_0: 32, T.Q4_K: 32, T.Q6_K: 16}
RUN_TYPES = "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K"


class GGUFTypeError(NotImplementedError):
    """A tensor's GGML type has no kernel here."""


Cut = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class BlockWeight:
    """One weight matrix in the forward's layout: ``w[o, i] = q * scale + offset``, or
    ``(q - 2^(bits - 1)) * scale`` where ``offsets`` is None (symmetric codes)."""

    bits: int  # 4 or 8
    group_size: int  # input columns per scale / offset
    packed: torch.Tensor  # uint8 [O, I * bits / 8]
    scales: torch.Tensor  # float32 [O, G]
    offsets: torch.Tensor | None  # float32 [O, G], or None (symmetric)
    qtype: str  # the GGML type it came from (for the log and repr)

    @property
    def rows(self) -> int:
        return int(self.packed.shape[0])

    @property
    def layout(self) -> tuple[int, int, bool]:
        """What parts must share to be stored as one: bits, group size, symmetric."""
        return self.bits, self.group_size, self.offsets is None

    def _map(self, packed: Cut, groups: Cut) -> BlockWeight:
        """The same weight with ``packed`` applied to the codes and ``groups`` to the
        scales and offsets."""
        offsets = None if self.offsets is None else groups(self.offsets)
        return BlockWeight(self.bits, self.group_size, packed(self.packed),
                           groups(self.scales), offsets, self.qtype)  # fmt: skip

    def take_rows(self, index: torch.Tensor) -> BlockWeight:
        """The rows ``index`` (a permutation or a gather), same layout."""

        def pick(t: torch.Tensor) -> torch.Tensor:
            return t[index].contiguous()

        return self._map(pick, pick)

    def narrow(self, dim: int, start: int, length: int) -> BlockWeight:
        """Output rows (``dim`` 0) or input columns (``dim`` 1: whole groups only, which
        are whole bytes) ``[start, start + length)``, copied: the whole weight is freed."""
        if dim == 0:

            def rows(t: torch.Tensor) -> torch.Tensor:
                return t[start : start + length].clone()

            return self._map(rows, rows)
        g = self.group_size
        if start % g or length % g:
            raise ValueError(f"columns [{start}, {start + length}) are not whole groups of {g}")
        per_byte = 8 // self.bits

        def cols(t: torch.Tensor) -> torch.Tensor:
            return t[:, start // per_byte : (start + length) // per_byte].contiguous()

        def groups(t: torch.Tensor) -> torch.Tensor:
            return t[:, start // g : (start + length) // g].contiguous()

        return self._map(cols, groups)

    def pad_rows(self, rows: int) -> BlockWeight:
        """``rows`` more output rows whose weights are all zero (scale and offset 0); itself
        when ``rows`` is 0."""
        if rows <= 0:
            return self

        def more(t: torch.Tensor) -> torch.Tensor:
            return torch.cat((t, t.new_zeros(rows, *t.shape[1:])))

        return self._map(more, more)

    def dequantize(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``[start, stop)`` as float32 ``[stop - start, I]``."""
        p = self.packed[start:stop]  # [t, I * bits / 8]
        offsets = None if self.offsets is None else self.offsets[start:stop]
        native = wq_dequant(p, self.bits, self.scales[start:stop], offsets, self.group_size)
        if native is not None:
            return native
        if self.bits == 4:
            q = torch.stack((p & 0xF, p >> 4), dim=-1).view(p.shape[0], -1)  # [t, I]
        else:
            q = p
        t, groups = q.shape[0], self.scales.shape[1]
        q = q.view(t, groups, -1).float()  # [t, G, gs]
        s = self.scales[start:stop].unsqueeze(-1)  # [t, G, 1]
        if offsets is None:  # (q - mid) * s: exact, as the native kernel
            return ((q - (1 << (self.bits - 1))) * s).view(t, -1)
        return (q * s + offsets.unsqueeze(-1)).view(t, -1)


def check_type(name: str, qtype: T) -> None:
    if qtype not in FLOAT_TYPES and qtype not in BLOCK_TYPES:
        raise GGUFTypeError(
            f"GGUF tensor {name!r} has type {qtype.name}, which is not supported (run: {RUN_TYPES})"
        )


def _f16(b: torch.Tensor) -> torch.Tensor:
    """uint8 [..., 2] (little-endian float16) -> float32 [...]."""
    return b.contiguous().view(torch.float16).squeeze(-1).float()


def _pack4(q: torch.Tensor) -> torch.Tensor:
    """uint8 values < 16 ``[O, I]`` -> ``[O, I / 2]`` (column 2k low nibble, 2k+1 high)."""
    return (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous()


def repack(raw: np.ndarray, qtype: T, rows: int, cols: int) -> BlockWeight:
    """A GGUF tensor's bytes (``[rows, bytes per row]``, as ``GGUFReader`` maps them) ->
    :class:`BlockWeight` ``[rows, cols]``."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    if cols % block:
        raise GGUFTypeError(f"{qtype.name} rows of {cols} values (not whole blocks of {block})")
    nb = cols // block
    data = torch.from_numpy(np.array(raw, dtype=np.uint8).reshape(rows, nb, size))  # [O, nb, size]
    if qtype == T.Q8_0:
        d = _f16(data[..., 0:2])  # [O, nb]
        q = data[..., 2:] ^ 0x80  # int8 bits -> q + 128, [O, nb, 32]
        return BlockWeight(8, 32, q.reshape(rows, cols).contiguous(), d, None, "Q8_0")
    if qtype == T.Q4_0:
        d = _f16(data[..., 0:2])
        qs = data[..., 2:]  # [O, nb, 16]
        q = torch.cat((qs & 0xF, qs >> 4), dim=-1).reshape(rows, cols)  # [O, I]
        return BlockWeight(4, 32, _pack4(q), d, None, "Q4_0")
    if qtype == T.Q4_K:
        return _q4_k(data, rows, cols)
    if qtype == T.Q6_K:
        return _q6_k(data, rows, cols)
    raise GGUFTypeError(f"{qtype.name} blocks")


def _q4_k(data: torch.Tensor, rows: int, cols: int) -> BlockWeight:
    d = _f16(data[..., 0:2]).unsqueeze(-1)  # [O, nb, 1]
    dmin = _f16(data[..., 2:4]).unsqueeze(-1)
    sc = data[..., 4:16].long()  # [O, nb, 12]
    lo_sc, lo_m = sc[..., 0:4] & 63, sc[..., 4:8] & 63  # sub-blocks 0..3
    hi_sc = (sc[..., 8:12] & 0xF) | ((sc[..., 0:4] >> 6) << 4)  # sub-blocks 4..7
    hi_m = (sc[..., 8:12] >> 4) | ((sc[..., 4:8] >> 6) << 4)
    scale = torch.cat((lo_sc, hi_sc), dim=-1).float()  # [O, nb, 8]
    mins = torch.cat((lo_m, hi_m), dim=-1).float()
    qs = data[..., 16:].reshape(rows, -1, 4, 32)  # [O, nb, chunk, 32]
    q = torch.stack((qs & 0xF, qs >> 4), dim=3).reshape(rows, cols)  # [O, I]
    scales = (d * scale).reshape(rows, -1)  # [O, G], G = I / 32
    offsets = -(dmin * mins).reshape(rows, -1)
    return BlockWeight(4, 32, _pack4(q), scales, offsets, "Q4_K")


def _q6_k(data: torch.Tensor, rows: int, cols: int) -> BlockWeight:
    ql = data[..., 0:128].reshape(rows, -1, 2, 64)  # [O, nb, half, 64]
    qh = data[..., 128:192].reshape(rows, -1, 2, 1, 32)  # [O, nb, half, 1, 32]
    sc = data[..., 192:208].contiguous().view(torch.int8).float()  # [O, nb, 16]
    d = _f16(data[..., 208:210]).unsqueeze(-1)  # [O, nb, 1]
    # Within a half: quarter k (values 32k + l) takes nibble k // 2 of ql[32 (k % 2) + l]
    # and bits 2k, 2k + 1 of qh[l].
    low = torch.stack(
        (ql[..., 0:32] & 0xF, ql[..., 32:64] & 0xF, ql[..., 0:32] >> 4, ql[..., 32:64] >> 4),
        dim=3,
    )  # [O, nb, half, 4, 32]
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8).view(1, 1, 1, 4, 1)
    high = (qh >> shifts) & 3
    q = (low | (high << 4)).reshape(rows, cols)  # [O, I], 0..63
    scales = (d * sc).reshape(rows, -1)  # [O, G], G = I / 16
    # q - 32 = (q + 96) - 128: centred on 128 as Q8_0's codes.
    return BlockWeight(8, 16, (q + 96).contiguous(), scales, None, "Q6_K")


def float_rows(raw: np.ndarray, qtype: T, rows: int, cols: int) -> torch.Tensor:
    """A float tensor (F32 / F16 / BF16, or any type ``gguf.quants`` dequantizes) ->
    float32 ``[rows, cols]``."""
    if qtype == T.F32:
        return torch.from_numpy(np.array(raw, dtype=np.float32)).reshape(rows, cols)
    if qtype == T.F16:
        return torch.from_numpy(np.array(raw, dtype=np.float16)).float().reshape(rows, cols)
    if qtype == T.BF16:
        bits = torch.from_numpy(np.array(raw).view(np.int16).copy())
        return bits.view(torch.bfloat16).float().reshape(rows, cols)
    out = gguf.quants.dequantize(np.asarray(raw), qtype)
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)).reshape(rows, cols)
