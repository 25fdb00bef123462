"""Per-layer KV cache scales from a checkpoint, for an fp8 KV cache (kernels/kv_quant.py).

vLLM reads them under two spellings: ``model.layers.N.self_attn.k_scale`` / ``.v_scale``
(fp8 checkpoints, llm-compressor's newer output), and ``...self_attn.k_proj.output_scale`` /
``v_proj.output_scale`` (compressed-tensors with a ``kv_cache_scheme``: the k / v
projections' static output scales). One float each, per tensor; a layer without them keeps
1.0, as vLLM. The weight loader skips these tensors (``models/loader.py``); they are read
here, only when the cache is fp8.

    >>> _layer_scale("model.layers.3.self_attn.k_scale")
    (3, 'k')
    >>> _layer_scale("model.layers.0.self_attn.v_proj.output_scale")
    (0, 'v')
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path

from torch import nn

from actorllm.models.attention import PagedAttention
from actorllm.models.checkpoint_tensors import select_tensors

logger = logging.getLogger(__name__)
_SCALE = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.(?:attn\.)?([kv])_scale$")
_OUTPUT_SCALE = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.([kv])_proj\.output_scale$")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# Checkpoint tensors the weight loader leaves to this module.
SCALE_SUFFIXES = (".k_scale", ".v_scale", "k_proj.output_scale", "v_proj.output_scale")


class KVScaleError(ValueError):
    """The checkpoint's KV cache scales cannot be used."""

    param = "kv_cache_dtype"


def _layer_scale(name: str) -> tuple[int, str] | None:
    m = _SCALE.search(name) or _OUTPUT_SCALE.search(name)
    return (int(m.group(1)), m.group(2)) if m else None


def read_kv_scales(files: list[Path]) -> dict[tuple[int, str], float]:
    """{(layer, "k" or "v"): scale} of every KV scale in the checkpoint's files; raises
    :class:`KVScaleError` for one that is not a single positive finite number."""
    scales: dict[tuple[int, str], float] = {}
    for name, t in select_tensors(files, lambda n: _layer_scale(n) is not None):
        at = _layer_scale(name)
        assert at is not None
        if t.numel() != 1:
            raise KVScaleError(
                f"kv_cache_dtype: {name} holds {t.numel()} values; only per-tensor "
                "KV cache scales (one value) are supported"
            )
        value = float(t.float().reshape(()))
        if not (math.isfinite(value) and value > 0):
            raise KVScaleError(f"kv_cache_dtype: {name} is {value}, not a positive scale")
        scales[at] = value
    return scales


def apply_kv_scales(model: nn.Module, files: list[Path]) -> int:
    """Set each attention layer's ``k_scale`` / ``v_scale`` from the checkpoint (layers
    found by their ``layers.N.`` module path); returns how many layers got one."""
    scales = read_kv_scales(files)
    if not scales:
        return 0
    done = 0
    for name, module in model.named_modules():
        if not isinstance(module, PagedAttention):
            continue
        m = _LAYER.search(name)
        if m is None:
            raise KVScaleError(
                f"kv_cache_dtype: the checkpoint has KV cache scales, but attention module "
                f"{name!r} has no layer index to match them to"
            )
        layer = int(m.group(1))
        k, v = scales.get((layer, "k")), scales.get((layer, "v"))
        module.k_scale = 1.0 if k is None else k
        module.v_scale = 1.0 if v is None else v
        done += k is not None or v is not None
    logger.info("fp8 KV cache: the checkpoint's k/v scales for %d layers", done)
    return done
