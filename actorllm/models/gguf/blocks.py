"""GGUF quantized blocks -> the packed layout our weight-only kernels read, at load.

Every type run here is an affine code per group: ``w = q * scale + offset`` with an
unsigned integer ``q`` and one ``scale`` / ``offset`` per group of input columns, so a
tensor repacks (no rounding: the same float32 products llama.cpp computes) into
:class:`BlockWeight`: ``packed`` uint8 ``[O, I * bits / 8]`` (4-bit: column ``2k`` in the
low nibble of byte ``k``, ``2k + 1`` in the high one), ``scales`` / ``offsets`` float32
``[O, I / group_size]``. The symmetric types keep no offsets: their codes are centred on
the middle one, ``w = (q - 2^(bits - 1)) * scale`` (a float32 per group less to hold).

Block layouts (ggml-quants.c, one row of ``I`` values is ``I / block`` blocks; the
K-quants' super-blocks are decoded in ``kquants.py``), and the layout each is kept in:

* Q8_0 (34 bytes / 32 values): ``d`` f16, ``qs`` int8[32]; ``w = d * qs`` -> 8-bit
  ``qs + 128``, group 32, symmetric.
* Q4_0 (18 / 32): ``d`` f16, ``qs`` u8[16]; value ``j < 16`` is ``qs[j] & 15``, value
  ``j + 16`` is ``qs[j] >> 4``; ``w = d * (q - 8)`` -> 4-bit, group 32, symmetric.
* Q4_1 (20 / 32): ``d``, ``m`` f16, then Q4_0's ``qs``; ``w = d * q + m`` -> 4-bit, group
  32, offset ``m``.
* Q5_0 (22 / 32): ``d``, ``qh`` u32 (bit ``j``: value ``j``'s fifth bit), Q4_0's ``qs``;
  ``w = d * (q - 16)`` -> 8-bit ``q + 112``, group 32, symmetric (no 5-bit kernel).
* Q5_1 (24 / 32): ``d``, ``m``, ``qh``, ``qs``; ``w = d * q + m`` -> 8-bit, group 32,
  offset ``m``.
* Q2_K -> 4-bit, groups of 16, offsets; Q3_K -> 4-bit, groups of 16, symmetric (``q + 8``);
  Q4_K -> 4-bit, groups of 32, offsets; Q5_K -> 8-bit, groups of 32, offsets; Q6_K ->
  8-bit ``q + 96``, groups of 16, symmetric (a 6-bit code in a byte: 10 bits per weight
  with the scale instead of 6.56; there is no 6-bit kernel).
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
from actorllm.models.gguf import kquants
from actorllm.models.gguf.kquants import f16 as _f16

T = gguf.GGMLQuantizationType
FLOAT_TYPES = (T.F32, T.F16, T.BF16)
# Each type run here: (bits, input columns per scale / offset) of the layout it is kept
# in; the group is what a row-parallel split must keep whole.
LAYOUT = {
    T.Q8_0: (8, 32), T.Q4_0: (4, 32), T.Q4_1: (4, 32), T.Q5_0: (8, 32), T.Q5_1: (8, 32),
    T.Q2_K: (4, 16), T.Q3_K: (4, 16), T.Q4_K: (4, 32), T.Q5_K: (8, 32), T.Q6_K: (8, 16),
}  # fmt: skip
BLOCK_TYPES = tuple(LAYOUT)
GROUP_SIZE = {t: group for t, (_bits, group) in LAYOUT.items()}
RUN_TYPES = ", ".join(["F32, F16, BF16", *(t.name for t in BLOCK_TYPES)])
# Decoders of the K-quants' super-blocks (kquants.py).
_KQUANTS = {T.Q2_K: kquants.q2_k, T.Q3_K: kquants.q3_k, T.Q4_K: kquants.q4_k,
            T.Q5_K: kquants.q5_k, T.Q6_K: kquants.q6_k}  # fmt: skip


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


def _pack4(q: torch.Tensor) -> torch.Tensor:
    """uint8 values < 16 ``[O, I]`` -> ``[O, I / 2]`` (column 2k low nibble, 2k+1 high)."""
    return (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous()


def _low_nibbles(qs: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Q4_0-style ``qs`` ``[O, nb, 16]`` -> the low 4 bits of the 32 values ``[O, I]``
    (value ``j`` in ``qs[j]``'s low nibble, ``j + 16`` in its high one)."""
    return torch.cat((qs & 0xF, qs >> 4), dim=-1).reshape(rows, cols)


def _fifth_bits(qh: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Q5_0 / Q5_1's ``qh`` ``[O, nb, 4]`` (a little-endian u32) -> bit ``j`` of it for
    value ``j``, shifted to bit 4, ``[O, I]``."""
    shifts = torch.arange(8, dtype=torch.uint8).view(1, 1, 1, 8)
    bits = (qh.unsqueeze(-1) >> shifts) & 1  # [O, nb, byte, bit]: value 8 byte + bit
    return (bits << 4).reshape(rows, cols)


def repack(raw: np.ndarray, qtype: T, rows: int, cols: int) -> BlockWeight:
    """A GGUF tensor's bytes (``[rows, bytes per row]``, as ``GGUFReader`` maps them) ->
    :class:`BlockWeight` ``[rows, cols]``."""
    if qtype not in LAYOUT:
        raise GGUFTypeError(f"{qtype.name} blocks")
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    if cols % block:
        raise GGUFTypeError(f"{qtype.name} rows of {cols} values (not whole blocks of {block})")
    nb = cols // block
    data = torch.from_numpy(np.array(raw, dtype=np.uint8).reshape(rows, nb, size))  # [O, nb, size]
    offsets: torch.Tensor | None = None
    if qtype in _KQUANTS:
        q, scales, offsets = _KQUANTS[qtype](data, rows, cols)
    elif qtype == T.Q8_0:
        q, scales = data[..., 2:].reshape(rows, cols) ^ 0x80, _f16(data[..., 0:2])  # q + 128
    elif qtype == T.Q4_0:
        q, scales = _low_nibbles(data[..., 2:], rows, cols), _f16(data[..., 0:2])  # q - 8
    elif qtype == T.Q4_1:
        q, scales, offsets = (
            _low_nibbles(data[..., 4:], rows, cols),
            _f16(data[..., 0:2]),
            _f16(data[..., 2:4]),
        )
    elif qtype == T.Q5_0:  # q - 16 = (q + 112) - 128
        q = _low_nibbles(data[..., 6:], rows, cols) | _fifth_bits(data[..., 2:6], rows, cols)
        q, scales = q + 112, _f16(data[..., 0:2])
    else:  # Q5_1
        q = _low_nibbles(data[..., 8:], rows, cols) | _fifth_bits(data[..., 4:8], rows, cols)
        scales, offsets = _f16(data[..., 0:2]), _f16(data[..., 2:4])
    bits, group = LAYOUT[qtype]
    packed = _pack4(q) if bits == 4 else q.contiguous()  # [O, I * bits / 8]
    return BlockWeight(bits, group, packed, scales.contiguous(),
                       None if offsets is None else offsets.contiguous(), qtype.name)  # fmt: skip


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
