"""The model config one rank runs: its tensor-parallel shard, its pipeline stage, a pooling
model's causal body, and the context length it serves.

Read from the checkpoint's config.json only (no weights), so a bad checkpoint or option is
refused before anything is loaded: ``ModelConfigError`` / ``UnsupportedArchitectureError``
(bad checkpoint), ``ValueError`` (``max_model_len`` above the model's positions),
``NotImplementedError`` (an option pipeline parallel is not built with).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from actorllm.models.config import CheckpointConfig
from actorllm.models.parallel import shard_config
from actorllm.models.pipeline import stage_config
from actorllm.models.pooler_spec import causal_architecture


def rank_model_config(
    model_path: Path,
    *,
    max_model_len: int | None,
    tp_rank: int,
    tp_size: int,
    pp_rank: int,
    pp_size: int,
    pp_partition: str | None,
    pooling: tuple[str, dict[str, Any] | None] | None,
    lora: object,
    speculative: bool,
) -> CheckpointConfig:
    """This rank's config, ``max_model_len`` set (None: the model's positions)."""
    # Tensor parallel: this rank's heads and columns (models/parallel.py).
    cfg = shard_config(CheckpointConfig.from_pretrained(model_path), tp_rank, tp_size)
    # Pipeline parallel: this rank's stage's layers (models/pipeline.py; rank 0 holds the
    # last stage, distributed/pipe.py).
    if pp_size > 1:
        from actorllm.distributed.pipe import rank_stage

        refuse_with_pipeline(tp_size=tp_size, pooling=pooling, lora=lora, speculative=speculative)
        cfg = stage_config(cfg, rank_stage(pp_rank, pp_size), pp_size, pp_partition)
    # A pooling model (--runner pooling --convert embed|classify) builds on the causal
    # class with the same body; its steps pool instead of sampling (worker/decoder_pooling.py).
    if pooling is not None:
        cfg = msgspec.structs.replace(cfg, architecture=causal_architecture(cfg.architecture))
    limit = cfg.max_position_embeddings
    if max_model_len is not None and not 0 < max_model_len <= limit:
        raise ValueError(
            f"max_model_len must be in [1, {limit}] for this model, got {max_model_len}"
        )
    return msgspec.structs.replace(cfg, max_model_len=max_model_len or limit)


def refuse_with_pipeline(
    *,
    tp_size: int,
    pooling: object,
    lora: object,
    speculative: bool,
) -> None:
    """What pipeline_parallel_size > 1 is not built with: refused by name.

    >>> refuse_with_pipeline(tp_size=1, pooling=None, lora=None, speculative=True)
    Traceback (most recent call last):
    NotImplementedError: pipeline_parallel_size > 1 with speculative_config is not built yet
    """
    refused = [
        (tp_size > 1, "tensor_parallel_size > 1 (a stage split over tensor-parallel ranks)"),
        (pooling is not None, "a pooling model (runner 'pooling')"),
        (lora is not None, "enable_lora"),
        (speculative, "speculative_config"),
    ]
    for hit, what in refused:
        if hit:
            raise NotImplementedError(f"pipeline_parallel_size > 1 with {what} is not built yet")
