"""A linear over GGUF weights kept in their quantized blocks (repacked at load by
``models/gguf/blocks.py``): ``x [..., I] -> [..., O]``.

A fused projection (``qkv_proj``, ``gate_up_proj``) may mix types (a Q4_K_M file stores
``attn_v`` in Q6_K beside a Q4_K ``attn_q``): the weight is a list of parts, each a run of
output rows in one layout, merged at load where neighbours share it. A part is either a
:class:`BlockWeight` (``w = q * scale + offset`` per group) run by the native kernel up
to ``MAX_ROWS`` rows (decode) and dequantized one tile of output rows at a time above
(prefill), or a float weight (F32 / F16 / BF16 tensors) in the model dtype. Block parts
whose inputs are quantized to int8 (4-bit: W4A8, ``VLLM_CPU_INT4_W4A8``; 8-bit: Q8_0,
Q6_K, Q5_*, ``ACTORLLM_CPU_GGUF_A8``; both on by default, ``kernels/quant_gemm.py``) run
the native kernel at every row count, so a token's numbers do not depend on its batch;
Q2_K / Q3_K's 4-bit groups of 16, which the W4A8 kernel does not take, keep float inputs
(the native kernel up to ``MAX_ROWS`` rows, tiles above).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from actorllm.kernels.quant_gemm import MAX_ROWS, gguf_a8_inputs, w4a8_inputs, wq_linear
from actorllm.models.gguf.blocks import BlockWeight
from actorllm.models.quant.base import tile_inputs

# Weights dequantized per tile on the many-rows path: bounds the transient float copy.
TILE_ELEMENTS = 1 << 20

Part = BlockWeight | torch.Tensor  # a float part: [rows, I] in the model dtype


def merge_parts(parts: list[Part]) -> list[Part]:
    """Neighbouring parts of the same layout (bits, group, symmetric or not) concatenated
    along the output rows."""
    out: list[Part] = []
    for p in parts:
        last = out[-1] if out else None
        if isinstance(p, BlockWeight) and isinstance(last, BlockWeight):
            if p.layout == last.layout:
                qtype = last.qtype if last.qtype == p.qtype else f"{last.qtype}+{p.qtype}"
                offsets = None
                if p.offsets is not None and last.offsets is not None:
                    offsets = torch.cat((last.offsets, p.offsets))
                out[-1] = BlockWeight(
                    p.bits, p.group_size, torch.cat((last.packed, p.packed)),
                    torch.cat((last.scales, p.scales)), offsets, qtype,
                )  # fmt: skip
                continue
        elif isinstance(p, torch.Tensor) and isinstance(last, torch.Tensor):
            out[-1] = torch.cat((last, p))
            continue
        out.append(p)
    return out


class GGUFLinear(nn.Module):
    """``x [..., I] -> [..., O]`` over GGUF parts (see the module doc)."""

    quantized_projection = True  # LoRA adapters add to it (models/lora_adapter.py)

    def __init__(self, in_features: int, out_features: int, name: str) -> None:
        super().__init__()
        self.in_features, self.out_features, self.name = in_features, out_features, name
        self.parts: list[Part] = []
        self.register_buffer("bias", None)  # [O] in the model dtype, or None
        self.a8_bits: frozenset[int] = frozenset()  # parts of these bits take int8 inputs

    def set_weights(self, parts: list[Part], bias: torch.Tensor | None) -> None:
        """Install the weight (parts in output-row order) and an optional bias [O]; every
        tensor becomes a buffer, so the runner's weight accounting counts it."""
        parts = merge_parts(parts)
        rows = sum(p.rows if isinstance(p, BlockWeight) else p.shape[0] for p in parts)
        if rows != self.out_features:
            raise ValueError(
                f"{self.name}: GGUF parts hold {rows} rows, expected {self.out_features}"
            )
        bits = {p.bits for p in parts if isinstance(p, BlockWeight)}
        self.a8_bits = frozenset(b for b in bits if (w4a8_inputs() if b == 4 else gguf_a8_inputs()))
        for k, p in enumerate(parts):
            if isinstance(p, BlockWeight):
                self.register_buffer(f"p{k}_packed", p.packed)
                self.register_buffer(f"p{k}_scales", p.scales)
                self.register_buffer(f"p{k}_offsets", p.offsets)
            else:
                self.register_buffer(f"p{k}_weight", p)
        self.parts = parts
        self.bias = bias

    @property
    def act_int8(self) -> bool:
        """Whether some part takes int8 inputs (what ``bench quant`` reports)."""
        return bool(self.a8_bits)

    def extra_repr(self) -> str:
        kinds = [p.qtype if isinstance(p, BlockWeight) else str(p.dtype) for p in self.parts]
        return f"in={self.in_features}, out={self.out_features}, gguf {'+'.join(kinds)}"

    def _part(self, p: BlockWeight, rows: torch.Tensor) -> torch.Tensor:
        """rows [M, I] -> [M, p.rows] in rows' dtype."""
        a8 = p.bits in self.a8_bits  # int8 inputs: every row count
        if (rows.shape[0] <= MAX_ROWS or a8) and rows.device.type == "cpu":
            # Few rows (decode), or int8 inputs: the native kernel reads the packed weight once.
            native = wq_linear(rows.float().contiguous(), p.packed, p.bits, p.scales,
                               p.offsets, p.group_size, None, a8)  # fmt: skip
            if native is not None:
                return native.to(rows.dtype)
        o = p.rows
        t = max(1, min(o, TILE_ELEMENTS // self.in_features))
        xs = tile_inputs(rows)  # [M, I] in the tiles' dtype
        out = torch.empty(rows.shape[0], o, dtype=rows.dtype, device=rows.device)
        for start in range(0, o, t):
            stop = min(o, start + t)
            w = p.dequantize(start, stop).to(xs.dtype)  # [t, I]
            out[:, start:stop] = xs @ w.t()  # [M, t]
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., I] -> [..., O]."""
        rows = x.reshape(-1, self.in_features)  # [M, I]
        outs = [
            self._part(p, rows) if isinstance(p, BlockWeight) else F.linear(rows, p)
            for p in self.parts
        ]
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)  # [M, O]
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)

    def _apply(self, fn, recurse=True):  # torch calls it with a tensor map
        """Moving the module (``.to(device)``) moves the parts' tensors too: they are the
        buffers, so the list is rebuilt from them."""
        out = super()._apply(fn, recurse)
        rebuilt: list[Part] = []
        for k, p in enumerate(self.parts):
            if isinstance(p, BlockWeight):
                rebuilt.append(BlockWeight(
                    p.bits, p.group_size, getattr(self, f"p{k}_packed"),
                    getattr(self, f"p{k}_scales"), getattr(self, f"p{k}_offsets"), p.qtype,
                ))  # fmt: skip
            else:
                rebuilt.append(getattr(self, f"p{k}_weight"))
        self.parts = rebuilt
        return out
