"""One namespace of kernels per attention backend, so layers never branch on the device.

``get_ops("torch")`` is the reference path (CPU, tests); ``get_ops("triton")`` the GPU
path (``actorllm.kernels.triton`` exports the same names with the same signatures);
``get_ops("auto", device)`` picks Triton on CUDA and torch elsewhere.

Two entries differ between backends beyond the kernel itself:

* ``attention_hints``: the Triton ``paged_attention`` takes keyword-only host hints
  (``max_query_len=``, ``max_seq_len=``) that steer split-KV without a device sync; the
  torch reference does not take them.
* ``sample_seeded``: the Triton backend samples with ``sample_from_logits_seeded`` (noise
  drawn in the kernel from Philox, keyed on (seed, position)); the torch backend has None
  and the sampler draws torch Exp(1) noise itself. The two random streams differ, so a
  seeded request gives the same tokens on replay *within* a backend, not across backends.

    >>> ops = get_ops("torch")
    >>> ops.name
    'torch'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from actorllm.kernels import (
    attention,
    elementwise,
    moe,
    token_bitmask,
)

Backend = Literal["auto", "torch", "triton"]

_OP_NAMES = (
    "rms_norm",
    "fused_add_rms_norm",
    "apply_rotary",
    "silu_and_mul",
    "write_kv_cache",
    "paged_attention",
    "fused_moe",
)


class BackendUnavailableError(RuntimeError):
    """The requested kernel backend cannot be imported here."""


@dataclass(frozen=True)
class Ops:
    """The kernels a model calls; each has the torch reference's signature and shapes."""

    name: str
    rms_norm: Callable[..., torch.Tensor]
    fused_add_rms_norm: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    apply_rotary: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    silu_and_mul: Callable[..., torch.Tensor]
    write_kv_cache: Callable[..., None]
    paged_attention: Callable[..., torch.Tensor]
    # (x, w13, w2, topk_weights, topk_ids, activation) -> [T, H]: the experts of a MoE MLP.
    fused_moe: Callable[..., torch.Tensor]
    # (positions, q, k, q_weight, k_weight, eps, cos_sin) -> (q, k): Qwen3's per-head q / k
    # RMSNorm then NeoX rotary in one call, what rms_norm twice then apply_rotary return;
    # None: the model makes those three calls.
    qk_norm_rotary: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    # paged_attention takes the keyword-only host hints max_query_len= / max_seq_len=.
    attention_hints: bool = False
    # (logits, temperature, top_k, top_p, min_p, seeds, positions) -> [B] int64 tokens,
    # noise drawn on the device; None: the sampler draws torch noise (reference path).
    sample_seeded: Callable[..., torch.Tensor] | None = None
    # (logits, bitmask, rows, adjust) -> logits: the grammar bitmask (structured outputs)
    # fused with the additive logits adjust, in place.
    apply_token_bitmask: Callable[..., torch.Tensor] = token_bitmask.apply_token_bitmask


TORCH_OPS = Ops(
    name="torch",
    # Native CPU kernels where they take the call (kernels/elementwise.py), else the torch
    # references in layernorm / rotary / activation.
    rms_norm=elementwise.cpu_rms_norm,
    fused_add_rms_norm=elementwise.cpu_fused_add_rms_norm,
    apply_rotary=elementwise.cpu_apply_rotary,
    silu_and_mul=elementwise.cpu_silu_and_mul,
    write_kv_cache=elementwise.cpu_write_kv_cache,
    qk_norm_rotary=elementwise.cpu_qk_norm_rotary,
    paged_attention=attention.paged_attention,
    fused_moe=moe.fused_moe,
)


def resolve_backend(backend: str, device: torch.device | str = "cpu") -> str:
    """ "auto" -> "triton" on CUDA, "torch" elsewhere; other names pass through (validated)."""
    if backend == "auto":
        return "triton" if torch.device(device).type == "cuda" else "torch"
    if backend not in ("torch", "triton"):
        raise ValueError(f"unknown attention_backend {backend!r} (expected auto, torch or triton)")
    return backend


def get_ops(backend: str = "auto", device: torch.device | str = "cpu") -> Ops:
    """The kernel namespace for ``backend``.

    Raises ``ValueError`` for an unknown name and :class:`BackendUnavailableError` when the
    Triton kernels cannot be imported (not written yet, or triton missing).
    """
    name = resolve_backend(backend, device)
    if name == "torch":
        return TORCH_OPS
    try:
        mod: Any = importlib.import_module("actorllm.kernels.triton")
    except ImportError as e:
        raise BackendUnavailableError(f"the triton backend cannot be imported: {e}") from e
    missing = [n for n in _OP_NAMES if not hasattr(mod, n)]
    if missing:
        raise BackendUnavailableError(
            f"actorllm.kernels.triton does not provide {', '.join(missing)} yet; "
            "use attention_backend='torch'"
        )
    return Ops(
        name="triton",
        attention_hints=True,
        sample_seeded=getattr(mod, "sample_from_logits_seeded", None),
        apply_token_bitmask=getattr(mod, "apply_token_bitmask", token_bitmask.apply_token_bitmask),
        **{n: getattr(mod, n) for n in _OP_NAMES},
    )
