"""Attention metadata for a flat (varlen) token batch, and the paged attention layer.

The worker builds one :class:`AttentionMetadata` per step and every layer reads it. Requests
are packed one after another in the token dimension; ``T`` is the step's token count and
``B`` the number of scheduled requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from actorllm.kernels.kv_quant import is_fp8
from actorllm.kernels.ops import Ops


@dataclass(frozen=True)
class AttentionMetadata:
    """Where this step's tokens sit in the paged KV cache.

    Device tensors (what kernels read):

    * ``query_start_loc``: [B + 1] int32, request b owns token rows ``[qsl[b], qsl[b+1])``;
    * ``seq_lens``: [B] int32, context length of request b *including* this step's tokens;
    * ``block_table``: [B, max_blocks] int32, physical block ids (padding points at block 0);
    * ``slot_mapping``: [T] int64, cache slot of each token (``block * block_size + offset``).

    Host copies (``*_cpu``, plain lists) let the reference path plan without a device sync;
    ``prompt_lens_cpu`` ([B], each request's prompt tokens; None where the caller does not
    know them) lets it plan every row by its position (``kernels/attention.py``).
    ``plan_cache`` is scratch space for one step: the torch reference attention plans the
    step in the first layer and every later layer reuses the plan.

    A hybrid model (several KV cache groups, ``core/kv_cache/groups.py``) has one block
    table and slot mapping per group: this object is group 0's, and ``other_groups`` holds
    one metadata per further group (same rows and lengths, its own table, slot mapping and
    plan cache); a layer reads ``for_group(its group)``.
    """

    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    query_start_loc_cpu: list[int]
    seq_lens_cpu: list[int]
    max_query_len: int
    max_seq_len: int
    prompt_lens_cpu: list[int] | None = None
    plan_cache: dict[str, object] = field(default_factory=dict, compare=False, repr=False)
    other_groups: tuple[AttentionMetadata, ...] = ()

    @property
    def num_reqs(self) -> int:
        return len(self.seq_lens_cpu)

    def for_group(self, group: int) -> AttentionMetadata:
        """The metadata of KV cache group ``group`` (0: this one)."""
        return self if group == 0 else self.other_groups[group - 1]


class PagedAttention(nn.Module):
    """Writes this step's K/V into the layer's cache, then attends over the block tables."""

    def __init__(
        self,
        ops: Ops,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        sliding_window: int | None,
        *,
        scale: float | None = None,
        softcap: float | None = None,
    ) -> None:
        """``scale``: softmax scale (None: head_dim ** -0.5; Gemma 2/3 use
        query_pre_attn_scalar ** -0.5, Granite its attention_multiplier). ``softcap``: Gemma
        2's attention logit soft cap."""
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}"
            )
        self.ops = ops
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5 if scale is None else scale
        self.sliding_window = sliding_window
        # Passed only when set, so backends without the keyword keep working for others.
        self.extra: dict[str, float] = {} if softcap is None else {"softcap": softcap}
        # The KV cache group whose block table this layer reads (worker/kv_cache.py's
        # bind_kv_groups sets it for hybrid models).
        self.kv_group = 0
        # An fp8 KV cache holds k / k_scale and v / v_scale (kernels/kv_quant.py): the
        # checkpoint's scales where it has them (models/kv_scales.py), else 1.0, as vLLM.
        self.k_scale = 1.0
        self.v_scale = 1.0

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """q: [T, Hq, D], k/v: [T, Hk, D], kv_cache: ([NB, BS, Hk, D], same) -> [T, Hq, D].
        ``sinks`` ([Hq], gpt-oss): each head's sink logit, in every softmax denominator."""
        k_cache, v_cache = kv_cache
        if self.kv_group:
            meta = meta.other_groups[self.kv_group - 1]
        scales: dict[str, float] = {}
        if is_fp8(k_cache.dtype):  # every backend's write and attention take the scales
            scales = {"k_scale": self.k_scale, "v_scale": self.v_scale}
        self.ops.write_kv_cache(k, v, k_cache, v_cache, meta.slot_mapping, **scales)
        hints: dict[str, Any]
        if self.ops.attention_hints:
            # Host ints the runner already has: split-KV can trigger, and nothing syncs.
            hints = {"max_query_len": meta.max_query_len, "max_seq_len": meta.max_seq_len}
        else:
            hints = {"plan_cache": meta.plan_cache, "prompt_lens": meta.prompt_lens_cpu}
        if sinks is not None:  # like softcap: passed only when set
            hints["sinks"] = sinks
        return self.ops.paged_attention(
            q,
            k_cache,
            v_cache,
            meta.query_start_loc,
            meta.seq_lens,
            meta.block_table,
            self.scale,
            self.sliding_window,
            **self.extra,
            **hints,
            **scales,
        )
