"""LoRA beside the model's projections: per-projection slot buffers and the forward hook.

:func:`attach_lora` gives every attention and MLP projection (``qkv_proj``, ``o_proj``,
``gate_up_proj``, ``down_proj``) a :class:`LoRALayer`: ``max_loras`` *slots* of stacked,
zero-padded A and block B (``kernels/lora.py`` has the layout), and a forward hook that adds
each row segment's adapter to the projection's output. The worker decides which adapter
sits in which slot and which rows use which slot (``worker/lora_slots.py``) and tells the
returned :class:`LoRAState`; the model code itself is unchanged. A slot holding nothing
for a projection (an adapter that does not target it) costs that projection nothing. A
quantized projection (GPTQ, AWQ, compressed-tensors, fp8, GGUF) takes adapters the same
way: the hook adds ``x A^T B^T`` to what its packed-weight kernel computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np
import torch
from torch import nn

from actorllm.kernels.cpu_features import native_bf16
from actorllm.kernels.lora import LoRASegments, add_lora_segments
from actorllm.models.lora_adapter import LoRASlice, LoRAWeights, is_target


class LoRALayer:
    """One projection's ``max_loras`` slots."""

    def __init__(
        self,
        linear: nn.Module,
        shard_sizes: Sequence[int] | None,
        slots: int,
        max_rank: int,
        dtype: torch.dtype,
    ) -> None:
        """``linear``: the projection, float or quantized (its ``in_features`` /
        ``out_features`` are the slots' widths)."""
        device = next(chain(linear.parameters(), linear.buffers())).device
        n_in, n_out = int(linear.in_features), int(linear.out_features)  # type: ignore[arg-type]
        sizes = list(shard_sizes) if shard_sizes else [n_out]
        self.rank = max_rank
        # [S, n_slices * R, K]: slice i's A in rank rows [i * R, i * R + r)
        self.a = torch.zeros(slots, len(sizes) * max_rank, n_in, dtype=dtype,
                             device=device)  # fmt: skip
        # [S, n_slices * R, N]: slice i's B^T in rank rows [i * R, i * R + r) and its
        # output columns [col_starts[i], col_starts[i] + sizes[i]); zero elsewhere
        self.b = torch.zeros(slots, len(sizes) * max_rank, n_out, dtype=dtype,
                             device=device)  # fmt: skip
        self.sizes = sizes
        self.col_starts = [sum(sizes[:i]) for i in range(len(sizes))]
        self.active: set[int] = set()  # slots holding an adapter of this projection

    def fill(self, slot: int, slices: Sequence[LoRASlice]) -> None:
        """Put an adapter's slices in ``slot`` (empty: the slot holds nothing here)."""
        self.a[slot].zero_()
        self.b[slot].zero_()
        r0 = self.rank
        for s in slices:
            r = s.a.shape[0]
            # A whole packed projection (Phi-3's own qkv_proj): its A in every slice, its
            # B rows cut at the slices' columns.
            pieces = range(len(self.sizes)) if s.shard is None else (s.shard,)
            for i in pieces:
                c0, n = self.col_starts[i], self.sizes[i]
                b0 = 0 if s.shard is not None else c0
                self.a[slot, i * r0 : i * r0 + r].copy_(s.a)  # [r, K]
                self.b[slot, i * r0 : i * r0 + r, c0 : c0 + n].copy_(s.b[b0 : b0 + n].T)
        if slices:
            self.active.add(slot)
        else:
            self.active.discard(slot)


class LoRAState:
    """The model's LoRA layers and this step's row segments (set by the worker per step)."""

    def __init__(self, layers: dict[str, LoRALayer]) -> None:
        self.layers = layers  # {projection module name: its slots}
        self.segments: LoRASegments | None = None  # this step's; None: a base-only step
        self.row_slots: np.ndarray | None = None  # [T] this step's; None: a base-only step

    def use(
        self, row_slots: Sequence[int] | np.ndarray | None, device: torch.device | None = None
    ) -> None:
        """This step's rows: [T] each row's slot (-1: the base model); None: no adapter."""
        rs = None if row_slots is None else np.asarray(row_slots, dtype=np.int64)
        if rs is None or not bool((rs >= 0).any()):
            self.segments = self.row_slots = None  # a base-only step: the hooks add nothing
            return
        self.row_slots = rs
        slots = next(iter(self.layers.values())).a  # every layer's: one device and dtype
        dev = device if device is not None else slots.device
        half = dev.type == "cpu" and slots.dtype != torch.float32  # the dense path's dtype
        self.segments = LoRASegments.build(rs, dev, half)

    def fill(self, slot: int, weights: LoRAWeights | None) -> None:
        """Load ``weights`` into ``slot`` of every projection (None: empty the slot)."""
        modules = {} if weights is None else weights.modules
        for name, layer in self.layers.items():
            layer.fill(slot, modules.get(name, ()))

    def hook(self, layer: LoRALayer) -> Any:
        impl = lora_impl(layer.a.device)

        def add(_module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            seg = self.segments
            if seg is not None and layer.active:  # in place: ``out`` is the fresh output
                impl(out, args[0], layer.a, layer.b, layer.col_starts, seg, layer.active)

        return add


def lora_impl(device: torch.device) -> Any:
    """The shrink/expand for ``device``: the Triton kernels on CUDA
    (``kernels/triton/lora.py``), the torch segmented path elsewhere."""
    if device.type == "cuda":
        from actorllm.kernels.triton.lora import add_lora_segments as triton_lora

        return triton_lora
    return add_lora_segments


def lora_compute_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype the slots hold and the shrink/expand run in: ``dtype`` (the adapter's
    values are rounded to it when read), widened to float32 on a CPU without hardware
    bf16 GEMMs (emulated there; the LoRA GEMMs are small, and punica's intermediate is
    float32 too). bf16 stays bf16 where AMX / AVX512-BF16 run it (``kernels/lora.py``'s
    dense path)."""
    if device.type != "cpu":
        return dtype
    return dtype if dtype == torch.bfloat16 and native_bf16() else torch.float32


def attach_lora(model: nn.Module, slots: int, max_rank: int, dtype: torch.dtype) -> LoRAState:
    """Give every targetable projection of ``model`` its slots and hook; returns the state
    the worker drives. Call after any pass that replaces modules (oneDNN prepacking)."""
    layers: dict[str, LoRALayer] = {}
    device = next(model.parameters()).device
    dtype = lora_compute_dtype(dtype, device)
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if not is_target(model, name, module):
            continue
        owner = model.get_submodule(name.rsplit(".", 1)[0])
        packed = leaf in ("qkv_proj", "gate_up_proj")
        sizes = getattr(owner, "shard_sizes", None) if packed else None
        layers[name] = LoRALayer(module, sizes, slots, max_rank, dtype)
    state = LoRAState(layers)
    for name, layer in layers.items():
        model.get_submodule(name).register_forward_hook(state.hook(layer))
    return state
