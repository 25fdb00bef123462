"""Tensor parallelism inside the model: which slice of each weight a rank holds, and the
collectives that put the slices' results back together.

Theory of operation
-------------------
With ``tp_size = N`` every rank builds the same decoder from a *rank-local* config
(:func:`shard_config`): ``num_heads / N`` query heads, ``max(1, num_kv_heads / N)`` KV
heads (a KV head is replicated when there are fewer than N; rank r then uses head
``r * Hk // N``), ``intermediate_size / N`` MLP columns and, for MoE, ``moe_intermediate_size
/ N`` columns of *every* expert (the router and the expert choice stay replicated, so no
tokens move between ranks). So the code of ``models/llama.py`` runs unchanged on shards:

* column-parallel (output rows split): q/k/v, gate/up, each expert's gate/up;
* row-parallel (input columns split): o_proj, down_proj, each expert's down; their partial
  outputs are summed by one **all-reduce** after attention and one after the MLP (the MoE
  block's routed and shared experts are summed first, so still one); a row-parallel bias is
  held by rank 0 only (zeros elsewhere), so it is counted once;
* vocab-parallel: the embedding and the LM head hold ``ceil(V / N)`` vocabulary rows each
  (the last rank's tail is zero padding); a token outside a rank's rows embeds to zeros
  there and the all-reduce completes it; each rank's logits ``[N, V/N]`` are **gathered**
  on rank 0, concatenated and cut to ``V``.

Everything else (norms, the router, the shared expert's gate) is replicated. The loader
(``models/loader.py``) asks :func:`rank_piece` for each checkpoint tensor's slice and reads
only that slice from the safetensors file.

    >>> from actorllm.models.config import CheckpointConfig
    >>> cfg = CheckpointConfig.from_dict({"architectures": ["LlamaForCausalLM"], "vocab_size": 30,
    ...     "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
    ...     "num_attention_heads": 4, "num_key_value_heads": 1})
    >>> local = shard_config(cfg, rank=1, size=2)
    >>> local.num_heads, local.num_kv_heads, local.intermediate_size, vocab_shard(local)
    (2, 1, 16, 15)
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import msgspec
import torch

from actorllm.models.config import CheckpointConfig
from actorllm.models.families import FUSED_CHECKPOINTS


class TensorParallelError(ValueError):
    """The model cannot be split over ``tensor_parallel_size`` ranks."""

    param = "tensor_parallel_size"


class TPComm(Protocol):
    """The collectives a sharded model calls (distributed/comm.py implements them on gloo)."""

    rank: int
    world_size: int

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks, in place; returns it."""
        ...

    def gather_last_dim(self, x: torch.Tensor) -> torch.Tensor | None:
        """Rank 0: every rank's ``x`` concatenated along the last dim; others: None."""
        ...


def check_tensor_parallel(cfg: CheckpointConfig, size: int) -> None:
    """Raise :class:`TensorParallelError` unless ``cfg`` splits over ``size`` ranks."""
    if size == 1:
        return
    problems = []
    if cfg.model_type in FUSED_CHECKPOINTS:
        problems.append(f"{FUSED_CHECKPOINTS[cfg.model_type]} are not split")
    if cfg.model_type == "gpt_oss":
        problems.append("gpt-oss's attention sinks and expert biases are not split")
    if cfg.qk_norm and cfg.qk_norm_kind == "layer_head_list":
        problems.append("StableLM's q/k LayerNorms, one module per head, are not split")
    if cfg.qkv_head_major and cfg.num_kv_heads < size:
        problems.append(
            f"{cfg.model_type}'s query_key_value grouped by {cfg.num_kv_heads} KV heads is not "
            f"split over more ranks"
        )
    if cfg.qk_norm and not cfg.qk_norm_per_head:
        problems.append(f"{cfg.model_type}'s q/k norm over the whole projection is not split")
    if cfg.num_heads % size:
        problems.append(f"num_attention_heads {cfg.num_heads} is not divisible by {size}")
    hk = cfg.num_kv_heads
    if (hk >= size and hk % size) or (hk < size and size % hk):
        problems.append(f"num_key_value_heads {hk} and {size} do not divide one another")
    for name in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"):
        value = getattr(cfg, name)
        if value % size:
            problems.append(f"{name} {value} is not divisible by {size}")
    if problems:
        raise TensorParallelError(
            f"tensor_parallel_size: cannot split {cfg.architecture} over {size} ranks: "
            + "; ".join(problems)
        )


def shard_config(cfg: CheckpointConfig, rank: int, size: int) -> CheckpointConfig:
    """The rank-local config: local head and intermediate counts; ``vocab_size`` stays the
    full vocabulary (the sampler's), :func:`vocab_shard` gives the rank's rows."""
    check_tensor_parallel(cfg, size)
    if size == 1:
        return cfg
    return msgspec.structs.replace(
        cfg,
        num_heads=cfg.num_heads // size,
        num_kv_heads=max(1, cfg.num_kv_heads // size),
        intermediate_size=cfg.intermediate_size // size,
        moe_intermediate_size=cfg.moe_intermediate_size // size,
        shared_expert_intermediate_size=cfg.shared_expert_intermediate_size // size,
        tp_rank=rank,
        tp_size=size,
        full_num_heads=cfg.num_heads,
        full_num_kv_heads=cfg.num_kv_heads,
    )


def vocab_shard(cfg: CheckpointConfig) -> int:
    """Vocabulary rows each rank holds: ``ceil(V / N)``."""
    return math.ceil(cfg.vocab_size / cfg.tp_size)


# How a checkpoint tensor is split, by the name fragment of its (unpacked) projection.
# c_*: StarCoder 2's MLP, fc1 / fc2: OPT's and Phi's, dense_*: GPT-NeoX's, fc_in / fc_out:
# GPT-J's. A fused
# qkv_proj checkpoint tensor is split by rows as GPT-NeoX stores it, head by head ([H, 3,
# D]; models/llama.py's qkv_head_major) or Falcon's KV group by KV group (a block of whole
# groups a rank), or q | k | v as GPTBigCode's multi-query c_attn (:func:`_fused_qkv_cut`);
# Phi-3's is refused above.
_COLUMN = (".q_proj.", ".gate_proj.", ".up_proj.", ".w1.", ".w3.", ".mlp.c_fc.", ".mlp.fc1.",
           ".mlp.dense_h_to_4h.", ".mlp.fc_in.", ".qkv_proj.", ".self_attn.q_norm.")  # fmt: skip
# Cohere's per-head q/k norm weights [H, D] split by heads as q / k do (a [D] norm shared
# by every head, Qwen3's, is as long on every rank: not split).
_KV = (".k_proj.", ".v_proj.", ".self_attn.k_norm.")
_ROW = (".o_proj.", ".down_proj.", ".w2.", ".mlp.c_proj.", ".mlp.fc2.", ".mlp.dense_4h_to_h.",
        ".mlp.fc_out.")  # fmt: skip
_VOCAB = ("embed_tokens.weight", "lm_head.weight", "lm_head.bias")  # Phi's head has a bias
# A quantized LM head's tensors along the vocabulary (its g_idx is along the inputs).
_VOCAB_PACKED = ("lm_head.qweight", "lm_head.qzeros", "lm_head.scales")
# (output dim, input dim) of a projection's checkpoint tensor, by its leaf name; None: it
# has no such dim. Anything else (weight, weight_packed, weight_scale, weight_scale_inv,
# bias) holds output rows on dim 0 and input columns on its last dim. GPTQ and AWQ store
# their packed tensors input-major: qweight [I / pf, O] (AWQ [I, O / 8]), qzeros
# [G, O / pf], scales [G, O], g_idx [I].
_LEAF_DIMS: dict[str, tuple[int | None, int | None]] = {
    "qweight": (1, 0),
    "qzeros": (1, 0),
    "scales": (1, 0),
    "g_idx": (None, 0),
    "bias": (0, None),
}


def split_kind(name: str) -> str | None:
    """How projection ``name`` (our naming, before packing, e.g. ``...o_proj`` or
    ``...o_proj.weight``) is split: ``"column"`` (its outputs), ``"row"`` (its inputs)
    or None (replicated)."""
    name += "."
    if any(f in name for f in _COLUMN + _KV):
        return "column"
    if any(f in name for f in _ROW):
        return "row"
    return None


def rank_piece(cfg: CheckpointConfig, name: str, local_shape: tuple[int, ...], source: Any) -> Any:
    """This rank's part of checkpoint tensor ``name`` (our naming, before packing), read
    from ``source``: a tensor, or a safetensors slice (``get_slice``: only the part is read).
    ``local_shape`` is the shape of the parameter (or packed shard) it goes into.

    Quantized projections split the same way along their own layouts (:data:`_LEAF_DIMS`):
    packed weights, group scales and zero points by whole packed words and whole groups
    (``models/quant/apply.py`` refuses a split that is not whole). A tensor whose split
    dim is as long here as in the checkpoint is not split: the per-output-row scales of a
    row-parallel layer, one group over the whole row (``group_size=-1``), a per-tensor
    scale, the act-order scales every row-parallel rank keeps (GPTQ ``desc_act``)."""
    if cfg.tp_size == 1:
        return source[...] if not isinstance(source, torch.Tensor) else source
    r = cfg.tp_rank
    shape = _shape(source)
    if is_vocab(name):
        # The vocabulary dim: rows of a float tensor, the output dim of a quantized head's
        # packed tensors (GPTQ / AWQ lm_head: qweight, qzeros, scales).
        dim = _LEAF_DIMS[name.rsplit(".", 1)[-1]][0] if name in _VOCAB_PACKED else 0
        assert dim is not None
        rows = local_shape[dim]
        start, stop = vocab_rows(cfg, rows, shape[dim])
        part = _read(source, dim, start, stop - start)
        if part.shape[dim] < rows:  # the last rank's padding rows
            pad_shape = list(part.shape)
            pad_shape[dim] = rows - part.shape[dim]
            part = torch.cat([part, torch.zeros(pad_shape, dtype=part.dtype)], dim)
        return part
    if name.endswith((".experts.w13", ".experts.w2")):
        return _stacked_experts(name, shape, source, r, local_shape)
    kind = split_kind(name)
    if kind is None:
        return _full(source)  # replicated: norms, the router, the shared expert's gate
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "weight_shape":  # compressed-tensors' [O, I] of the weight: this rank's
        return _local_weight_shape(cfg, name, _full(source))
    if kind == "row" and leaf == "bias":  # summed by the all-reduce: rank 0 adds it once
        full = _full(source)
        return full if r == 0 else torch.zeros_like(full)
    if ".qkv_proj." in name + "." and not cfg.qkv_head_major:
        return _fused_qkv_cut(cfg, name, source)
    cut = split_range(cfg, name, local_shape, shape)
    return _full(source) if cut is None else _read(source, *cut)


def is_vocab(name: str) -> bool:
    """Tensor ``name`` holds vocabulary rows (the embedding, the LM head, float or packed)."""
    return name.endswith(_VOCAB) or name in _VOCAB_PACKED


def vocab_rows(cfg: CheckpointConfig, rows: int, total: int) -> tuple[int, int]:
    """``[start, stop)`` of the ``total`` vocabulary rows this rank holds in its ``rows``
    (the last rank's may be fewer: the rest of its shard is zero padding)."""
    start = min(cfg.tp_rank * rows, total)
    return start, min(start + rows, total)


def split_range(
    cfg: CheckpointConfig, name: str, local_shape: tuple[int, ...], shape: tuple[int, ...]
) -> tuple[int, int, int] | None:
    """``(dim, start, length)``: the cut of projection tensor ``name`` (``shape`` in the
    checkpoint) that fills this rank's ``local_shape``; None when the rank holds it whole
    (replicated, or its split dim as long here as in the checkpoint). Not for the
    vocabulary, stacked experts or row-parallel biases (:func:`rank_piece`'s own cases)."""
    kind = split_kind(name)
    if kind is None:
        return None
    out_dim, in_dim = _LEAF_DIMS.get(name.rsplit(".", 1)[-1], (0, -1))
    dim = out_dim if kind == "column" else in_dim
    if dim is None or not shape or len(shape) != len(local_shape):
        return None
    dim %= len(shape)
    length = local_shape[dim]
    if length == shape[dim]:
        return None
    index = cfg.tp_rank
    if any(f in name for f in _KV) and cfg.full_num_kv_heads < cfg.tp_size:
        # Fewer KV heads than ranks: rank r replicates head r * Hk // N (its query heads').
        index = (cfg.tp_rank * cfg.full_num_kv_heads) // cfg.tp_size
    return dim, index * length, length


def _fused_qkv_cut(cfg: CheckpointConfig, name: str, source: Any) -> torch.Tensor:
    """This rank's rows of a q | k | v fused checkpoint tensor: its query heads' q rows,
    then its KV heads' k and v rows (a replicated KV head's when there are fewer than
    ranks), concatenated along the output dim (a quantized tensor's own; packed words per
    head must be whole)."""
    leaf = name.rsplit(".", 1)[-1]
    dim = _LEAF_DIMS.get(leaf, (0, -1))[0]
    if dim is None:  # GPTQ's g_idx: along the inputs, every rank's
        return _full(source)
    shape = _shape(source)
    hq, hk = cfg.full_num_heads, cfg.full_num_kv_heads
    per_head, rest = divmod(shape[dim], hq + 2 * hk)  # rows (or packed words) per head
    if rest:
        raise TensorParallelError(f"{name}: {shape[dim]} rows are not {hq + 2 * hk} heads")
    kv_index = cfg.tp_rank if hk >= cfg.tp_size else cfg.tp_rank * hk // cfg.tp_size
    q_len, kv_len = cfg.num_heads * per_head, cfg.num_kv_heads * per_head
    q = _read(source, dim, cfg.tp_rank * q_len, q_len)
    k = _read(source, dim, hq * per_head + kv_index * kv_len, kv_len)
    v = _read(source, dim, (hq + hk) * per_head + kv_index * kv_len, kv_len)
    return torch.cat([q, k, v], dim)


def _local_weight_shape(cfg: CheckpointConfig, name: str, full: torch.Tensor) -> torch.Tensor:
    """A projection's ``[O, I]`` (int64 [2]) -> this rank's part's."""
    o, i = (int(v) for v in full.tolist())
    local = full_weight_shape(cfg, name, 1, 1)  # how many times the rank's part fits
    return torch.tensor([o // local[0], i // local[1]], dtype=full.dtype)


def lora_pair_piece(
    cfg: CheckpointConfig, name: str, a: torch.Tensor, b: torch.Tensor, out: int, inp: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's part of a LoRA pair adapting checkpoint weight ``name`` (our naming,
    before packing): ``a`` [r, in] and ``b`` [out, r] are the adapter's whole tensors,
    ``out`` / ``inp`` this rank's sizes of the projection (its packed slice's rows).

    Column-parallel (q/k/v, gate/up): ``a`` whole, ``b``'s rows of this rank's outputs.
    Row-parallel (o, down): ``a``'s columns of this rank's inputs, ``b`` whole; each rank
    adds ``(x_r a_r^T) b^T`` to its partial output, and the projection's all-reduce sums
    them to ``(x a^T) b^T``, so no extra collective is needed."""
    if cfg.tp_size == 1:
        return a, b
    r = a.shape[0]
    if any(f in name for f in _ROW):
        return rank_piece(cfg, name, (r, inp), a), b
    return a, rank_piece(cfg, name, (out, r), b)


def full_weight_shape(cfg: CheckpointConfig, name: str, out: int, inp: int) -> tuple[int, int]:
    """The checkpoint's ``[out, in]`` of projection weight ``name`` (our naming, before
    packing) whose rank-local part is ``[out, inp]``: the inverse of :func:`rank_piece`'s
    split (a replicated KV head counts once)."""
    if cfg.tp_size == 1:
        return out, inp
    if any(f in name for f in _KV):
        return out * cfg.full_num_kv_heads // cfg.num_kv_heads, inp
    if ".qkv_proj." in name + "." and not cfg.qkv_head_major:  # q | k | v fused
        heads = cfg.num_heads + 2 * cfg.num_kv_heads
        full = cfg.full_num_heads + 2 * cfg.full_num_kv_heads
        return out // heads * full, inp
    if any(f in name for f in _COLUMN):
        return out * cfg.tp_size, inp
    if any(f in name for f in _ROW):
        return out, inp * cfg.tp_size
    return out, inp


def _stacked_experts(
    name: str, shape: tuple[int, ...], source: Any, r: int, local: tuple[int, ...]
) -> torch.Tensor:
    """transformers 5's stacked experts (loaded as our w13 / w2): gate_up [E, 2I, H] (gate
    rows, then up rows) and down [E, H, I]."""
    if name.endswith(".w2"):
        i = local[-1]
        return _read(source, 2, r * i, i)  # [E, H, I/N]
    i, whole = local[1] // 2, shape[1] // 2
    gate = _read(source, 1, r * i, i)  # [E, I/N, H]
    up = _read(source, 1, whole + r * i, i)
    return torch.cat([gate, up], dim=1)  # [E, 2I/N, H]


def _shape(source: Any) -> tuple[int, ...]:
    if isinstance(source, torch.Tensor):
        return tuple(source.shape)
    return tuple(source.get_shape())


def _full(source: Any) -> torch.Tensor:
    return source if isinstance(source, torch.Tensor) else source[...]


def _read(source: Any, dim: int, start: int, length: int) -> torch.Tensor:
    """``source`` narrowed on ``dim`` to ``[start, start + length)``; a safetensors slice
    reads only those bytes."""
    if isinstance(source, torch.Tensor):
        return source.narrow(dim, start, length)
    index = tuple([slice(None)] * dim + [slice(start, start + length)])
    return source[index]
