"""The trainer <-> workers process group of a weight transfer: ``torch.distributed`` on a
``TCPStore`` of its own, never the engine's tensor-parallel group.

The trainer is rank 0 and hosts the store at ``master_address:master_port`` (as vLLM's
``StatelessProcessGroup``); every worker rank joins it as a client. The process group is
built directly (``ProcessGroupGloo`` / ``ProcessGroupNCCL``), not through
``init_process_group``: nothing is process-global, so a group can be dropped after a
failure and a new one made, in the trainer and in the engine alike.

A collective that cannot complete (the trainer died mid-broadcast, a rank hung) fails
after ``timeout_s`` at the latest; a peer whose TCP connection closes fails it at once.

    group = TransferGroup.open("gloo", "127.0.0.1", 29600, rank=0, world_size=2)
    group.broadcast(torch.ones(4))   # rank 0 sends; the others receive into theirs
"""

from __future__ import annotations

import contextlib
import datetime
from typing import Any, Literal, final

import torch
import torch.distributed as dist

TransferBackend = Literal["gloo", "nccl"]
BACKENDS: tuple[str, ...] = ("gloo", "nccl")
DEFAULT_TIMEOUT_S = 300.0


@final
class TransferGroup:
    """One rank's side of a transfer group (blocking calls; any thread)."""

    def __init__(self, pg: Any, store: dist.Store, rank: int, world_size: int, device: str):
        self._pg = pg  # Any: torch's stubs lack the process groups' collective methods
        self._store = store  # kept alive: rank 0 hosts it for the others
        self.rank = rank
        self.world_size = world_size
        self.device = device  # where received tensors land ("cpu", or "cuda:i" for nccl)
        self._root = dist.BroadcastOptions()
        self._root.rootRank = 0

    @classmethod
    def open(
        cls,
        backend: str,
        master_address: str,
        master_port: int,
        rank: int,
        world_size: int,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> TransferGroup:
        """Join (rank 0: host) the group; blocks until all ``world_size`` ranks joined or
        ``timeout_s`` passed (``RuntimeError`` / ``DistNetworkError`` then)."""
        if backend not in BACKENDS:
            raise ValueError(
                f"weight transfer backend {backend!r} is not one of {', '.join(BACKENDS)}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"weight transfer rank {rank} is outside world_size {world_size}")
        if backend == "nccl" and not torch.cuda.is_available():
            raise ValueError("weight transfer backend 'nccl' needs CUDA; use 'gloo' on CPU")
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(
            master_address,
            int(master_port),
            world_size,
            is_master=rank == 0,
            timeout=timeout,
            wait_for_workers=False,
        )
        prefixed = dist.PrefixStore("weight_transfer", store)
        if backend == "nccl":
            opts: Any = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            pg: Any = dist.ProcessGroupNCCL(prefixed, rank, world_size, opts)
            device = f"cuda:{torch.cuda.current_device()}"
        else:
            pg = dist.ProcessGroupGloo(prefixed, rank, world_size, timeout)
            device = "cpu"
        group = cls(pg, store, rank, world_size, device)
        group.barrier()  # every rank is connected before anyone sends
        return group

    def broadcast(self, tensor: torch.Tensor) -> None:
        """Rank 0 sends ``tensor`` (contiguous), the others receive into theirs (same shape
        and dtype). Blocks until done on this rank (deliberate: the caller reads it next)."""
        self._pg.broadcast([tensor], self._root).wait()

    def barrier(self) -> None:
        flag = torch.zeros(1, dtype=torch.int32, device=self.device)
        self._pg.allreduce([flag]).wait()  # deliberate: a rendezvous

    def close(self) -> None:
        """Drop the group (its pairs close: a peer still waiting fails at once)."""
        with contextlib.suppress(Exception):  # a broken group may refuse: dropped anyway
            self._pg.abort()
