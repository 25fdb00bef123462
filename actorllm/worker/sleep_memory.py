"""What a sleeping runner does with device memory (``sleep_tags.py`` has the levels and
tags): at level 1 the weights wait in pinned host memory and come back on wake-up (on a
CPU device they are in host memory already, and stay); at every level what was freed is
handed back to the device.
"""

from __future__ import annotations

import gc

import torch
from torch import nn


def weights_to_host(model: nn.Module, device: torch.device) -> None:
    """Move ``model``'s parameters from ``device`` to pinned host memory (a CPU device:
    nothing to move)."""
    if device.type == "cpu":
        return
    for p in model.parameters():
        p.data = p.data.to("cpu").pin_memory()


def weights_to_device(model: nn.Module, device: torch.device) -> None:
    """The inverse of :func:`weights_to_host`."""
    if device.type == "cpu":
        return
    for p in model.parameters():
        p.data = p.data.to(device)


def free_device_memory(device: torch.device) -> None:
    """Collect the dropped tensors' cycles, then (CUDA) return the caching allocator's free
    blocks to the device, so another process sharing it can use them."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
