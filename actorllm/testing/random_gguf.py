"""Random GGUF blocks of the types run here, with sane scales: what benchmarks and tests
write into GGUF files of random weights (``bench quant``, tests/helpers/gguf_checkpoints.py).

The quantized codes are random bytes; only the scale fields are set so the weights have a
small spread (std ~0.1 for the K-quants' defaults) instead of whatever random float16
bytes would give (huge values, infinities, NaNs)."""

from __future__ import annotations

import gguf
import numpy as np

T = gguf.GGMLQuantizationType


def random_blocks(
    rows: int,
    cols: int,
    qtype: T,
    rng: np.random.Generator,
    scale: tuple[float, float] = (0.0002, 0.0008),
) -> np.ndarray:
    """Random valid ``qtype`` blocks ``uint8 [rows, bytes]`` (``cols`` a multiple of the
    type's block); each block's ``d`` drawn from ``scale`` (the K-quants' sub-scales are
    random 6-bit / int8 multipliers of it)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = cols // block
    raw = rng.integers(0, 256, (rows, nb, size), dtype=np.uint8)

    def f16(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float16).view(np.uint8).reshape(rows, nb, 2)

    d = rng.uniform(*scale, (rows, nb))
    if qtype in (T.Q8_0, T.Q4_0):  # d first, then the codes
        raw[..., 0:2] = f16(d)
    elif qtype == T.Q4_K:  # d * sc * q - dmin * m, sc, m < 64, q < 16
        raw[..., 0:2] = f16(d)
        raw[..., 2:4] = f16(d * 7.5)  # min ~ the mean of d * sc * q: groups centred near 0
    elif qtype == T.Q5_K:  # d * sc * q - dmin * m, sc, m < 64, q < 32
        raw[..., 0:2] = f16(d / 2)
        raw[..., 2:4] = f16(d * 7.5)
    elif qtype == T.Q6_K:  # d * sc * (q - 32), sc int8
        raw[..., 208:210] = f16(d / 6)
    elif qtype == T.Q3_K:  # d * (sc - 32) * q, sc < 64, q in -4..3
        raw[..., 108:110] = f16(d * 4)
    elif qtype == T.Q2_K:  # d * sc * q - dmin * m, sc, m < 16, q < 4
        raw[..., 80:82] = f16(d * 16)
        raw[..., 82:84] = f16(d * 24)
    else:
        raise ValueError(f"no random blocks for {qtype}")
    return raw.reshape(rows, nb * size)
