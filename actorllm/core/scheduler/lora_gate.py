"""Multi-LoRA admission: how many adapters may run at once, and which requests use which.

Plain logic over :class:`Request` (no I/O), used by the scheduler when ``max_loras`` is set.
"""

from __future__ import annotations

from collections.abc import Iterable

from actorllm.core.request import Request


def count_loras(requests: Iterable[Request], into: dict[str, int]) -> None:
    """Add each adapter's number of ``requests`` to ``into`` (by adapter name)."""
    for r in requests:
        if r.lora_request is not None:
            name = r.lora_request.lora_name
            into[name] = into.get(name, 0) + 1


class LoRAGate:
    """vLLM's rule: at most ``max_loras`` distinct adapters among the running requests (so
    in any step). Without starvation: once a waiting request is held back because its
    adapter would be one too many, no adapter request queued behind it starts in this
    step (not even one of a running adapter), so the running adapters drain and the held
    request gets its slot; base-model requests never wait for adapters. ``pinned``
    adapters (vLLM's ``pin_lora``) hold their slots whether they run or not."""

    __slots__ = ("adapters", "held", "max_loras")

    def __init__(
        self, running: list[Request], max_loras: int, pinned: frozenset[str] = frozenset()
    ) -> None:
        self.max_loras = max_loras
        self.adapters = {r.lora_request.lora_name for r in running if r.lora_request is not None}
        self.adapters |= pinned
        self.held = False  # an adapter request was held back in this step

    def admits(self, req: Request) -> bool:
        """Whether ``req`` may start now (then its adapter counts as running)."""
        lora = req.lora_request
        if lora is None:
            return True
        if self.held or (
            lora.lora_name not in self.adapters and len(self.adapters) >= self.max_loras
        ):
            self.held = True
            return False
        self.adapters.add(lora.lora_name)
        return True
