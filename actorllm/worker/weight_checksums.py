"""Per-parameter digests of a model's weights, and zeroing them: how a trainer checks that
a weight update arrived whole (vLLM 0.32's ``compute_weight_checksums`` / ``reset_weights``
worker methods, behind ``POST /weight_checker``).

A digest is the SHA-256 of a parameter's bytes as this runner holds them, so it compares
checksums of one engine over time (before and after an update, or against a baseline it
gave), not across engines: CPU linears here hold their weights prepacked for oneDNN.

    >>> import torch
    >>> m = torch.nn.Linear(2, 1, bias=False)
    >>> d = tensor_digests(m); zero_weights(m); d == tensor_digests(m)
    False
"""

from __future__ import annotations

import hashlib

import torch


def tensor_digests(model: torch.nn.Module) -> dict[str, str]:
    """{parameter name: SHA-256 hex of its bytes}."""
    out = {}
    for name, param in model.named_parameters():
        data = param.detach().cpu().contiguous().view(-1).view(torch.uint8)  # [bytes]
        out[name] = hashlib.sha256(data.numpy().tobytes()).hexdigest()
    return out


def zero_weights(model: torch.nn.Module) -> None:
    """Every parameter set to zero in place (a test of the next update: it must restore
    every digest)."""
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
