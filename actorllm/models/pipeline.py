"""Pipeline parallelism inside the model: which decoder layers a stage holds, and the link
that carries the hidden states from one stage to the next.

Theory of operation
-------------------
With ``pipeline_parallel_size = P`` the decoder's layers are split into P contiguous runs
(:func:`get_pp_indices`, vLLM's split: even, the remainder on the stages before the last;
``VLLM_PP_LAYER_PARTITION="a,b,..."`` sets it by hand). Stage s builds the model from
:func:`stage_config` (``pp_layers = (start, end)``): its own layers, the token embedding on
the first stage (and on the last when the LM head is tied to it), the final norm and the
LM head on the last; every other layer is a :class:`PPMissingLayer`, which holds no weights,
so the loader reads nothing for it and the stage's KV cache covers its own layers only.

A step runs on every stage with the same inputs: the first stage embeds the tokens, each
stage runs its layers and sends the residual stream (``x`` and ``residual``, both
``[T, H]``, as one ``[2, T, H]`` tensor: a :class:`PipeLink`) to the next, which receives
it into a buffer of the shape it knows from the step (``T`` tokens). The last stage applies
the final norm, computes the logits and samples.

    >>> get_pp_indices(4, 0, 2), get_pp_indices(5, 0, 2), get_pp_indices(5, 1, 2)
    ((0, 2), (0, 3), (3, 5))
"""

from __future__ import annotations

import os
from typing import Protocol

import msgspec
import torch
from torch import nn

from actorllm.models.config import CheckpointConfig

PARTITION_ENV = "VLLM_PP_LAYER_PARTITION"  # vLLM's name: layers per stage, "a,b,..."


class PipelineParallelError(ValueError):
    """The model cannot be split over ``pipeline_parallel_size`` stages."""

    param = "pipeline_parallel_size"


class PipeLink(Protocol):
    """A stage's point-to-point link to its neighbours (distributed/comm.py's GlooComm)."""

    def send_stage(self, x: torch.Tensor) -> None:
        """Send ``x`` ([2, T, H]: hidden, residual) to the next stage."""
        ...

    def recv_stage(self, shape: tuple[int, int, int], dtype: torch.dtype) -> torch.Tensor:
        """The previous stage's ``[2, T, H]`` (``shape``) for this step."""
        ...


class PPMissingLayer(nn.Module):
    """A layer (or embedding, norm, head) another stage holds: no weights here."""

    def forward(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("a layer of another pipeline stage was called on this one")


def get_pp_indices(
    num_layers: int, pp_rank: int, pp_size: int, partition: str | None = None
) -> tuple[int, int]:
    """Stage ``pp_rank``'s layers ``[start, end)``: vLLM's split, or ``partition`` ("a,b,...";
    None: ``VLLM_PP_LAYER_PARTITION`` of this process). Raises :class:`PipelineParallelError`
    for a partition that does not fit."""
    raw = partition if partition is not None else os.environ.get(PARTITION_ENV)
    if raw is not None:
        try:
            parts = [int(n) for n in raw.split(",")]
        except ValueError:
            raise PipelineParallelError(
                f"{PARTITION_ENV}={raw!r}: not a comma-separated list of layer counts"
            ) from None
        if len(parts) != pp_size:
            raise PipelineParallelError(
                f"{PARTITION_ENV}={raw!r} names {len(parts)} stages, "
                f"pipeline_parallel_size is {pp_size}"
            )
        if sum(parts) != num_layers:
            raise PipelineParallelError(
                f"{PARTITION_ENV}={raw!r} sums to {sum(parts)} layers, the model has {num_layers}"
            )
    else:
        parts = [num_layers // pp_size] * pp_size
        for i in range(2, num_layers % pp_size + 2):  # the remainder: stages before the last
            parts[-i] += 1
    if min(parts) < 1:
        raise PipelineParallelError(
            f"pipeline_parallel_size {pp_size}: a stage would hold no layer "
            f"(partition {parts} of {num_layers} layers)"
        )
    start = sum(parts[:pp_rank])
    return start, start + parts[pp_rank]


def check_pipeline_parallel(cfg: CheckpointConfig, size: int, partition: str | None = None) -> None:
    """Raise :class:`PipelineParallelError` unless ``cfg`` splits over ``size`` stages."""
    if size == 1:
        return
    problems = []
    if len(set(cfg.sliding_windows)) > 1:
        problems.append(
            "a model mixing sliding-window and full-attention layers (its KV cache groups) "
            "is not split into stages"
        )
    if problems:
        raise PipelineParallelError(
            f"pipeline_parallel_size: cannot split {cfg.architecture} over {size} stages: "
            + "; ".join(problems)
        )
    for stage in range(size):
        get_pp_indices(cfg.num_layers, stage, size, partition)  # raises for a bad one


def stage_config(
    cfg: CheckpointConfig, stage: int, size: int, partition: str | None = None
) -> CheckpointConfig:
    """Stage ``stage``'s config: ``pp_layers`` set (the whole model when ``size`` is 1)."""
    check_pipeline_parallel(cfg, size, partition)
    if size == 1:
        return cfg
    layers = get_pp_indices(cfg.num_layers, stage, size, partition)
    return msgspec.structs.replace(cfg, pp_layers=layers)


def stage_layers(cfg: CheckpointConfig) -> tuple[int, int]:
    """The ``[start, end)`` layers ``cfg``'s stage holds (every layer without pipelining)."""
    return cfg.pp_layers if cfg.pp_layers is not None else (0, cfg.num_layers)


def is_first_stage(cfg: CheckpointConfig) -> bool:
    return stage_layers(cfg)[0] == 0


def is_last_stage(cfg: CheckpointConfig) -> bool:
    return stage_layers(cfg)[1] == cfg.num_layers


def stage_kv_config(cfg: CheckpointConfig) -> CheckpointConfig:
    """The config the stage's KV cache is sized from: its own layers only."""
    if cfg.pp_layers is None:
        return cfg
    start, end = cfg.pp_layers
    return msgspec.structs.replace(
        cfg, num_layers=end - start, sliding_windows=cfg.sliding_windows[start:end]
    )


def owns_weight(cfg: CheckpointConfig, name: str) -> bool:
    """Whether checkpoint tensor ``name`` (our naming) belongs on ``cfg``'s stage."""
    if cfg.pp_layers is None:
        return True
    start, end = cfg.pp_layers
    if name.startswith("model.layers."):
        index = int(name.split(".", 3)[2])
        return start <= index < end
    if name.startswith(("model.embed_positions.", "model.project_in.")):  # OPT's
        return is_first_stage(cfg)
    if name.startswith("model.project_out."):
        return is_last_stage(cfg)
    if name.startswith("model.embed_tokens."):
        return is_first_stage(cfg) or (cfg.tie_word_embeddings and is_last_stage(cfg))
    if name.startswith(("model.norm.", "lm_head.")):
        return is_last_stage(cfg)
    return True
