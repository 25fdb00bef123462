"""The runner's LoRA side: its adapter slots and the adapter each request runs with.

The slots (``worker/lora_slots.py``: host cache + step slots) are built with the model,
after CPU prepacking has replaced its linears, and hooked again into a reloaded model.
A request names its adapter once, when it is first scheduled; the runner keeps it until the
request finishes or is preempted, and every step hands the slots its rows' adapters.

Worker thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import numpy as np
import torch

from actorllm.core.lora import LoRARequest
from actorllm.models.base import CausalLM
from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import resolve_dtype
from actorllm.worker.lora_settings import LoRASettings
from actorllm.worker.lora_slots import LoRASlots
from actorllm.worker.step_inputs import SchedulerProtocolError


@final
class RequestAdapters:
    """The adapter slots (None until the model is loaded, and without LoRA) and each LoRA
    request's adapter."""

    def __init__(self, settings: LoRASettings | None) -> None:
        self.settings = settings  # None: this runner serves no LoRA
        self.slots: LoRASlots | None = None  # built with the model (attach)
        self.of_request: dict[str, LoRARequest] = {}  # {req_id: its adapter}, LoRA requests

    def attach(self, model: CausalLM, model_dtype: torch.dtype, cfg: CheckpointConfig) -> None:
        """Hook the slots into ``model``: built the first time, emptied after a reload.
        Nothing without LoRA. ``lora_dtype`` "auto" is ``model_dtype``."""
        if self.settings is None:
            return
        ldt = self.settings.lora_dtype
        dtype = model_dtype if ldt == "auto" else resolve_dtype(ldt, cfg)
        if self.slots is None:
            self.slots = LoRASlots(self.settings, model, dtype)
        else:
            self.slots.reattach(model)

    def enabled(self) -> LoRASlots:
        """The slots, for the control plane; ``ValueError`` without LoRA."""
        if self.slots is None:
            raise ValueError("LoRA is not enabled in this engine (start it with enable_lora)")
        return self.slots

    def track(self, req_id: str, request: LoRARequest | None) -> None:
        """A newly scheduled request's adapter (None: the base model); raises
        ``SchedulerProtocolError`` when it names one and there are no slots."""
        if request is None:
            return
        if self.slots is None:
            raise SchedulerProtocolError(
                f"request {req_id} names LoRA adapter "
                f"{request.lora_name!r}, but this runner serves no LoRA"
            )
        self.of_request[req_id] = request

    def forget(self, req_id: str) -> None:
        """A finished or preempted request."""
        self.of_request.pop(req_id, None)

    def clear(self) -> None:
        """Every request forgotten (the worker's batch was dropped)."""
        self.of_request.clear()

    def prepare(
        self, req_ids: Sequence[str], num_scheduled: np.ndarray, device: torch.device
    ) -> None:
        """Each row's adapter slot for one step (base rows: none); nothing without LoRA.
        ``req_ids``: [B] the step's requests; ``num_scheduled``: [B] their rows."""
        if self.slots is not None:
            adapters = [self.of_request.get(r) for r in req_ids]
            self.slots.prepare(adapters, num_scheduled, device)

    def names(self) -> list[str]:
        """The adapters loaded, oldest first (none without LoRA)."""
        return self.slots.names() if self.slots is not None else []

    def statistics(self) -> dict[str, object]:
        return self.slots.statistics() if self.slots is not None else {}
