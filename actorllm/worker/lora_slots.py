"""The worker's LoRA adapters: a host cache, the step slots, and each step's row segments.

Theory of operation
-------------------
* **Host cache** (``max_cpu_loras``, least recently used evicted): adapters read and checked
  (``models/lora_adapter.py``) and kept in host memory, ready to copy into a slot. An
  evicted adapter is read again from its path when a request names it again (every request
  carries its :class:`LoRARequest`), so eviction is transparent.
* **Step slots** (``max_loras``): the adapters the model's projections hold right now
  (``models/lora_layers.py``). A step may use at most ``max_loras`` distinct adapters (the
  scheduler's rule); one that is not resident takes a free slot, or the least recently
  used slot that this step does not use.
* **Pinned adapters** (vLLM's ``pin_lora``): made resident at once and never evicted,
  from their slot or from the host cache, until removed. The scheduler counts them as
  holding their slots (``core/scheduler/lora_gate.py``), so a step's other adapters
  always find a slot that is neither pinned nor in use.
* **Row segments**: each token row of the step gets its request's slot; rows of base-model
  requests get *no* slot (they are in no segment), so they never see an adapter. The rows
  are sorted by slot once per step (``kernels/lora.py``), for every layer to use.
* **Tensor parallel**: every rank holds its part of the same adapters in the same slots.
  Rank 0 decides; :attr:`LoRASlots.on_fill` tells the group of each slot it fills or
  empties (``worker/tp_group.py``), and ranks 1..N-1 read their part of the adapter
  themselves (:meth:`LoRASlots.fill_slot`). Each step's row slots travel with the step.

Worker thread only; every method blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
import torch

from actorllm.core.lora import LoRARequest
from actorllm.models.base import CausalLM
from actorllm.models.lora_adapter import LoRAWeights, read_adapter
from actorllm.models.lora_layers import LoRAState, attach_lora
from actorllm.worker.lora_settings import LoRASettings

__all__ = ["LoRASettings", "LoRASlots", "TooManyAdaptersError"]


class TooManyAdaptersError(RuntimeError):
    """A step names more adapters than there are slots (a scheduler bug)."""


class LoRASlots:
    """Host cache + step slots of one model. Worker thread only."""

    def __init__(self, settings: LoRASettings, model: CausalLM, dtype: torch.dtype) -> None:
        self.settings = settings
        self.dtype = dtype
        self.max_cpu = max(settings.max_cpu_loras or settings.max_loras, settings.max_loras)
        self.state: LoRAState = attach_lora(model, settings.max_loras, settings.max_lora_rank,
                                            dtype)  # fmt: skip
        self.model = model
        self.known: dict[str, LoRARequest] = {}  # {name: request}, every adapter added
        self.host: OrderedDict[str, LoRAWeights] = OrderedDict()  # LRU: oldest first
        self.slot_names: list[str | None] = [None] * settings.max_loras
        self.slot_order: list[int] = list(range(settings.max_loras))  # LRU: oldest first
        self.num_loads = 0  # adapters read from disk (cumulative)
        self.num_slot_fills = 0  # adapters copied into a slot (cumulative)
        # Tensor parallel, rank 0: called after each change of a slot with (slot, its adapter
        # or None, whether to read it again rather than from the ranks' host caches: rank 0
        # re-read it since, ``load_inplace``), to make the other ranks' slots the same.
        self.on_fill: Callable[[int, LoRARequest | None, bool], None] | None = None
        self._reread: set[str] = set()  # adapters re-read here since the ranks last filled
        self.pinned: set[str] = set()  # resident and never evicted (pin)

    def reattach(self, model: CausalLM) -> None:
        """The model was rebuilt (a reload): new hooks, slots emptied."""
        self.model = model
        self.state = attach_lora(model, self.settings.max_loras, self.settings.max_lora_rank,
                                 self.dtype)  # fmt: skip
        self.slot_names = [None] * self.settings.max_loras
        for name in self.pinned:  # pinned adapters stay resident
            self._resident(self.known[name], [])

    # -- the control plane ------------------------------------------------------------------

    def add(self, request: LoRARequest) -> bool:
        """Read and check ``request``'s adapter into the host cache (raises
        ``LoRAAdapterError``); False if it was already loaded (and not ``load_inplace``)."""
        name = request.lora_name
        old = self.known.get(name)
        same = old is not None and old.lora_path == request.lora_path
        if same and name in self.host and not request.load_inplace:
            self.host.move_to_end(name)
            return False
        weights = self._read(request)
        if old is not None:
            self._reread.add(name)
        self.known[name] = request
        self._keep(name, weights)
        if name in self.slot_names:  # reloaded in place: the resident copy too
            self._fill(self.slot_names.index(name), weights)
        return True

    def pin(self, name: str) -> bool:
        """Keep adapter ``name`` resident until removed (vLLM's ``pin_lora``): a slot now,
        never evicted. ``ValueError`` when it is not loaded, or when every slot already
        holds a pinned adapter."""
        if name not in self.known:
            raise ValueError(f"Pinning failed: LoRA adapter {name!r} is not loaded.")
        if name not in self.pinned:
            if len(self.pinned) >= len(self.slot_names):
                raise ValueError(
                    f"Pinning failed: every one of the max_loras={len(self.slot_names)} "
                    f"slots already holds a pinned adapter ({', '.join(sorted(self.pinned))})."
                )
            self._resident(self.known[name], [])
            self.pinned.add(name)
        return True

    def remove(self, name: str) -> bool:
        """Forget adapter ``name`` (its slot emptied); False if it was not loaded."""
        self.pinned.discard(name)
        found = self.known.pop(name, None) is not None
        self.host.pop(name, None)
        if name in self.slot_names:
            self.fill_slot(self.slot_names.index(name), None)
        return found

    def fill_slot(self, slot: int, request: LoRARequest | None, reread: bool = False) -> None:
        """Put ``request``'s adapter in ``slot`` (None: empty it); ``reread``: from its
        path, not the host cache. Tensor parallel: how ranks 1..N-1 follow rank 0."""
        if request is None:
            self.state.fill(slot, None)
            self.slot_names[slot] = None
            if self.on_fill is not None:
                self.on_fill(slot, None, False)
            return
        name = request.lora_name
        if reread or self.known.get(name, request) != request:
            self.host.pop(name, None)
        self.known[name] = request
        self._fill(slot, self._weights(request))

    def resident(self) -> list[tuple[int, LoRARequest]]:
        """(slot, adapter) of every filled slot."""
        return [(s, self.known[n]) for s, n in enumerate(self.slot_names) if n is not None]

    def names(self) -> list[str]:
        """The adapters added and not removed, oldest first."""
        return list(self.known)

    # -- one step ---------------------------------------------------------------------------

    def prepare(
        self,
        adapters: Sequence[LoRARequest | None],
        num_scheduled: np.ndarray,
        device: torch.device,
    ) -> None:
        """Make the step's adapters resident and set its row segments. ``adapters``: [B] each
        scheduled request's adapter (None: the base model); ``num_scheduled``: [B] its
        rows."""
        wanted = list(dict.fromkeys(a.lora_name for a in adapters if a is not None))
        if not wanted:
            self.state.use(None)
            return
        pinned_aside = len(self.pinned.difference(wanted))  # slots the step cannot take
        if len(wanted) + pinned_aside > len(self.slot_names):
            raise TooManyAdaptersError(
                f"a step uses {len(wanted)} adapters beside {pinned_aside} pinned ones; "
                f"max_loras={len(self.slot_names)}"
            )
        by_name = {a.lora_name: a for a in adapters if a is not None}
        slot_of = {n: self._resident(by_name[n], wanted) for n in wanted}
        req_slots = np.array(
            [-1 if a is None else slot_of[a.lora_name] for a in adapters], dtype=np.int64
        )  # [B]; -1: base model, in no segment
        self.state.use(np.repeat(req_slots, num_scheduled), device)  # [T]

    def _resident(self, request: LoRARequest, step: list[str]) -> int:
        """The slot holding ``request``'s adapter, filled now if it is not resident."""
        name = request.lora_name
        if name in self.slot_names:
            slot = self.slot_names.index(name)
        else:
            slot = next(
                s for s in self.slot_order
                if self.slot_names[s] is None
                or (self.slot_names[s] not in step and self.slot_names[s] not in self.pinned)
            )  # fmt: skip
            self._fill(slot, self._weights(request))
        self.slot_order.remove(slot)
        self.slot_order.append(slot)
        return slot

    def _weights(self, request: LoRARequest) -> LoRAWeights:
        name = request.lora_name
        weights = self.host.get(name)
        if weights is None:  # evicted from the host cache (or never added here): read again
            weights = self._read(self.known.get(name, request))
            self.known.setdefault(name, request)
            self._keep(name, weights)
        self.host.move_to_end(name)
        return weights

    def _read(self, request: LoRARequest) -> LoRAWeights:
        self.num_loads += 1
        return read_adapter(
            request.lora_name, request.lora_path, self.model,
            max_rank=self.settings.max_lora_rank, dtype=self.dtype,
        )  # fmt: skip

    def _keep(self, name: str, weights: LoRAWeights) -> None:
        self.host[name] = weights
        self.host.move_to_end(name)
        excess = len(self.host) - self.max_cpu
        if excess > 0:  # the least recently used ones that are not pinned
            for old in [n for n in self.host if n not in self.pinned][:excess]:
                del self.host[old]

    def _fill(self, slot: int, weights: LoRAWeights) -> None:
        self.state.fill(slot, weights)
        self.slot_names[slot] = weights.name
        self.num_slot_fills += 1
        if self.on_fill is not None:
            name = weights.name
            self.on_fill(slot, self.known[name], name in self._reread)
            self._reread.discard(name)

    def statistics(self) -> dict[str, object]:
        return {
            "lora_slots": list(self.slot_names),
            "lora_host_cache": list(self.host),
            "lora_pinned": sorted(self.pinned),
            "lora_loads": self.num_loads,
            "lora_slot_fills": self.num_slot_fills,
        }
