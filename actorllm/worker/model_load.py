"""A runner's model, loaded and made ready for its KV cache and its device.

After the weights are read (``models/loader.py``): an fp8 KV cache's scales come from the
checkpoint, CPU linears are prepacked for oneDNN (``models/onednn_linear.py``), the weights'
memory is collapsed into huge pages on CPU (``worker/huge_pages.py``), and each attention
layer learns its KV cache group (``worker/kv_cache.py``). Blocks for the whole load.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from actorllm.core.kv_cache.groups import KVCacheGroup
from actorllm.kernels.kv_quant import is_fp8
from actorllm.kernels.ops import Ops
from actorllm.models.base import CausalLM
from actorllm.models.config import CheckpointConfig
from actorllm.models.load_format import LoadFormat
from actorllm.models.loader import load_model
from actorllm.models.onednn_linear import prepack_linears
from actorllm.models.quant.apply import weight_bytes
from actorllm.worker.huge_pages import model_on_huge_pages
from actorllm.worker.kv_cache import bind_kv_groups, load_kv_scales


def load_runner_model(
    path: Path,
    config: CheckpointConfig,
    *,
    dtype: torch.dtype,
    device: torch.device,
    ops: Ops,
    load_format: LoadFormat,
    seed: int,
    quantization: str | None,
    kv_dtype: torch.dtype,
    kv_groups: Sequence[KVCacheGroup],
    kv_num_layers: int,
    huge_pages: bool,
) -> tuple[CausalLM, int]:
    """The model and the resident bytes of its weights as loaded (quantized linears at
    their packed size). ``kv_num_layers``: the layers the KV cache holds (pipeline
    parallel: this stage's); ``huge_pages``: the weights onto huge pages (CPU)."""
    model = load_model(
        path,
        config,
        dtype=dtype,
        device=device,
        ops=ops,
        load_format=load_format,
        seed=seed,
        max_positions=config.max_model_len,
        quantization=quantization,
    )
    size = weight_bytes(model)
    if is_fp8(kv_dtype):
        load_kv_scales(model, path, load_format)
    if device.type == "cpu":
        prepack_linears(model)  # oneDNN matmuls (models/onednn_linear.py)
    if huge_pages:
        model_on_huge_pages(model)
    bind_kv_groups(model, kv_groups, kv_num_layers)
    return model, size
