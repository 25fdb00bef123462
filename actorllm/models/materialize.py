"""Give a model built on the ``meta`` device real, uninitialised storage on ``device``.

What ``nn.Module.to_empty`` does, without its cost in a fresh process: ``to_empty`` calls
``torch.empty_like`` on meta tensors, which runs torch's Python reference of it and
imports ``torch.fx.experimental.symbolic_shapes`` (and sympy) on first use, about a second
in every rank, Ray worker or server process that loads a model. Here each parameter and
buffer is replaced by ``torch.empty_strided`` of its size, stride and dtype. As with
``to_empty``, a tensor shared by several modules (tied weights) gets one per module: the
model's ``tie_weights`` decides what is tied again.
"""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)


def materialize(model: M, device: torch.device | str) -> M:
    """``model`` with every meta parameter and buffer allocated (uninitialised) on
    ``device``; tensors already off the meta device are moved there (as ``to_empty``
    would, without their values: callers load or initialise every weight next)."""

    def empty(t: torch.Tensor) -> torch.Tensor:
        new = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=device)
        if isinstance(t, nn.Parameter):
            return nn.Parameter(new, requires_grad=t.requires_grad)
        return new

    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                module._parameters[name] = empty(param)  # type: ignore[assignment]
        for name, buf in module._buffers.items():
            if buf is not None:
                module._buffers[name] = empty(buf)
    return model
