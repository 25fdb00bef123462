"""``kquants.py`` decodes each K-quant super-block into the codes, scales and offsets whose
products are ``gguf.quants.dequantize``'s values, for every bit of every field."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from actorllm.models.gguf import kquants
from tests.models.gguf.test_gguf_blocks import SCALES, _blocks

T = gguf.GGMLQuantizationType
DECODERS = {T.Q2_K: kquants.q2_k, T.Q3_K: kquants.q3_k, T.Q4_K: kquants.q4_k,
            T.Q5_K: kquants.q5_k, T.Q6_K: kquants.q6_k}  # fmt: skip
MID = {T.Q3_K: 8.0, T.Q6_K: 128.0}  # kept in 4 and 8 bits (blocks.LAYOUT)


def _decoded(raw: np.ndarray, qtype: T) -> torch.Tensor:
    """The weight the decoder's codes, scales and offsets describe, float32 [O, I]."""
    rows, size = raw.shape[0], gguf.GGML_QUANT_SIZES[qtype][1]
    data = torch.from_numpy(raw.reshape(rows, -1, size))  # [O, nb, size]
    q, scales, offsets = DECODERS[qtype](data, rows, data.shape[1] * 256)
    group = q.shape[1] // scales.shape[1]
    codes = q.float().view(rows, -1, group)  # [O, G, group]
    if offsets is None:  # symmetric codes, centred on the middle one of their bits
        return ((codes - MID[qtype]) * scales.unsqueeze(-1)).view(rows, -1)
    return (codes * scales.unsqueeze(-1) + offsets.unsqueeze(-1)).view(rows, -1)


@pytest.mark.parametrize("fill", [None, 0x00, 0xFF, 0x5A], ids=["random", "0x00", "0xff", "0x5a"])
@pytest.mark.parametrize("qtype", list(DECODERS), ids=lambda t: t.name)
def test_every_code_of_the_k_quants_is_decoded(qtype: T, fill: int | None) -> None:
    """Random blocks, and blocks whose every byte but the float16 scales is all-zeros,
    all-ones or alternating (every code and sub-scale at its top and bottom)."""
    raw = _blocks(qtype, 2, 512)
    if fill is not None:
        keep = np.zeros(raw.shape[1] // 2, dtype=bool)  # one block's bytes
        for at in SCALES[qtype]:
            keep[at : at + 2] = True
        raw.reshape(2, 2, -1)[:, :, ~keep] = fill
    ref = torch.from_numpy(gguf.quants.dequantize(raw, qtype))
    assert torch.equal(_decoded(raw, qtype), ref)
