"""Recording the experts each token is routed to (--enable-return-routed-experts).

:func:`attach_recorder` hands every :class:`SparseMoeBlock` of a model one
:class:`RoutingRecorder`; a block with one records its top-k ids per forward (one
attribute check per MoE layer when capture is off). The step launcher clears the recorder
before the forward and takes ``[T, layers, top_k]`` after it.
"""

from __future__ import annotations

import torch
from torch import nn

from actorllm.core.routed_experts import routed_dtype
from actorllm.models.config import CheckpointConfig
from actorllm.models.moe import SparseMoeBlock


class RoutingRecorder:
    def __init__(self, num_layers: int, top_k: int, num_experts: int) -> None:
        self.num_layers = num_layers
        self.top_k = top_k
        self.dtype_name = routed_dtype(num_experts)
        # uint8 on the device for up to 256 experts; int32 otherwise (torch has no
        # general uint16), cast to uint16 on the host.
        self.torch_dtype = torch.uint8 if self.dtype_name == "uint8" else torch.int32
        self.layers: list[torch.Tensor] = []  # per MoE layer, in forward order: [T, K]

    def clear(self) -> None:
        self.layers.clear()

    def record(self, ids: torch.Tensor) -> None:
        """ids: [T, K] the experts of each token, from the router."""
        self.layers.append(ids.to(self.torch_dtype))

    def take(self, num_tokens: int) -> torch.Tensor | None:
        """The forward's ids [T, layers, K] (its first ``num_tokens`` rows: a padded
        batch has more), on the device; None when no layer ran (a non-model step)."""
        if len(self.layers) != self.num_layers:
            self.layers.clear()
            return None
        out = torch.stack(self.layers, dim=1)[:num_tokens]  # [T, L, K]
        self.layers.clear()
        return out


def attach_recorder(model: nn.Module) -> RoutingRecorder | None:
    """Give every MoE block of ``model`` one recorder; None when it has none (a dense
    model: the flag is refused at start)."""
    blocks = [m for m in model.modules() if isinstance(m, SparseMoeBlock)]
    if not blocks:
        return None
    recorder = RoutingRecorder(len(blocks), blocks[0].top_k, blocks[0].gate.out_features)
    for block in blocks:
        block.recorder = recorder
    return recorder


def check_routed_capture(cfg: CheckpointConfig, num_speculative_tokens: int, pp_size: int) -> None:
    """Refuse, at start, --enable-return-routed-experts where it cannot be honoured."""
    if not cfg.num_experts:
        raise ValueError(  # vLLM: "AuxOutput Connector only supports MoE models."
            "enable_return_routed_experts only supports MoE models; this model has no "
            "routed experts."
        )
    if num_speculative_tokens:
        raise ValueError(
            "enable_return_routed_experts is not built with speculative decoding (the "
            "rejected drafts' routing would have to be dropped); start without one of them."
        )
    if pp_size > 1:
        raise ValueError(
            "enable_return_routed_experts is not built with pipeline parallel (each stage "
            "sees only its own layers); start with pipeline_parallel_size=1."
        )
