"""``LoRARecord``: the LoRA adapters one engine serves and the ones pinned, kept beside the
actors so that no restart loses them.

The record is the one owner of that state. ``AsyncEngine``'s ``LoRAAdapters``
(``engine/api/lora_api.py``) writes it, on the event loop, once a call has reached every
worker; the scheduler's ``Admission`` keeps its own copy of the pinned names (they hold
slots in every step's count, across core rebuilds); the worker's ``LoRASlots`` are a
cache of it. A worker replaced by a restart (the Ray backend's new host: a new ``Worker``
with no adapter) would lose its pins, so every executor incarnation re-pins the record's
pinned adapters on its worker before its first step (``Worker.restore_lora_pins``): a
no-op for a worker that kept them.

    record = LoRARecord()
    record.added["sql"] = LoRARequest("sql", 1, "/adapters/sql")
    record.pinned.add("sql")
    record.pinned_requests()           # [LoRARequest("sql", 1, "/adapters/sql")]
"""

from __future__ import annotations

from typing import final

from actorllm.core.lora import LoRARequest


@final
class LoRARecord:
    """The adapters added and pinned (event loop only)."""

    def __init__(self) -> None:
        self.added: dict[str, LoRARequest] = {}  # {lora_name: request}, in adding order
        self.pinned: set[str] = set()  # pin_lora's, until removed

    def pinned_requests(self) -> list[LoRARequest]:
        """The pinned adapters, by name: what a restarted worker must pin again. (One being
        removed leaves ``added`` first: it is not pinned again.)"""
        return [self.added[name] for name in sorted(self.pinned) if name in self.added]

    def statistics(self) -> dict[str, list[str]]:
        return {"added": list(self.added), "pinned": sorted(self.pinned)}
