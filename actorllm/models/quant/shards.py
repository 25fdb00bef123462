"""Tensor parallelism over quantized linears: which splits are whole, refused by name at
start otherwise (vLLM's rules and messages).

``models/parallel.py`` cuts every checkpoint tensor; the cut is only right when it falls
on whole packed words and whole scale groups (or blocks):

* column-parallel (q/k/v, gate/up): each rank's output rows of every fused part must fill
  whole int32 words where the checkpoint packs along outputs (GPTQ / AWQ ``qzeros``, AWQ
  ``qweight``: ``32 / bits`` columns each) and whole fp8 scale blocks (``block_n`` rows);
* row-parallel (o_proj, down_proj): each rank's input columns must be whole groups
  (``group_size``), whole packed words where the weight packs along inputs (GPTQ,
  compressed-tensors pack-quantized) and whole fp8 blocks (``block_k`` columns).

Per-output-row scales (W8A8 int8, fp8 per channel), per-tensor scales and one group over
the whole row (``group_size=-1``) never constrain the split. :func:`check_quantized_split`
builds the rank-local model on the meta device (no memory, no weights) so a refusal
comes before any rank process is started.
"""

from __future__ import annotations

import msgspec
import torch

from actorllm.models.config import CheckpointConfig
from actorllm.models.parallel import TensorParallelError, shard_config
from actorllm.models.quant.spec import QuantSpec

# vLLM's words (gptq.py / awq.py / fp8_utils.py), kept so a search for them finds ours.
_INPUT = (
    "The input size is not aligned with the quantized weight shape. This can be caused by "
    "too large tensor parallel size."
)
_OUTPUT = (
    "The output size is not aligned with the quantized weight shape. This can be caused by "
    "too large tensor parallel size."
)


def check_shard_alignment(
    cfg: CheckpointConfig,
    spec: QuantSpec,
    layer: str,
    kind: str | None,
    in_features: int,
    sizes: list[int],
) -> None:
    """Raise :class:`TensorParallelError` naming ``layer`` (our name, e.g.
    ``model.layers.0.mlp.down_proj``) unless its rank-local shapes (``in_features``, the
    output ``sizes`` of its fused parts) split the checkpoint's tensors whole. ``kind``:
    its split (:func:`~actorllm.models.parallel.split_kind`)."""
    n = cfg.tp_size
    if n == 1 or kind is None:
        return
    head = f"tensor_parallel_size={n}: {layer} ({spec.method})"
    if kind == "row":
        problem = _input_problem(spec, in_features)
        if problem:
            raise TensorParallelError(
                f"{head} holds {in_features} of its {in_features * n} input columns on each "
                f"rank, {problem}. {_INPUT}"
            )
        return
    for size in sizes:
        problem = _output_problem(spec, size)
        if problem:
            raise TensorParallelError(
                f"{head} holds {size} output rows (of {sizes}) on each rank, {problem}. {_OUTPUT}"
            )


def _input_problem(spec: QuantSpec, cols: int) -> str | None:
    if spec.scheme == "fp8":
        if spec.block is not None and cols % spec.block[1]:
            bk = spec.block[1]
            return (
                f"not whole fp8 blocks (Weight input_size_per_partition = {cols} is not "
                f"divisible by weight quantization block_k = {bk}.)"
            )
        return None
    if spec.scheme == "w8a8_int8":
        return None
    if spec.group_size != -1 and cols % spec.group_size:
        return f"not a multiple of the quantization group_size {spec.group_size}"
    pf = 32 // spec.bits
    if spec.scheme in ("gptq", "pack_quantized") and cols % pf:
        return f"not whole int32 words of {pf} packed {spec.bits}-bit values"
    return None


def _output_problem(spec: QuantSpec, rows: int) -> str | None:
    if spec.scheme == "fp8":
        if spec.block is not None and rows % spec.block[0]:
            bn = spec.block[0]
            return (
                f"not whole fp8 blocks (Weight output_partition_size = {rows} is not "
                f"divisible by weight quantization block_n = {bn}.)"
            )
        return None
    pf = 32 // spec.bits
    if spec.scheme in ("gptq", "awq") and rows % pf:
        return f"not whole int32 words of {pf} packed {spec.bits}-bit values"
    return None


def check_quantized_split(cfg: CheckpointConfig, spec: QuantSpec, size: int) -> None:
    """Build rank 0's part of ``cfg`` on the meta device with its quantized linears: every
    refusal of :func:`check_shard_alignment` (and of the linears themselves) is raised
    here, before any rank is started. ``cfg``: the whole checkpoint's config."""
    from actorllm.kernels.ops import TORCH_OPS
    from actorllm.models.meta_init import on_meta
    from actorllm.models.pooler_spec import causal_architecture
    from actorllm.models.quant.apply import quantize_linears
    from actorllm.models.registry import resolve_model_class

    local = shard_config(msgspec.structs.replace(cfg, tp_size=1), 0, size)
    cls = resolve_model_class(causal_architecture(cfg.architecture))  # a pooling one's body
    with on_meta():
        model = cls(local, TORCH_OPS)
    quantize_linears(model, spec, torch.float32)
