"""A pipeline stage's link to its neighbours: the residual stream, stage to stage.

Stage ``s`` of ``P`` runs on rank ``(s + 1) % P``: ranks 1..P-1 hold stages 0..P-2 and
rank 0 (the engine's worker thread, which owns the requests and the sampler) holds the
last stage, so the stage that samples is the one that drives the step and no token ever
travels back. Each step, stage ``s`` sends its ``[2, T, H]`` (hidden, residual) to stage
``s + 1`` over the group's ``pipe`` process group (``distributed/comm.py``); the receiver
knows the shape from the step's token count.

Rank 0 does not wait for a step's hidden states when it sends the step out: it
:meth:`StageLink.prefetch`\\ es them (a receiver thread posts the receives in step order and
marks each arrived), so it can send the next step to the first stage while the earlier
stages still work on this one; its forward then takes the received tensor
(:meth:`StageLink.recv_stage`). That is what lets the stages overlap.

    >>> stage_rank(0, 2), stage_rank(1, 2), rank_stage(0, 3), rank_stage(1, 3)
    (1, 0, 2, 0)
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import final

import torch

from actorllm.distributed.comm import GlooComm


def stage_rank(stage: int, size: int) -> int:
    """The rank that holds pipeline stage ``stage`` (the last stage: rank 0)."""
    return (stage + 1) % size


def rank_stage(rank: int, size: int) -> int:
    """The pipeline stage rank ``rank`` holds."""
    return (rank - 1) % size


@final
class Prefetched:
    """One step's hidden states, being received on the receiver thread."""

    def __init__(self, buf: torch.Tensor) -> None:
        self.buf = buf  # [2, T, H]
        self.arrived = threading.Event()
        self.error: BaseException | None = None

    def wait(self) -> torch.Tensor:
        """The received tensor (bounded: the receive fails after the collective timeout)."""
        self.arrived.wait()
        if self.error is not None:
            raise self.error
        return self.buf


@final
class StageLink:
    """Rank ``comm.rank``'s side of the pipeline (models/pipeline.py's PipeLink)."""

    def __init__(self, comm: GlooComm, size: int) -> None:
        self.comm = comm
        stage = rank_stage(comm.rank, size)
        self.stage = stage
        self.prev = stage_rank(stage - 1, size) if stage > 0 else None
        self.next = stage_rank(stage + 1, size) if stage < size - 1 else None
        self._prefetched: deque[Prefetched] = deque()  # posted, not yet taken; step order
        self._inbox: queue.SimpleQueue[Prefetched | None] | None = None
        self._receiver: threading.Thread | None = None

    def send_stage(self, x: torch.Tensor) -> None:
        """x: [2, T, H] (hidden, residual) -> the next stage."""
        assert self.next is not None, "the last stage sends nothing on"
        self.comm.send(x.contiguous(), self.next)

    def recv_stage(self, shape: tuple[int, int, int], dtype: torch.dtype) -> torch.Tensor:
        """The previous stage's [2, T, H] for this step: the oldest prefetched one, else
        received now."""
        assert self.prev is not None, "the first stage receives nothing"
        if self._prefetched:
            buf = self._prefetched.popleft().wait()
            assert tuple(buf.shape) == shape, (tuple(buf.shape), shape)
            return buf
        buf = torch.empty(shape, dtype=dtype)
        self.comm.recv(buf, self.prev)
        return buf

    def prefetch(self, shape: tuple[int, int, int], dtype: torch.dtype) -> Prefetched:
        """Post the receive of a step's [2, T, H] (steps in order); returns at once."""
        assert self.prev is not None, "the first stage receives nothing"
        item = Prefetched(torch.empty(shape, dtype=dtype))
        if self._inbox is None:
            self._inbox = queue.SimpleQueue()
            self._receiver = threading.Thread(
                target=self._receive, args=(self._inbox,), name="actorllm-pp-recv", daemon=True
            )
            self._receiver.start()
        self._prefetched.append(item)
        self._inbox.put(item)
        return item

    def close(self) -> None:
        """Stop the receiver thread (after the comm is closed, a pending receive fails)."""
        if self._inbox is not None:
            self._inbox.put(None)

    def _receive(self, inbox: queue.SimpleQueue[Prefetched | None]) -> None:
        """Receiver thread: each posted step's hidden states, in order. After a failure
        (a stage died or hung, the group was dropped) every later step fails the same."""
        error: BaseException | None = None
        while (item := inbox.get()) is not None:
            if error is None:
                try:
                    assert self.prev is not None
                    self.comm.recv(item.buf, self.prev)
                except BaseException as exc:  # reported to the worker thread by wait()
                    error = exc
            item.error = error
            item.arrived.set()
