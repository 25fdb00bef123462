"""Which linears a GPTQ checkpoint quantized, read from its tensors' dtypes when its config
does not list them (``modules_in_block_to_quantize``), as vLLM 0.32's GPTQ configs do
(``maybe_update_config``): a module with a tensor stored as anything but a float
(``qweight``, ``qzeros``, ``g_idx``: int32) is quantized; one whose weight is float16,
bfloat16 or float32 is not. GPTQModel and AutoRound write such checkpoints (attention or
the first layers left in float) with no list in the config.

Only safetensors headers are read (8 bytes of length, then JSON), never the data; a
PyTorch ``.bin`` / ``.pt`` checkpoint has no header, so its files are loaded (memory-mapped
where they can be, models/pt_weights.py) to read their tensors' dtypes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from actorllm.models.checkpoint_files import is_pickle, weight_files
from actorllm.models.load_errors import MissingCheckpointError

FLOATS = frozenset({"F16", "BF16", "F32", "F64"})


def _header(shard: Path) -> dict[str, dict[str, object]]:
    with shard.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header: dict[str, dict[str, object]] = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return header


def _is_float(shard: Path) -> dict[str, bool]:
    """{tensor name: whether it is stored as a float} of one weight file."""
    if is_pickle(shard):
        from actorllm.models.pt_weights import load_pt

        return {name: t.is_floating_point() for name, t in load_pt(shard).items()}
    return {name: str(info.get("dtype")) in FLOATS for name, info in _header(shard).items()}


def quantized_modules(path: str | Path) -> list[str]:
    """The modules (``model.layers.0.mlp.down_proj``, ...) with a non-float tensor in the
    checkpoint at ``path``, sorted; empty where it has no weight files (the loader names
    what is missing when it loads)."""
    try:
        shards = weight_files(path)
    except MissingCheckpointError:
        return []
    modules = {
        name.rsplit(".", 1)[0]
        for shard in shards
        for name, is_float in _is_float(shard).items()
        if "." in name and not is_float
    }
    return sorted(modules)


def with_quantized_modules(qc: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """A ``quantization_config``, with a GPTQ one's ``modules_in_block_to_quantize`` read
    from the checkpoint at ``path`` where the config gives none (else as it is)."""
    if qc.get("quant_method") != "gptq" or qc.get("modules_in_block_to_quantize"):
        return qc
    found = quantized_modules(path)
    return qc | {"modules_in_block_to_quantize": found} if found else qc
