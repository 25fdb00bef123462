"""Streams and events of the worker thread, with a CPU variant that does nothing.

Theory of operation (CUDA): the worker owns two streams. The *compute* stream runs every
kernel of a step (forward, logits, sampling, the device-side token feed); the *copy* stream
uploads the next step's inputs from pinned host memory while compute may still be busy.
Order between them is kept with events only, never with a device-wide synchronize:

* upload: ``copy`` waits for the event marking that the compute stream is done reading the
  destination buffers (double-buffered, see ``staging.py``), copies, records ``uploaded``;
  ``compute`` waits on ``uploaded`` before the step's first kernel;
* download: sampled ids are copied device -> pinned host on the compute stream (after the
  sampler, in stream order) and an event is recorded; the host thread blocks on *that event*
  (``event.synchronize()``) when it needs the tokens.

On CPU every kernel runs synchronously on the calling thread, so :class:`DeviceStreams`
(the CPU variant) turns all of this into no-ops and the same runner code runs unchanged.

    streams = DeviceStreams.for_device(torch.device("cpu"))
    with streams.compute_scope():
        ...  # kernels
    ev = streams.record_compute()
    ev.synchronize()  # CPU: returns at once
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np
import torch


def to_device(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """Host array -> tensor on ``device`` without blocking the host.

    CPU: shares the array's memory (no copy). CUDA: through a pinned buffer from torch's
    caching host allocator, copied non-blocking on the current stream; a copy from pageable
    memory could instead wait for the stream's earlier work, which would serialize the host
    with the device. The allocator keeps the pinned buffer alive until the copy is done.
    """
    t = torch.from_numpy(np.ascontiguousarray(a))
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)


class Event(Protocol):
    """The part of ``torch.cuda.Event`` the worker uses."""

    def synchronize(self) -> None: ...

    def query(self) -> bool: ...


class _DoneEvent:
    """A CPU event: the work it marks finished when it was recorded."""

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


DONE = _DoneEvent()


class DeviceStreams:
    """The CPU variant: every kernel is synchronous, so nothing needs ordering."""

    device: torch.device

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.num_uploads = 0  # statistics

    @staticmethod
    def for_device(device: torch.device) -> DeviceStreams:
        """:class:`CudaStreams` on a CUDA device, the no-op variant elsewhere."""
        return CudaStreams(device) if device.type == "cuda" else DeviceStreams(device)

    @property
    def is_async(self) -> bool:
        """Whether kernels run asynchronously to the host (events matter)."""
        return False

    @contextlib.contextmanager
    def compute_scope(self) -> Iterator[None]:
        """Kernels launched inside go to the compute stream."""
        yield

    def record_compute(self) -> Event:
        """An event marking everything launched on the compute stream so far."""
        return DONE

    def upload(
        self, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], after: Event | None = None
    ) -> Event:
        """``dst.copy_(src)`` for each ``(dst, src)``; the compute stream will see the data.

        ``after``: an event the copies must wait for (the compute stream finishing with the
        destinations). Returns the event marking the copies done (the sources may then be
        rewritten). Never blocks the host on CUDA.
        """
        for dst, src in pairs:
            dst.copy_(src)
        self.num_uploads += 1
        return DONE

    def statistics(self) -> dict[str, int | bool]:
        return {"async": self.is_async, "uploads": self.num_uploads}


class CudaStreams(DeviceStreams):
    """A compute stream and a copy stream on one CUDA device, ordered by events."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.compute = torch.cuda.Stream(device)
        self.copy = torch.cuda.Stream(device)

    @property
    def is_async(self) -> bool:
        return True

    @contextlib.contextmanager
    def compute_scope(self) -> Iterator[None]:
        with torch.cuda.stream(self.compute):
            yield

    def record_compute(self) -> Event:
        ev = torch.cuda.Event()
        ev.record(self.compute)
        return ev

    def upload(
        self, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], after: Event | None = None
    ) -> Event:
        if isinstance(after, torch.cuda.Event):  # DONE (nothing read the set yet): no wait
            self.copy.wait_event(after)
        with torch.cuda.stream(self.copy):
            for dst, src in pairs:
                dst.copy_(src, non_blocking=True)  # pinned host -> device, async
        done = torch.cuda.Event()
        done.record(self.copy)
        self.compute.wait_event(done)  # device-side wait: the host does not block
        self.num_uploads += 1
        return done
