"""Tensor parallelism over a GGUF file: each rank keeps its piece of every weight, still
in its blocks, cut the way ``models/parallel.py`` cuts a safetensors checkpoint.

* column-parallel (q/k/v, gate/up, each expert's gate/up): the rank's output rows; each
  row is a run of whole blocks, so any row cut is whole;
* row-parallel (o_proj, down_proj, each expert's down): the rank's input columns, which
  must be whole groups of the repacked layout (``blocks.GROUP_SIZE``: 32 columns; Q6_K,
  Q3_K, Q2_K: 16), or the split is refused naming the tensor and its type;
* vocabulary (the LM head, a tied head read from ``token_embd``): ``ceil(V / N)`` rows a
  rank, the last rank's tail zero rows (zero scale and offset: logits the gather cuts).

The whole tensor is repacked once on each rank, then cut and copied, so a rank holds only
its piece.
"""

from __future__ import annotations

from pathlib import Path

import torch

from actorllm.models.config import CheckpointConfig
from actorllm.models.gguf.blocks import GROUP_SIZE, BlockWeight
from actorllm.models.gguf.config import open_reader
from actorllm.models.gguf.linear import Part
from actorllm.models.parallel import (
    TensorParallelError,
    is_vocab,
    rank_piece,
    split_range,
    vocab_rows,
)


def part_shape(part: Part) -> tuple[int, int]:
    if isinstance(part, BlockWeight):
        groups = int(part.scales.shape[1])
        return part.rows, groups * part.group_size
    return int(part.shape[0]), int(part.shape[1])


def rank_part(
    cfg: CheckpointConfig, name: str, tensor: str, part: Part, local: tuple[int, int]
) -> Part:
    """This rank's piece (``local`` [rows, cols]) of weight ``name`` (our naming, e.g.
    ``model.layers.0.self_attn.q_proj.weight``; ``tensor``: the file's name for the
    error), whole in ``part``. A float part takes the safetensors loader's own cut
    (``rank_piece``), copied so the whole tensor is freed."""
    if cfg.tp_size == 1:
        return part
    if isinstance(part, torch.Tensor):
        piece = rank_piece(cfg, name, local, part)
        return piece if piece is part else piece.clone(memory_format=torch.contiguous_format)
    rows, cols = part_shape(part)
    if is_vocab(name):
        start, stop = vocab_rows(cfg, local[0], rows)
        return part.narrow(0, start, stop - start).pad_rows(local[0] - (stop - start))
    cut = split_range(cfg, name, local, (rows, cols))
    if cut is None:
        return part
    dim, start, length = cut
    try:
        return part.narrow(dim, start, length)
    except ValueError as e:
        raise TensorParallelError(
            f"tensor_parallel_size={cfg.tp_size}: GGUF tensor {tensor!r} ({part.qtype}) "
            f"would be split at input columns {start}..{start + length} of {cols}: {e}"
        ) from None


# llama.cpp's names of the row-parallel weights (their input columns are split).
_ROW_TENSORS = ("attn_output", "ffn_down", "ffn_down_exps", "ffn_down_shexp")


def check_gguf_split(path: str | Path, size: int) -> None:
    """Refuse (before any rank starts) a split of GGUF file ``path`` over ``size`` ranks
    that cuts a row-parallel weight's groups, naming the first such tensor."""
    reader = open_reader(Path(path))
    for t in reader.tensors:
        parts = t.name.split(".")
        if parts[-1] != "weight" or len(parts) < 2 or parts[-2] not in _ROW_TENSORS:
            continue
        group = GROUP_SIZE.get(t.tensor_type, 1)  # float tensors: any column
        cols = int(t.shape[0])  # GGUF lists the innermost (input) dimension first
        if cols % size or (cols // size) % group:
            raise TensorParallelError(
                f"tensor_parallel_size={size}: GGUF tensor {t.name!r} "
                f"({t.tensor_type.name}) has {cols} input columns, which do not split into "
                f"{size} runs of whole groups of {group}"
            )
