"""The memory-bandwidth bound of a decode step: bytes the step must read over the device's
bandwidth. A decode step reads every weight once and every running request's KV cache, so
no kernel can beat ``(weight bytes + KV bytes) / bandwidth``; the ratio of measured to bound
says how far the step is from the hardware's roofline.

    >>> bound_ms(weight_bytes=10**9, kv_bytes=0, bandwidth_gbps=1000.0)
    1.0
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Peak HBM bandwidth in GB/s (10**9 bytes/s), by a substring of torch.cuda.get_device_name().
KNOWN_GPUS: list[tuple[str, float]] = [
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),  # SXM
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB", 2039.0),
    ("A100", 1555.0),  # 40GB
    ("L40S", 864.0),
    ("A10G", 600.0),
    ("L4", 300.0),
]

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


def device_bandwidth_gbps(device_name: str | None, override: float | None = None) -> float | None:
    """GB/s for the device (``override`` wins); None on CPU or for an unknown GPU."""
    if override is not None:
        return override
    if not device_name:
        return None
    for key, gbps in KNOWN_GPUS:
        if key.lower() in device_name.lower():
            return gbps
    return None


def dtype_bytes(dtype: str, config: dict[str, Any]) -> int:
    if dtype == "auto":
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "float32")
    return _DTYPE_BYTES.get(dtype.removeprefix("torch."), 4)


def model_bytes(model_dir: str | Path, dtype: str = "auto") -> tuple[int, int]:
    """(weight bytes, KV bytes per token) of a Llama-shaped model, from its config.json."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    h, n_layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    hq = cfg["num_attention_heads"]
    hk = cfg.get("num_key_value_heads") or hq
    d = cfg.get("head_dim") or h // hq
    inter = cfg["intermediate_size"]
    per_layer = h * hq * d + 2 * h * hk * d + hq * d * h + 3 * h * inter + 2 * h
    params = vocab * h + n_layers * per_layer + h
    if not cfg.get("tie_word_embeddings", False):
        params += vocab * h
    nbytes = dtype_bytes(dtype, cfg)
    return params * nbytes, 2 * n_layers * hk * d * nbytes


def bound_ms(weight_bytes: int, kv_bytes: int, bandwidth_gbps: float) -> float:
    """Milliseconds to read ``weight_bytes + kv_bytes`` at ``bandwidth_gbps``."""
    return (weight_bytes + kv_bytes) / (bandwidth_gbps * 1e9) * 1e3
