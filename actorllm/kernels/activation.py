"""Gated activations, torch reference, and the plain ones of MLPs without a gate."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for the fused gate-up projection's output.

    x: [T, 2 * I] laid out as [gate | up] -> [T, I].
    """
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]).mul_(x[..., d:])  # in place on silu's fresh output


# Un-gated activations by HF ``hidden_act`` name (transformers' ACT2FN meanings).
_PLAIN: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu2": lambda x: F.relu(x).square_(),  # Arcee: ReLU^2, squared in place
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),  # the same tanh form
}


def plain_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """``[.., I] -> [.., I]`` for an MLP without a gate; raises ``ValueError`` for a
    ``hidden_act`` the engine does not implement."""
    try:
        return _PLAIN[name]
    except KeyError:
        raise ValueError(
            f"unsupported hidden_act {name!r} for an un-gated MLP (supported: {', '.join(_PLAIN)})"
        ) from None
