"""OpenAI's gpt-oss (``GptOssForCausalLM``): the shared decoder (``models/llama.py``) with
its switches set by ``models/families.py``, plus this checkpoint layout.

What the switches cover: attention sinks (``self_attn.sinks``, a logit per head in every
softmax denominator), sliding and full layers alternating (``layer_types``), biases on
q/k/v/o, YaRN, and a sparse MoE whose router and experts have biases and whose experts run
a clamped SwiGLU ("swigluoai", ``kernels/moe.py``).

What this class adds is the naming and layout of the checkpoint's MoE tensors:

* ``mlp.router`` is our ``mlp.gate``;
* ``mlp.experts.gate_up_proj`` [E, H, 2I] holds gate and up **interleaved** on its last
  dim (gate = ``[..., 0::2]``, up = ``[..., 1::2]``), stored input-major; our ``w13`` is
  [E, 2I, H], gate rows then up rows. ``gate_up_proj_bias`` [E, 2I] interleaves the same;
* ``mlp.experts.down_proj`` [E, I, H] is our ``w2`` [E, H, I] transposed;
* MXFP4 checkpoints (``models/quant/mxfp4.py``) store ``{gate_up,down}_proj_{blocks,scales}``
  [E, out, ...] instead: the gate_up rows are split into gate | up the same way, still
  packed, and nothing is transposed.

A class of its own (not a switch in ``LlamaForCausalLM.checkpoint_tensor``) so the other
families keep the weight updates that copy tensors as they come (models/weight_staging.py).
"""

from __future__ import annotations

import re

import torch

from actorllm.models.llama import LlamaForCausalLM

_MXFP4_NAMES = re.compile(r"\.experts\.(gate_up|down)_proj_(blocks|scales)$")


class GptOssForCausalLM(LlamaForCausalLM):
    def checkpoint_name(self, name: str) -> str | None:
        name = name.replace(".mlp.router.", ".mlp.gate.")
        m = _MXFP4_NAMES.search(name)
        if m is not None:
            ours = "w13" if m.group(1) == "gate_up" else "w2"
            return f"{name[: m.start()]}.experts.{ours}_{m.group(2)}"
        return super().checkpoint_name(name)

    def checkpoint_tensor(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        if name.endswith((".experts.w13_blocks", ".experts.w13_scales")):  # rows interleaved
            return torch.cat([tensor[:, 0::2], tensor[:, 1::2]], dim=1)
        if name.endswith(".experts.w13"):  # [E, H, 2I] interleaved -> [E, 2I, H] gate | up
            rows = tensor.transpose(1, 2)
            return torch.cat([rows[:, 0::2], rows[:, 1::2]], dim=1)
        if name.endswith(".experts.w13_bias"):  # [E, 2I] interleaved -> gate | up
            return torch.cat([tensor[:, 0::2], tensor[:, 1::2]], dim=1)
        if name.endswith(".experts.w2"):  # [E, I, H] -> [E, H, I]
            return tensor.transpose(1, 2)
        return tensor
