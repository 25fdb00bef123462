"""The broadcast backends, ``gloo`` (CPU) and ``nccl`` (GPU): one code path over
:class:`~actorllm.distributed.weight_transfer.group.TransferGroup`.

Payloads, as vLLM's dense NCCL backend spells them:

* ``init_weight_transfer_engine``'s ``init_info`` (:class:`BroadcastInitInfo`):
  ``master_address``, ``master_port`` (the trainer hosts the store), ``rank_offset`` (1:
  the trainer is rank 0), ``world_size`` (the trainer + every engine worker), and ours,
  ``timeout_s`` (how long a broadcast may stall before the update fails).
* ``update_weights``' ``update_info`` (:class:`BroadcastUpdateInfo`): ``names``,
  ``dtype_names`` (``"bfloat16"``), ``shapes``; the tensors follow by broadcast from rank 0,
  one per name, in that order, each whole (unsharded, Hugging Face names).

The trainer side (:class:`GlooTrainerWeightTransferEngine`) drives the engine through a
:class:`~actorllm.distributed.weight_transfer.base.VLLMWeightSyncClient`::

    engine = GlooTrainerWeightTransferEngine.trainer_init(
        GlooTrainerInitInfo(master_address="127.0.0.1", master_port=29600, world_size=2),
        client=LLMWeightSyncClient(llm), source=ModuleSource(model))
    engine.send_weights(weight_version="step-1")   # once per training step
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from actorllm.distributed.weight_transfer.base import (
    ParamMeta,
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
    dtype_name,
)
from actorllm.distributed.weight_transfer.group import DEFAULT_TIMEOUT_S, TransferGroup

if TYPE_CHECKING:
    from typing import Self


@dataclass(kw_only=True)
class BroadcastInitInfo:
    """The engine side's ``init_info`` (vLLM's ``NCCLWeightTransferInitInfo`` fields)."""

    master_address: str
    master_port: int
    rank_offset: int = 1
    world_size: int
    timeout_s: float = DEFAULT_TIMEOUT_S
    packed: bool = False  # vLLM's packed broadcast: not built here (refused when True)

    def __post_init__(self) -> None:
        if self.packed:
            raise ValueError(
                "init_info.packed=True: packed broadcast is not built; send unpacked "
                "(one broadcast per tensor)"
            )
        if self.world_size < 2 or self.rank_offset < 1:
            raise ValueError(
                f"init_info: world_size {self.world_size} and rank_offset {self.rank_offset} "
                "leave no rank for the trainer (it is rank 0; workers start at rank_offset)"
            )
        if self.timeout_s <= 0:
            raise ValueError(f"init_info.timeout_s must be positive, got {self.timeout_s}")


@dataclass
class BroadcastUpdateInfo:
    """One ``update_weights`` call's metadata; the tensors follow by broadcast."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]

    def __post_init__(self) -> None:
        n = len(self.names)
        if len(self.dtype_names) != n:
            raise ValueError(
                f"`dtype_names` should be of the same size as `names`: got "
                f"{len(self.dtype_names)} and {n}"
            )
        if len(self.shapes) != n:
            raise ValueError(
                f"`shapes` should be of the same size as `names`: got {len(self.shapes)} and {n}"
            )

    def metas(self) -> list[ParamMeta]:
        """Each tensor's name, dtype and shape; ``ValueError`` naming an unknown dtype."""
        return [
            ParamMeta(name, parse_dtype(name, d), tuple(int(x) for x in shape))
            for name, d, shape in zip(self.names, self.dtype_names, self.shapes, strict=True)
        ]

    @classmethod
    def of(cls, metas: list[ParamMeta]) -> BroadcastUpdateInfo:
        return cls(
            names=[m.name for m in metas],
            dtype_names=[dtype_name(m.dtype) for m in metas],
            shapes=[list(m.shape) for m in metas],
        )


def parse_dtype(name: str, spelled: str) -> torch.dtype:
    dtype = getattr(torch, str(spelled).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{name}: unknown dtype {spelled!r} in update_info.dtype_names")
    return dtype


def parse_info(cls: type[Any], info: dict[str, Any], what: str) -> Any:
    """``cls(**info)``, a ``ValueError`` naming the payload when it does not fit."""
    if not isinstance(info, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(info).__name__}")
    try:
        return cls(**info)
    except TypeError as e:
        raise ValueError(f"Invalid {what} for the broadcast weight transfer: {e}") from e


def broadcast_tensors(
    group: TransferGroup, source: WeightSource, metas: list[ParamMeta]
) -> Iterator[str]:
    """Rank 0: broadcast each of ``source``'s tensors, checked against ``metas`` (what the
    workers were told to expect: a disagreement would desynchronize the stream); yields
    each name once sent."""
    sent = 0
    for name, tensor in source:
        if sent >= len(metas):
            raise ValueError(f"the source yielded more tensors than declared; first extra {name!r}")
        want = metas[sent]
        if name != want.name or tensor.dtype != want.dtype or tuple(tensor.shape) != want.shape:
            raise ValueError(
                f"the source disagrees with its metadata at index {sent}: declared "
                f"{want.name!r} {want.dtype} {want.shape}, got {name!r} {tensor.dtype} "
                f"{tuple(tensor.shape)}"
            )
        group.broadcast(tensor.to(group.device).contiguous())
        sent += 1
        yield name
    if sent != len(metas):
        raise ValueError(f"the source yielded {sent} tensors but declared {len(metas)}")


@dataclass
class GlooTrainerInitInfo(TrainerInitInfo):
    """The trainer's rendezvous: it hosts the store at ``master_address:master_port``;
    ``world_size`` is 1 + the engine's worker count (``LLM.get_world_size()``)."""

    backend: ClassVar[str] = "gloo"

    master_address: str
    master_port: int
    world_size: int
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass
class NCCLTrainerInitInfo(GlooTrainerInitInfo):
    backend: ClassVar[str] = "nccl"


class GlooTrainerWeightTransferEngine(TrainerWeightTransferEngine):
    """The trainer side of the broadcast backends (rank 0 of the transfer group)."""

    def __init__(
        self, *, client: VLLMWeightSyncClient, source: WeightSource | None, group: TransferGroup
    ) -> None:
        super().__init__(client=client, source=source)
        self.group: TransferGroup | None = group

    @classmethod
    def trainer_init(
        cls,
        init_info: Any,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
    ) -> Self:
        """Host the group and have the engine join it (its workers block in
        ``init_weight_transfer_engine`` until every rank is in: run concurrently)."""
        if not isinstance(init_info, GlooTrainerInitInfo):
            raise TypeError(f"expected GlooTrainerInitInfo, got {type(init_info).__name__}")
        if not init_info.is_sender:
            raise ValueError("the broadcast backends take one trainer rank (rank 0)")
        worker_info = BroadcastInitInfo(
            master_address=init_info.master_address,
            master_port=init_info.master_port,
            rank_offset=1,
            world_size=init_info.world_size,
            timeout_s=init_info.timeout_s,
        )
        with ThreadPoolExecutor(max_workers=1) as pool:
            call = pool.submit(client.init_weight_transfer_engine, asdict(worker_info))
            try:
                group = TransferGroup.open(
                    init_info.backend,
                    init_info.master_address,
                    init_info.master_port,
                    rank=0,
                    world_size=init_info.world_size,
                    timeout_s=init_info.timeout_s,
                )
            except BaseException:
                if call.done():
                    call.result()  # the engine's refusal says more than the timeout
                raise
            call.result()
        return cls(client=client, source=source, group=group)

    def send_weights(self, weight_version: str | None = None) -> None:
        """One full update: ``start_weight_update``, ``update_weights`` (concurrently with
        the broadcast of every tensor), ``finish_weight_update(weight_version)``. The engine
        applies the weights atomically at a step boundary; on any failure it keeps the old
        ones and this raises."""
        group, source = self.group, self.source
        if group is None or source is None:
            raise RuntimeError("send_weights needs trainer_init(..., source=...) first")
        metas = source.metadata()
        info = asdict(BroadcastUpdateInfo.of(metas))
        self.client.start_weight_update()
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            call = pool.submit(self.client.update_weights, info)
            for _ in broadcast_tensors(group, source, metas):
                if call.done():  # the engine refused before receiving everything
                    call.result()
            call.result()
        finally:
            pool.shutdown(wait=False)  # a failed broadcast must not hang on the call
        self.client.finish_weight_update(weight_version)

    def shutdown(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None
