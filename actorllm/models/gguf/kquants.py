"""llama.cpp's K-quant super-blocks (256 values, ggml-quants.c's ``block_q*_K``) decoded into
per-group codes, scales and offsets: ``w = q * scale + offset``, or, where ``offsets`` is
None, ``w = (q - mid) * scale`` with the code already centred on ``mid`` (``blocks.py``
chooses the bits it is kept in and packs it). No value is rounded: each product
``q * scale`` is exact in float32 (at most 17 bits of scale times 6 of code), so the
weights are the ones ``gguf.quants.dequantize`` computes.

Every function takes the tensor's blocks as uint8 ``[O, nb, block bytes]`` and returns
``q`` uint8 ``[O, I]`` (``I = 256 nb``), ``scales`` float32 ``[O, I / group]`` and
``offsets`` (same shape) or None.

* Q2_K (84 bytes): ``scales`` u8[16] (low nibble scale, high nibble min), ``qs`` u8[64],
  ``d``, ``dmin`` f16; value ``128h + 32k + l`` is bits ``2k..2k+1`` of ``qs[32h + l]``;
  ``w = d * sc * q - dmin * m``, groups of 16.
* Q3_K (110): ``hmask`` u8[32], ``qs`` u8[64], 12 bytes of sixteen 6-bit scales, ``d``;
  value ``128h + 32k + l``: low bits as Q2_K's, high bit ``4h + k`` of ``hmask[l]``
  (set: no offset; clear: minus 4); ``w = d * (sc - 32) * q``, ``q`` in -4..3, groups of 16.
* Q4_K (144): ``d``, ``dmin``, 12 bytes of eight 6-bit (scale, min) pairs, ``qs``
  u8[128]: 32-byte chunk ``c`` holds values ``64c + l`` (low nibbles) and ``64c + 32 + l``
  (high); ``w = d * sc * q - dmin * m``, groups of 32.
* Q5_K (176): Q4_K's fields with ``qh`` u8[32] before ``qs``: value ``32s + l`` takes
  bit ``s`` of ``qh[l]`` as its fifth bit.
* Q6_K (210): ``ql`` u8[128] (low 4 bits), ``qh`` u8[64] (high 2 bits), ``scales``
  int8[16], ``d``; ``w = d * sc * (q - 32)``, groups of 16.
"""

from __future__ import annotations

import torch

Decoded = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]


def f16(b: torch.Tensor) -> torch.Tensor:
    """uint8 [..., 2] (little-endian float16) -> float32 [...]."""
    return b.contiguous().view(torch.float16).squeeze(-1).float()


def _bits(b: torch.Tensor, shifts: list[int], width: int) -> torch.Tensor:
    """uint8 [..., n] -> [..., len(shifts), n]: the ``width``-bit field at each shift."""
    s = torch.tensor(shifts, dtype=torch.uint8).view(len(shifts), 1)
    return (b.unsqueeze(-2) >> s) & ((1 << width) - 1)


def _scale_min_6bit(sc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K / Q5_K's 12 bytes ``[O, nb, 12]`` -> eight scales and eight mins, float32
    ``[O, nb, 8]``."""
    sc = sc.long()
    lo_sc, lo_m = sc[..., 0:4] & 63, sc[..., 4:8] & 63  # sub-blocks 0..3
    hi_sc = (sc[..., 8:12] & 0xF) | ((sc[..., 0:4] >> 6) << 4)  # sub-blocks 4..7
    hi_m = (sc[..., 8:12] >> 4) | ((sc[..., 4:8] >> 6) << 4)
    return torch.cat((lo_sc, hi_sc), -1).float(), torch.cat((lo_m, hi_m), -1).float()


def _nibbles_by_chunk(qs: torch.Tensor, rows: int) -> torch.Tensor:
    """Q4_K / Q5_K's ``qs`` ``[O, nb, 128]`` -> the low 4 bits of each value ``[O, nb, 256]``."""
    chunks = qs.reshape(rows, -1, 4, 32)  # [O, nb, chunk, 32]
    return torch.stack((chunks & 0xF, chunks >> 4), dim=3).reshape(rows, -1, 256)


def q2_k(data: torch.Tensor, rows: int, cols: int) -> Decoded:
    sc = data[..., 0:16]  # [O, nb, 16]
    d = f16(data[..., 80:82]).unsqueeze(-1)  # [O, nb, 1]
    dmin = f16(data[..., 82:84]).unsqueeze(-1)
    qs = data[..., 16:80].reshape(rows, -1, 2, 32)  # [O, nb, half, 32]
    q = _bits(qs, [0, 2, 4, 6], 2).reshape(rows, cols)  # [O, nb, half, k, 32] -> [O, I]
    scales = (d * (sc & 0xF).float()).reshape(rows, -1)  # [O, I / 16]
    offsets = -(dmin * (sc >> 4).float()).reshape(rows, -1)
    return q, scales, offsets


def q3_k(data: torch.Tensor, rows: int, cols: int) -> Decoded:
    hmask = data[..., 0:32]  # [O, nb, 32]
    qs = data[..., 32:96].reshape(rows, -1, 2, 32)  # [O, nb, half, 32]
    packed = data[..., 96:108]  # [O, nb, 12]
    d = f16(data[..., 108:110]).unsqueeze(-1)  # [O, nb, 1]
    low4 = _bits(packed[..., 0:8], [0, 4], 4).reshape(rows, -1, 16)  # [O, nb, 16]
    high2 = _bits(packed[..., 8:12], [0, 2, 4, 6], 2).reshape(rows, -1, 16)
    sc = (low4 | (high2 << 4)).float() - 32  # -32..31
    low = _bits(qs, [0, 2, 4, 6], 2).reshape(rows, -1, 256)  # [O, nb, 256]
    high = _bits(hmask, list(range(8)), 1).reshape(rows, -1, 256)
    # q - 4 (high bit clear) or q (set), centred on 8 for a 4-bit symmetric code: 4..11.
    q = (low + 4 + (high << 2)).reshape(rows, cols)
    return q, (d * sc).reshape(rows, -1), None


def q4_k(data: torch.Tensor, rows: int, cols: int) -> Decoded:
    d = f16(data[..., 0:2]).unsqueeze(-1)  # [O, nb, 1]
    dmin = f16(data[..., 2:4]).unsqueeze(-1)
    scale, mins = _scale_min_6bit(data[..., 4:16])  # [O, nb, 8]
    q = _nibbles_by_chunk(data[..., 16:144], rows).reshape(rows, cols)  # [O, I]
    return q, (d * scale).reshape(rows, -1), -(dmin * mins).reshape(rows, -1)


def q5_k(data: torch.Tensor, rows: int, cols: int) -> Decoded:
    d = f16(data[..., 0:2]).unsqueeze(-1)  # [O, nb, 1]
    dmin = f16(data[..., 2:4]).unsqueeze(-1)
    scale, mins = _scale_min_6bit(data[..., 4:16])  # [O, nb, 8]
    high = _bits(data[..., 16:48], list(range(8)), 1).reshape(rows, -1, 256)  # [O, nb, 256]
    low = _nibbles_by_chunk(data[..., 48:176], rows)  # [O, nb, 256]
    q = (low | (high << 4)).reshape(rows, cols)  # 0..31
    return q, (d * scale).reshape(rows, -1), -(dmin * mins).reshape(rows, -1)


def q6_k(data: torch.Tensor, rows: int, cols: int) -> Decoded:
    ql = data[..., 0:128].reshape(rows, -1, 2, 64)  # [O, nb, half, 64]
    qh = data[..., 128:192].reshape(rows, -1, 2, 32)  # [O, nb, half, 32]
    sc = data[..., 192:208].contiguous().view(torch.int8).float()  # [O, nb, 16]
    d = f16(data[..., 208:210]).unsqueeze(-1)  # [O, nb, 1]
    # Within a half: quarter k (values 32k + l) takes nibble k // 2 of ql[32 (k % 2) + l]
    # and bits 2k, 2k + 1 of qh[l].
    low = torch.stack(
        (ql[..., 0:32] & 0xF, ql[..., 32:64] & 0xF, ql[..., 0:32] >> 4, ql[..., 32:64] >> 4),
        dim=3,
    )  # [O, nb, half, 4, 32]
    high = _bits(qh, [0, 2, 4, 6], 2)  # [O, nb, half, 4, 32]
    q = (low | (high << 4)).reshape(rows, cols)  # 0..63
    # q - 32 = (q + 96) - 128: centred on 128 for an 8-bit symmetric code.
    return (q + 96), (d * sc).reshape(rows, -1), None
