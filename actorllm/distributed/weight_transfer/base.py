"""What a weight transfer is made of, on both sides, with vLLM 0.32's names
(``vllm/distributed/weight_transfer/base.py``).

Theory of operation
-------------------
A trainer pushes new weights into a running engine in three calls on the engine
(``start_weight_update``, ``update_weights`` one or more times, ``finish_weight_update``)
after one ``init_weight_transfer_engine`` that joins a process group of its own: the
trainer is rank 0, the engine's workers ranks 1..N (``rank_offset`` 1). Each
``update_weights`` carries only metadata (``names``, ``dtype_names``, ``shapes``); the
tensors themselves travel by broadcast from rank 0, in that order, while the engine waits
in ``update_weights``. So the trainer must run its broadcast *concurrently* with the
engine's ``update_weights`` call: :class:`TrainerWeightTransferEngine.send_weights` does
that dance (a thread for the call, the broadcast on the caller's).

* :class:`WeightSource`: the trainer's weights, re-iterable (``metadata()`` then the
  tensors, in the same order); :class:`ModuleSource` over ``named_parameters()``,
  :class:`StateDictSource` over a ``state_dict()``.
* :class:`VLLMWeightSyncClient`: the four control calls, as a structural protocol (an
  HTTP client, an in-process ``LLM``: ``clients.py``).
* :class:`TrainerInitInfo`: the trainer side's rendezvous; ``backend`` picks the engine
  class (``factory.py``).

Nothing here imports the engine: a training script imports this package and torch only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from typing import Self

# An ``update_weights`` payload: one dict, or one per worker rank (vLLM's list form).
WeightTransferUpdatePayload = dict[str, Any] | list[dict[str, Any]]


@dataclass(frozen=True)
class ParamMeta:
    """Name / wire dtype / full (Hugging Face) shape of one tensor to send."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (vLLM's ``dtype_names`` spelling)."""
    return str(dtype).removeprefix("torch.")


class WeightSource(ABC):
    """The trainer's weights, handed to a trainer engine: ``metadata()`` names every tensor
    (without materializing it) and iteration yields ``(name, tensor)`` pairs in the same
    order, a fresh pass each time."""

    @abstractmethod
    def metadata(self) -> list[ParamMeta]: ...

    @abstractmethod
    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]: ...


class ModuleSource(WeightSource):
    """A module's ``named_parameters()`` (Hugging Face names for a transformers model);
    FSDP ``DTensor`` shards are gathered with ``full_tensor()`` as they are sent."""

    def __init__(self, module: torch.nn.Module) -> None:
        self._module = module

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(n, p.dtype, tuple(p.shape)) for n, p in self._module.named_parameters()]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, param in self._module.named_parameters():
            full = getattr(param, "full_tensor", None)
            yield name, (full() if callable(full) else param).detach()


class StateDictSource(WeightSource):
    """A mapping of names to tensors (a ``state_dict()``), sent in its order."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self._tensors = tensors

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self._tensors.items()]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self._tensors.items():
            yield name, tensor.detach()


@dataclass
class WeightTransferInitRequest:
    """``init_weight_transfer_engine``'s request: the backend's init info as a dict."""

    init_info: dict[str, Any] = field(default_factory=dict)


@dataclass
class WeightTransferUpdateRequest:
    """``update_weights``' request: the backend's update info as a dict (or one per rank)."""

    update_info: WeightTransferUpdatePayload = field(default_factory=dict)


@runtime_checkable
class VLLMWeightSyncClient(Protocol):
    """The engine's weight-sync control plane as the trainer drives it (blocking calls
    with plain dicts): over HTTP (``clients.HTTPVLLMWeightSyncClient``) or in process
    (``clients.LLMWeightSyncClient``)."""

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None: ...

    def start_weight_update(self) -> None: ...

    def update_weights(self, update_info: WeightTransferUpdatePayload) -> None: ...

    def finish_weight_update(self, weight_version: str | None = None) -> None: ...


@dataclass
class TrainerInitInfo:
    """The trainer side's init info; ``rank`` is this trainer process's rank (0 sends).
    Each backend's subclass sets the class-level ``backend`` the factory dispatches on."""

    backend: ClassVar[str]

    rank: int = field(default=0, kw_only=True)

    @property
    def is_sender(self) -> bool:
        return self.rank == 0


class TrainerWeightTransferEngine(ABC):
    """The trainer side of a backend: made (and joined to the engine) by ``trainer_init``,
    then ``send_weights`` once per training step."""

    def __init__(self, *, client: VLLMWeightSyncClient, source: WeightSource | None) -> None:
        self.client = client
        self.source = source

    @classmethod
    @abstractmethod
    def trainer_init(
        cls,
        init_info: Any,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
    ) -> Self: ...

    @abstractmethod
    def send_weights(self, weight_version: str | None = None) -> None: ...

    @abstractmethod
    def shutdown(self) -> None:
        """Drop the transfer group (the engine keeps serving; it may be joined again)."""
