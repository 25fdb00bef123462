"""One rank's side of a weight transfer from a trainer: the transfer group, the update in
progress, and the tensors staged for it (vLLM's worker-side ``WeightTransferEngine``).

Theory of operation
-------------------
An update is atomic. ``start_weight_update`` opens it; each ``update_weights`` receives
its tensors by broadcast from the trainer (rank 0 of the transfer group) on a thread of
its own, so the worker thread keeps running steps meanwhile; every tensor is checked
against the model (name, shape, dtype kind), cut to this rank's tensor-parallel piece as
it arrives and kept aside in a staging buffer per parameter (``models/weight_staging.py``;
with one rank a tensor is received straight into its buffer); nothing touches the model
yet. ``finish_weight_update`` applies the staged parameters (on CPU a whole one replaces
the parameter's storage, no copy), on the worker thread, between two steps: every step
runs either wholly on the old weights or wholly on the new.

Failures keep the old weights serving: a tensor that does not fit fails the update with an
error naming it (the rest of the broadcast is still received and dropped, so the trainer
is not left hanging and the group stays usable); a broadcast that fails (the trainer died,
or stalled past ``timeout_s``) fails the update and drops the group (join a new one with
``init_weight_transfer_engine``). Either way the staged tensors are dropped and the update
is closed.

States::

    no group --init--> idle --start--> open --update_weights (receive, stage)--> open
                        ^                |  \\--finish: apply staged, close--> idle
                        |                \\--a failure: drop staged, close--> idle (or no group)
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import torch

from actorllm.distributed.weight_transfer.broadcast import (
    BroadcastInitInfo,
    BroadcastUpdateInfo,
    parse_info,
)
from actorllm.distributed.weight_transfer.group import TransferGroup
from actorllm.models.loader import WeightLoadError
from actorllm.models.weight_staging import StagingArea

if TYPE_CHECKING:
    from actorllm.models.base import CausalLM

log = logging.getLogger(__name__)


class WeightTransferError(RuntimeError):
    """A weight update failed; the engine keeps serving the weights it had."""


class WeightBroadcastError(WeightTransferError):
    """The broadcast itself failed (the trainer died or stalled): the group is dropped."""


class Receipt:
    """One ``update_weights`` call's receiving thread; ``wait`` blocks until it ended."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.received = 0  # tensors received so far

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)


class WeightReceiver:
    """A rank's transfer state (worker thread, and the receiving thread while one runs)."""

    def __init__(self, backend: str, rank_base: int) -> None:
        self.backend = backend  # "gloo" | "nccl" (EngineConfig.weight_transfer_config)
        self.rank_base = rank_base  # this replica's first worker rank among all workers
        self.group: TransferGroup | None = None
        self.open = False  # between start_weight_update and its finish (or a failure)
        self.area: StagingArea | None = None  # checked, this rank's pieces, not applied yet
        self._scratch = torch.empty(0, dtype=torch.uint8)  # receives what cannot land in place
        # Storage the last commit replaced, reused as the next update's staging buffers
        # (CPU): one more copy of the updated parameters is held between updates.
        self._spares: dict[str, torch.Tensor] = {}
        self.receipt: Receipt | None = None  # the update_weights call receiving now
        self._thread: threading.Thread | None = None

    # -- the group ---------------------------------------------------------------------------

    def init(self, init_info: dict[str, Any], worker_rank: int) -> None:
        """Join the trainer's group as rank ``rank_offset + rank_base + worker_rank``
        (blocks until every rank joined). A group joined before is dropped first."""
        if self.open:
            raise RuntimeError("Cannot re-initialise the weight transfer during a weight update")
        info: BroadcastInitInfo = parse_info(BroadcastInitInfo, init_info, "init_info")
        self.close()
        rank = info.rank_offset + self.rank_base + worker_rank
        self.group = TransferGroup.open(
            self.backend, info.master_address, info.master_port, rank, info.world_size,
            info.timeout_s,
        )  # fmt: skip

    def close(self) -> None:
        self._spares = {}
        if self.group is not None:
            self.group.close()
            self.group = None

    def shutdown(self) -> None:
        if self.open:
            raise RuntimeError("Cannot release a trainer connection during a weight update")
        self.close()

    # -- an update ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.group is None:
            raise RuntimeError(
                "weight transfer not initialized: call init_weight_transfer_engine first"
            )
        if self.open:
            raise RuntimeError(
                "start_weight_update called while a weight update is already active. "
                "Call finish_weight_update first."
            )
        self.open, self.area = True, None

    def begin(self, model: CausalLM, update_info: dict[str, Any]) -> Receipt:
        """Start receiving one ``update_weights`` call's tensors on a thread of their own;
        ``end`` collects the outcome. ``ValueError`` for a malformed ``update_info``."""
        if not self.open:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        if self.receipt is not None:
            raise RuntimeError("update_weights is already receiving on this worker")
        try:
            info: BroadcastUpdateInfo = parse_info(BroadcastUpdateInfo, update_info, "update_info")
            metas = info.metas()
        except ValueError:
            self._abort()
            raise
        group = self.group
        assert group is not None  # start checked it
        if self.area is None:
            self.area, self._spares = StagingArea(model, self._spares), {}
        receipt = self.receipt = Receipt()

        def receive() -> None:  # on the receiving thread
            try:
                self._receive(group, model, metas, receipt)
            except BaseException as e:  # handed to end(); the thread ends quietly
                receipt.error = e
            finally:
                receipt.done.set()

        self._thread = threading.Thread(target=receive, name="actorllm-weight-receive", daemon=True)
        self._thread.start()
        return receipt

    def _receive(self, group: TransferGroup, model: CausalLM, metas: list[Any], r: Receipt) -> None:
        area = self.area
        assert area is not None  # begin made it
        misfit: Exception | None = None  # the first tensor that does not fit the model
        for i, meta in enumerate(metas):
            view = None  # where the tensor lands in its staging buffer (no copy), if it can
            if misfit is None:
                try:
                    view = area.landing(meta.name, meta.shape, meta.dtype)
                except WeightLoadError as e:
                    misfit = e
            buf = view if view is not None else self._scratch_for(meta, group.device)
            try:
                group.broadcast(buf)
            except Exception as e:
                raise WeightBroadcastError(
                    f"the broadcast of {meta.name!r} (tensor {i + 1} of {len(metas)}) failed: "
                    f"{e}. The old weights keep serving; the transfer group is dropped "
                    "(call init_weight_transfer_engine again)."
                ) from e
            r.received += 1
            if misfit is not None or view is not None:
                continue  # staged in place, or drained (the trainer's broadcast completes)
            try:
                area.put(meta.name, buf)  # checked, this rank's piece copied into staging
            except WeightLoadError as e:  # it names the tensor
                misfit = e
            except Exception as e:  # a model's own (a TP slice out of range, ...): name it
                misfit = WeightLoadError(
                    f"{meta.name}: shape {tuple(meta.shape)} does not fit the model ({e})"
                )
        if misfit is not None:
            raise WeightTransferError(
                f"update_weights refused: {misfit}. The old weights keep serving."
            ) from misfit

    def _scratch_for(self, meta: Any, device: str) -> torch.Tensor:
        """A receive buffer for ``meta`` in reused memory (fresh pages cost a fault each)."""
        nbytes = meta.dtype.itemsize * _numel(meta.shape)
        if self._scratch.numel() < nbytes or str(self._scratch.device) != device:
            self._scratch = torch.empty(nbytes, dtype=torch.uint8, device=device)
        return self._scratch[:nbytes].view(meta.dtype).view(meta.shape)

    def end(self) -> int:
        """Wait for the receiving thread; returns the tensors received. On a failure the
        update is closed (staged tensors dropped) and its error raised; a failed broadcast
        also drops the group."""
        receipt, thread = self.receipt, self._thread
        if receipt is None or thread is None:
            raise RuntimeError("update_weights is not receiving on this worker")
        thread.join()
        self.receipt, self._thread = None, None
        if receipt.error is not None:
            self._abort()
            if isinstance(receipt.error, WeightBroadcastError):
                self.close()
            raise receipt.error
        return receipt.received

    def finish(self, model: CausalLM) -> list[str]:
        """Apply the staged tensors in place (the caller is between two steps); returns the
        parameters written."""
        if not self.open:
            raise RuntimeError(
                "finish_weight_update called without a matching start_weight_update."
            )
        if self.receipt is not None:
            raise RuntimeError("finish_weight_update called while update_weights is receiving")
        area, self.area, self.open = self.area, None, False
        if area is None:
            return []
        written = area.commit()
        self._spares = area.retired
        return written

    def _abort(self) -> None:
        if self.area is not None:  # its buffers hold nothing of value: spares for the next
            self._spares = {**self.area.spares, **self.area.buffers}
        self.open, self.area = False, None


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
