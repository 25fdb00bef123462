"""The collectives of one tensor-parallel group, on gloo process groups of its own.

Theory of operation
-------------------
A group is made from a rendezvous (a ``TCPStore`` that rank 0 hosts on a free port) and
holds two gloo process groups over it, built directly (``ProcessGroupGloo``), never through
``torch.distributed.init_process_group``: nothing is process-global, so a group can be
dropped and a new one made after a failure, and several can live in one process.

* ``steps``: rank 0 broadcasts each step's packed inputs and control ops on it. A rank
  waits on it for as long as the engine is idle, so its timeout is long (a day): a dead
  peer is still seen at once, because gloo fails a collective whose TCP pair closes.
  Rank 0's side is bounded by ``collective_timeout_s`` (its wait and its group's
  timeout): a hung rank stops reading, and the sender must fail rather than block.
* ``compute``: the model's all-reduces and logits gathers, and start-up agreement. Its
  timeout (``collective_timeout_s``) is what turns a *hung* rank (alive, not answering)
  into an error on rank 0: the step fails, and the executor treats it as a crash.
* ``pipe`` (pipeline parallel only): point-to-point sends of the residual stream from one
  stage to the next (``distributed/pipe.py``), with the same timeout; the bytes sent and
  received are counted (what crosses between stages, and hosts, per step).

Every call blocks the calling thread until the collective completes on this rank
(``work.wait()``); on CPU that is the only kind of completion gloo has.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from typing import Any, final

import msgspec
import torch
import torch.distributed as dist

STEP_TIMEOUT = datetime.timedelta(days=1)  # ranks idle on the step channel between steps
RENDEZVOUS_TIMEOUT = datetime.timedelta(seconds=120)  # spawning and loading included


class CommStatistics(msgspec.Struct, frozen=True, kw_only=True):
    rank: int
    world_size: int
    all_reduces: int
    gathers: int
    broadcasts: int
    collective_s: float  # time spent inside all-reduces and gathers (this rank)
    broadcast_s: float  # time spent inside step-channel broadcasts (this rank)
    # pipeline parallel: stage-to-stage transfers of this rank
    pipe_sends: int = 0
    pipe_bytes_sent: int = 0
    pipe_recvs: int = 0
    pipe_bytes_received: int = 0
    pipe_s: float = 0.0  # time spent inside sends and receives (a receive waits for its stage)


def host_store(world_size: int) -> dist.TCPStore:
    """Rank 0: a rendezvous store on a free port (``store.port``). The server listens on
    every interface, so ranks on other nodes (the Ray backend) reach it at this node's IP."""
    return dist.TCPStore(
        "127.0.0.1",
        0,
        world_size,
        is_master=True,
        timeout=RENDEZVOUS_TIMEOUT,
        wait_for_workers=False,
    )


def join_store(host: str, port: int, world_size: int) -> dist.TCPStore:
    """Ranks 1..N-1: the store rank 0 hosts at ``host:port`` (127.0.0.1 for ``mp``)."""
    return dist.TCPStore(host, port, world_size, is_master=False, timeout=RENDEZVOUS_TIMEOUT)


def _gloo(
    store: dist.Store, rank: int, world_size: int, timeout: datetime.timedelta, host: str | None
) -> Any:
    if host is None:
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    gloo: Any = dist.ProcessGroupGloo  # the stubs lack _Options
    opts = gloo._Options()
    opts._devices = [gloo.create_device(hostname=host)]
    opts._timeout = timeout
    return dist.ProcessGroupGloo(store, rank, world_size, opts)


@final
class GlooComm:
    """One rank's side of a group. Blocks until every rank has joined (the rendezvous).

    ``host``: the address this rank's gloo pairs bind to (the Ray backend passes the node's
    IP, so peers on other nodes can connect); None: gloo's default device (the hostname's
    address; fine on one node)."""

    def __init__(
        self,
        store: dist.Store,
        rank: int,
        world_size: int,
        collective_timeout_s: float,
        host: str | None = None,
        pipeline: bool = False,
    ) -> None:
        self.store = store  # also the side channel for rare control payloads (RPC)
        self.rank = rank
        self.world_size = world_size
        timeout = datetime.timedelta(seconds=collective_timeout_s)
        self._send_timeout = timeout  # rank 0's wait on a step broadcast (see broadcast)
        # Any: torch's stubs lack the process groups' own collective methods.
        self._steps: Any = _gloo(
            dist.PrefixStore("steps", store), rank, world_size, STEP_TIMEOUT, host
        )
        if rank == 0:
            # Rank 0 only sends on it and never waits longer than the collective timeout;
            # once joined (the rendezvous keeps the long timeout: ranks start slowly), its
            # side gets that timeout too, so a send to a host that vanished (no reset, its
            # packets dropped) also ends in gloo's own thread. With the day-long one, that
            # thread kept the dropped group's destructor (run by whichever thread collected
            # it: the event loop's, say) waiting for a day.
            self._steps.set_timeout(timeout)
        self._compute: Any = _gloo(
            dist.PrefixStore("compute", store), rank, world_size, timeout, host
        )
        # Pipeline parallel: stage-to-stage sends (every rank makes it or none does).
        self._pipe: Any = (
            _gloo(dist.PrefixStore("pipe", store), rank, world_size, timeout, host)
            if pipeline
            else None
        )
        self._timeout = timeout
        self.pipe_sends = self.pipe_recvs = 0
        self.pipe_bytes_sent = self.pipe_bytes_received = 0
        self.pipe_s = 0.0
        self._root = dist.BroadcastOptions()
        self._root.rootRank = 0
        self._gather = dist.GatherOptions()
        self._gather.rootRank = 0
        self.all_reduces = 0
        self.gathers = 0
        self.broadcasts = 0
        self.collective_s = 0.0
        self.broadcast_s = 0.0

    # -- the model's collectives (models/parallel.py's TPComm) ------------------------------

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks in place (contiguous), returns it."""
        t0 = time.perf_counter()
        x = x.contiguous()
        self._compute.allreduce([x]).wait()  # deliberate: the next layer needs the sum
        self.all_reduces += 1
        self.collective_s += time.perf_counter() - t0
        return x

    def gather_last_dim(self, x: torch.Tensor) -> torch.Tensor | None:
        """x: [N, V/R] on every rank -> rank 0: [N, V/R * R]; other ranks: None."""
        t0 = time.perf_counter()
        x = x.contiguous()
        if self.rank == 0:
            parts = [torch.empty_like(x) for _ in range(self.world_size)]
            self._compute.gather([parts], [x], self._gather).wait()  # deliberate: sampling next
            out: torch.Tensor | None = torch.cat(parts, dim=-1)
        else:
            self._compute.gather([], [x], self._gather).wait()
            out = None
        self.gathers += 1
        self.collective_s += time.perf_counter() - t0
        return out

    def min_int(self, value: int) -> int:
        """The minimum of ``value`` over the ranks (start-up: the KV block count)."""
        t = torch.tensor([value], dtype=torch.int64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MIN  # type: ignore[assignment]  # stubs: RedOpType
        self._compute.allreduce([t], opts).wait()
        return int(t.item())

    # -- pipeline parallel: stage to stage ----------------------------------------------------

    def send(self, x: torch.Tensor, dst: int) -> None:
        """Send ``x`` (contiguous) to rank ``dst``; returns once gloo has sent it."""
        t0 = time.perf_counter()
        self._pipe.send([x], dst, 0).wait(self._timeout)  # deliberate: x is reused after
        self.pipe_sends += 1
        self.pipe_bytes_sent += x.numel() * x.element_size()
        self.pipe_s += time.perf_counter() - t0

    def recv(self, x: torch.Tensor, src: int) -> None:
        """Receive into ``x`` (contiguous, its shape known to both sides) from rank ``src``.
        Fails after ``collective_timeout_s`` (a hung stage) or when ``src``'s pair closes."""
        t0 = time.perf_counter()
        self._pipe.recv([x], src, 0).wait(self._timeout)  # deliberate: the layers need x
        self.pipe_recvs += 1
        self.pipe_bytes_received += x.numel() * x.element_size()
        self.pipe_s += time.perf_counter() - t0

    # -- the step channel -------------------------------------------------------------------

    def broadcast(self, buf: torch.Tensor) -> None:
        """Rank 0 sends ``buf`` (int64, contiguous), the others receive into it.

        Receivers wait as long as the engine is idle; rank 0 waits at most the collective
        timeout: a hung receiver (alive, not reading) fills the socket buffers and would
        block the sender for the step group's day-long timeout — and the worker thread with
        it — where the executor needs the step to fail."""
        t0 = time.perf_counter()
        work = self._steps.broadcast([buf], self._root)
        if self.rank == 0:
            work.wait(self._send_timeout)  # deliberate: raises when a rank stopped reading
        else:
            work.wait()  # deliberate: the rank acts on what it received
        self.broadcasts += 1
        self.broadcast_s += time.perf_counter() - t0

    def close(self) -> None:
        """Drop the process groups (their pairs close: a peer still waiting fails)."""
        for pg in (self._steps, self._compute, self._pipe):
            if pg is None:
                continue
            with contextlib.suppress(Exception):  # a broken group may refuse: dropped anyway
                pg.abort()

    def statistics(self) -> CommStatistics:
        return CommStatistics(
            rank=self.rank,
            world_size=self.world_size,
            all_reduces=self.all_reduces,
            gathers=self.gathers,
            broadcasts=self.broadcasts,
            collective_s=self.collective_s,
            broadcast_s=self.broadcast_s,
            pipe_sends=self.pipe_sends,
            pipe_bytes_sent=self.pipe_bytes_sent,
            pipe_recvs=self.pipe_recvs,
            pipe_bytes_received=self.pipe_bytes_received,
            pipe_s=self.pipe_s,
        )
