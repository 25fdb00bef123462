"""A LoRA adapter as a request names it: vLLM's ``LoRARequest`` (``vllm.lora.request``).

The engine identifies an adapter by ``lora_name`` (two requests with the same name use the
same adapter, as in vLLM); ``lora_int_id`` is kept for vLLM compatibility and metrics,
``lora_path`` is the local directory holding ``adapter_config.json`` and
``adapter_model.safetensors`` or ``adapter_model.bin`` (PEFT's format). The core only
carries the request: loading and applying the weights is the worker's job
(``worker/lora_slots.py``).

    >>> r = LoRARequest("sql", 1, "/adapters/sql")
    >>> r.name, r.adapter_id, r == LoRARequest("sql", 7, "/elsewhere")
    ('sql', 1, True)
"""

from __future__ import annotations

from typing import Any

import msgspec


class LoRARequest(msgspec.Struct, omit_defaults=True, array_like=True):
    """Request for a LoRA adapter (vLLM's fields and rules: ``lora_int_id`` > 0, a path)."""

    # vLLM's fields in vLLM's order, so positional arguments land where they do there.
    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: str | None = None
    # vLLM: where tensorizer-serialized adapter weights are; not built (refused below).
    tensorizer_config_dict: dict[str, Any] | None = None
    # vLLM: reload the adapter even when one of this name is already loaded.
    load_inplace: bool = False
    # vLLM: the layout of an adapter's MoE expert weights; expert adapters are refused at
    # load here, so only the default (False) is accepted.
    is_3d_lora_weight: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.lora_name, str) or not self.lora_name:
            raise ValueError("LoRARequest: lora_name must be a non-empty string")
        if self.lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {self.lora_int_id}")
        if not self.lora_path:
            raise ValueError(f"LoRARequest {self.lora_name!r}: lora_path cannot be empty")
        if self.tensorizer_config_dict is not None:
            raise ValueError(
                f"LoRARequest {self.lora_name!r}: tensorizer_config_dict is not supported "
                "(adapters are read from PEFT adapter directories)"
            )
        if self.is_3d_lora_weight is not False:
            raise ValueError(
                f"LoRARequest {self.lora_name!r}: is_3d_lora_weight={self.is_3d_lora_weight!r}"
                " is not supported (MoE expert adapters are not built; only False)"
            )

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id

    @property
    def name(self) -> str:
        return self.lora_name

    @property
    def path(self) -> str:
        return self.lora_path

    def __eq__(self, other: object) -> bool:
        """Adapters are identified by name (vLLM's rule)."""
        return isinstance(other, LoRARequest) and self.lora_name == other.lora_name

    def __hash__(self) -> int:
        return hash(self.lora_name)
