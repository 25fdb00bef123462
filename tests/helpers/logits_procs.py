"""Custom logits processors for the tests, loadable by name
(``tests.helpers.logits_procs:BanToken``), as a user's would be."""

from __future__ import annotations

from typing import Any

import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.v1.sample.logits_processor import (
    AdapterLogitsProcessor,
    BatchUpdate,
    LogitsProcessor,
    process_dict_updates,
)


class BanToken(LogitsProcessor):
    """Bans the token ``extra_args["ban"]`` for the requests that name one."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.banned: dict[int, int] = {}  # {batch index: token}
        self.updates = 0

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        ban = (sampling_params.extra_args or {}).get("ban")
        if ban is not None and (not isinstance(ban, int) or ban < 0):
            raise ValueError(f"ban must be a token id, got {ban!r}")

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        self.updates += 1

        def new(params: SamplingParams, _prompt: Any, _out: list[int]) -> int | None:
            return (params.extra_args or {}).get("ban")

        process_dict_updates(self.banned, batch_update, new)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for index, token in self.banned.items():
            logits[index, token] = float("-inf")
        return logits


class ForceAt(AdapterLogitsProcessor):
    """Per request (``extra_args["force"] = [position, token]``): the output token at that
    position is forced; it reads the live output ids to know the position."""

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: SamplingParams) -> Any:
        force = (params.extra_args or {}).get("force")
        if force is None:
            return None
        position, token = force

        def fn(output_ids: list[int], row: torch.Tensor) -> torch.Tensor:
            if len(output_ids) == position:
                row = torch.full_like(row, float("-inf"))
                row[token] = 0.0
            return row

        return fn
