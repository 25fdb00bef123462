"""``EngineConfig``'s LoRA fields as a rank needs them (light: no torch, for ``RankSpec``)."""

from __future__ import annotations

import msgspec


class LoRASettings(msgspec.Struct, frozen=True, kw_only=True):
    max_loras: int = 1  # step slots: the most distinct adapters in one step
    max_lora_rank: int = 16
    max_cpu_loras: int | None = None  # adapters in the host cache; None: max_loras
    lora_dtype: str = "auto"  # "auto": the model's dtype
