"""The token embedding of a GGUF file, kept in its blocks: each lookup dequantizes only the
rows it reads (a decode step reads one row a request), so the embedding costs its quantized
size in memory instead of a float copy of ``[V, H]`` (311 MB in bfloat16 for Qwen3's
151936 x 1024). With a tied head the embedding and the head hold the same tensors.

The values are the float copy's: the same float32 dequantization, rounded to the model
dtype. Tensor parallel: this rank's ``ceil(V / N)`` vocabulary rows (as
``VocabParallelEmbedding``); ids outside them embed to zeros and the all-reduce sums the
ranks' rows.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from actorllm.models.gguf.blocks import BlockWeight


class GGUFEmbedding(nn.Module):
    """``ids [T] -> [T, H]`` in ``dtype`` from the rows ``[start, start + rows)`` of a
    quantized embedding."""

    packed: torch.Tensor  # uint8 [rows, H * bits / 8]
    scales: torch.Tensor  # float32 [rows, G]
    offsets: torch.Tensor | None  # float32 [rows, G], None for symmetric codes

    def __init__(self, weight: BlockWeight, start: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.start, self.dtype, self.bits = start, dtype, weight.bits
        self.group_size, self.qtype = weight.group_size, weight.qtype
        # Buffers, so the module moves with the model and the runner counts their bytes.
        self.register_buffer("packed", weight.packed)
        self.register_buffer("scales", weight.scales)
        self.register_buffer("offsets", weight.offsets)
        self.comm: Any = None  # a TPComm when the vocabulary is split (bind_comm)

    def extra_repr(self) -> str:
        return f"rows={self.packed.shape[0]}, start={self.start}, gguf {self.qtype}"

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: [T] int64 -> [T, H]."""
        local = ids - self.start  # [T]
        rows = int(self.packed.shape[0])
        mine = (local >= 0) & (local < rows)  # [T]
        w = BlockWeight(self.bits, self.group_size, self.packed, self.scales, self.offsets,
                        self.qtype)  # fmt: skip
        picked = w.take_rows(local.clamp(0, rows - 1))  # the T rows' blocks
        x = picked.dequantize(0, picked.rows).to(self.dtype)  # [T, H]
        if self.comm is None:
            return x
        x = x * mine.unsqueeze(-1).to(x.dtype)
        return self.comm.all_reduce(x)
