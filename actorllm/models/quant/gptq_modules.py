"""Which linears a GPTQ checkpoint quantized, read from its tensors' dtypes when its config
does not list them (``modules_in_block_to_quantize``), as vLLM 0.32's GPTQ configs do
(``maybe_update_config``): a module with a tensor stored as anything but a float
(``qweight``, ``qzeros``, ``g_idx``: int32) is quantized; one whose weight is float16,
bfloat16 or float32 is not. GPTQModel and AutoRound write such checkpoints (attention or
the first layers left in float) with no list in the config.

Only the safetensors headers are read (8 bytes of length, then JSON), never the data.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

FLOATS = frozenset({"F16", "BF16", "F32", "F64"})


def _header(shard: Path) -> dict[str, dict[str, object]]:
    with shard.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header: dict[str, dict[str, object]] = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return header


def quantized_modules(path: str | Path) -> list[str]:
    """The modules (``model.layers.0.mlp.down_proj``, ...) with a non-float tensor in the
    checkpoint at ``path``, sorted; empty where it has no safetensors files (the loader
    names what is missing when it loads)."""
    from actorllm.models.loader import MissingCheckpointError, safetensors_files

    try:
        shards = safetensors_files(path)
    except MissingCheckpointError:
        return []
    modules = {
        name.rsplit(".", 1)[0]
        for shard in shards
        for name, info in _header(shard).items()
        if "." in name and str(info.get("dtype")) not in FLOATS
    }
    return sorted(modules)


def with_quantized_modules(qc: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """A ``quantization_config``, with a GPTQ one's ``modules_in_block_to_quantize`` read
    from the checkpoint at ``path`` where the config gives none (else as it is)."""
    if qc.get("quant_method") != "gptq" or qc.get("modules_in_block_to_quantize"):
        return qc
    found = quantized_modules(path)
    return qc | {"modules_in_block_to_quantize": found} if found else qc
