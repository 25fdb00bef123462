"""``add_lora``, ``remove_lora``, ``list_loras``: the LoRA side of ``AsyncEngine``.

The engine keeps the adapters added (by name, vLLM's identity) and loads each on every
replica's worker through the control plane (``Worker.add_lora``, between steps), so a bad
adapter is refused *before* any request runs with it: a
:class:`~actorllm.core.errors.InvalidRequestError` (HTTP 400) naming the adapter and the
reason, and the engine keeps serving. A request naming an adapter not added yet adds it
first (``generate(..., lora_request=...)``, as vLLM's ``LLM.generate``). A worker whose
host cache evicted an adapter, or a restarted one, reads it again from the path every
request carries. What was added and pinned is kept in the engine's
:class:`~actorllm.engine.recovery.lora_record.LoRARecord`, beside the actors: a worker
replaced by a restart gets its pins back before its first step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import anyio

from actorllm.core.errors import InvalidRequestError
from actorllm.core.lora import LoRARequest

if TYPE_CHECKING:
    from actorllm.engine.api.control_plane import ControlPlane
    from actorllm.engine.config.engine_config import EngineConfig
    from actorllm.engine.recovery.lora_record import LoRARecord


@final
class LoRAAdapters:
    """The adapters one engine serves (event loop only)."""

    def __init__(self, config: EngineConfig, control: ControlPlane, record: LoRARecord) -> None:
        self._config = config
        self._control = control
        self._added = record.added  # {lora_name: request}, in adding order
        self._pinned = record.pinned  # pin_lora's, until removed
        self._lock = anyio.Lock()  # one load at a time: concurrent first uses load once

    def check(self, request: object) -> LoRARequest:
        """``request`` as a LoRARequest of a LoRA engine, or the error that says why not."""
        if not isinstance(request, LoRARequest):
            raise InvalidRequestError(
                f"lora_request must be a LoRARequest, got {type(request).__name__}.",
                param="lora_request",
            )
        if not self._config.enable_lora:
            raise InvalidRequestError(
                f"LoRA adapter {request.lora_name!r} requested, but LoRA is not enabled in "
                "this engine (start it with enable_lora=True / --enable-lora).",
                param="lora_request",
            )
        return request

    async def ensure(self, request: object) -> LoRARequest:
        """The adapter a request names, added first if it is new (raises like
        :meth:`add_lora`). An adapter of a known name is the one added under it."""
        req = self.check(request)
        known = self._added.get(req.lora_name)
        if known is not None and not req.load_inplace:
            return known
        await self.add_lora(req)
        return self._added[req.lora_name]

    async def add_lora(self, request: LoRARequest) -> bool:
        """Load ``request``'s adapter on every worker; False if one of that name was loaded
        (unless ``load_inplace``). A bad adapter raises ``InvalidRequestError`` naming it."""
        req = self.check(request)
        async with self._lock:
            known = self._added.get(req.lora_name)
            if known is not None and not req.load_inplace and known.lora_path == req.lora_path:
                return False
            try:
                await self._control.collective_rpc("add_lora", args=(req,))
            except ValueError as exc:  # LoRAAdapterError: names the adapter and the reason
                raise InvalidRequestError(str(exc), param="lora_request") from None
            self._added[req.lora_name] = req
            return True

    async def remove_lora(self, name: str) -> bool:
        """Forget adapter ``name`` on every worker (unpinned); False if it was not added."""
        async with self._lock:
            if self._added.pop(name, None) is None:
                return False
            await self._control.collective_rpc("remove_lora", args=(name,))
            if name in self._pinned:
                self._pinned.discard(name)
                await self._control.pin_loras(frozenset(self._pinned))
            return True

    async def pin_lora(self, name: str) -> bool:
        """vLLM's ``pin_lora``: keep adapter ``name`` resident on every worker, never
        evicted, until it is removed; it holds one of the ``max_loras`` slots in every
        step (the other adapters share the rest). ``InvalidRequestError`` when it was not
        added, or when every slot already holds a pinned adapter. True once pinned."""
        async with self._lock:
            if name not in self._added:
                raise InvalidRequestError(
                    f"Pinning failed: LoRA adapter {name!r} is not loaded.", param="lora_id"
                )
            if name in self._pinned:
                return True
            if len(self._pinned) >= self._config.max_loras:
                raise InvalidRequestError(
                    f"Pinning failed: every one of the max_loras={self._config.max_loras} "
                    f"slots already holds a pinned adapter ({', '.join(sorted(self._pinned))}).",
                    param="lora_id",
                )
            # The schedulers first: no step launched from here on counts on the slot the
            # workers are about to keep (steps already sent run before the pin, in order).
            await self._control.pin_loras(frozenset(self._pinned | {name}))
            try:
                await self._control.collective_rpc("pin_lora", args=(name,))
            except ValueError as exc:
                await self._control.pin_loras(frozenset(self._pinned))
                raise InvalidRequestError(str(exc), param="lora_id") from None
            self._pinned.add(name)
            return True

    def pinned_loras(self) -> list[str]:
        """The adapters pinned (``pin_lora``) and not removed."""
        return sorted(self._pinned)

    def list_loras(self) -> list[LoRARequest]:
        """The adapters added and not removed, in adding order."""
        return list(self._added.values())
