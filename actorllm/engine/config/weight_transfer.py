"""``WeightTransferConfig``: vLLM's ``weight_transfer_config`` (``vllm.config``), the
backend a trainer's weights arrive by. The compat layer turns it (or its JSON,
``--weight-transfer-config '{"backend": "gloo"}'``) into
``EngineConfig.weight_transfer_backend``.

    >>> WeightTransferConfig(backend="gloo").backend
    'gloo'
"""

from __future__ import annotations

from typing import Literal

import msgspec

WEIGHT_TRANSFER_BACKENDS = ("gloo", "nccl")


class WeightTransferConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Which transfer backend ``init_weight_transfer_engine`` joins: ``gloo`` (CPU,
    actorllm's) or ``nccl`` (CUDA). vLLM's ``ipc``, ``sparse_nccl``, ``sharded_rdt``,
    ``nccl_m2n`` and ``modelexpress`` are not built (refused by name)."""

    backend: Literal["gloo", "nccl"] = "nccl"  # vLLM's default; on CPU say "gloo"
