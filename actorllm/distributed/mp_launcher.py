"""Ranks 1..N-1 as local processes started with ``multiprocessing`` spawn (the ``mp``
backend of :mod:`actorllm.distributed.launcher`).

Spawn, not fork: the engine process runs threads (the event loop, the worker thread,
OpenMP teams) that fork would copy half-way through what they were doing. Each rank is a
fresh interpreter that imports torch and actorllm, so starting a group takes seconds.

A monitor thread waits on the processes' sentinels (``multiprocessing.connection.wait``):
a rank that exits or is killed (``kill -9``) is reported within milliseconds; the thread
polls its stop flag every ``POLL_S``. A rank also watches its parent: when the engine
process is gone, it exits (worker/tp_rank.py), so no orphan keeps a core busy.

A rank whose entry returns (told to stop) exits with ``os._exit`` once its output is
flushed: tearing down an interpreter that imported torch takes seconds on a loaded box,
and the engine's close waits for the rank's exit. A rank that raises exits the ordinary
way (the traceback on stderr, exit code 1).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, final

import msgspec

from actorllm.distributed.launcher import OnExit

POLL_S = 0.2  # the monitor's stop-flag period (a death itself is seen at once)


class RankProcess(msgspec.Struct, frozen=True, kw_only=True):
    rank: int
    pid: int


class MpRankGroupStatistics(msgspec.Struct, frozen=True, kw_only=True):
    ranks: list[RankProcess]  # ranks 1..N-1
    exited: int | None  # the rank reported dead, if any
    stopping: bool


def run_then_exit(entry: Callable[..., object], *args: Any) -> None:
    """A rank process's target: ``entry(*args)``, then exit at once (code 0) with the
    interpreter's teardown skipped; nothing in a rank needs it (its group is closed by
    ``entry``, its output is flushed here). An exception propagates (exit code 1)."""
    entry(*args)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(0)


@final
class MpRankGroup:
    """Ranks ``1..world_size-1`` as spawned processes. One use: started once, stopped once.

    >>> group = MpRankGroup(world_size=2)  # doctest: +SKIP
    >>> group.start(entry, lambda rank: (rank, port), on_exit)  # doctest: +SKIP
    [RankProcess(rank=1, pid=4242)]
    >>> group.stop(grace_s=5.0)  # doctest: +SKIP
    """

    def __init__(self, world_size: int, name: str = "actorllm-tp") -> None:
        if world_size < 2:
            raise ValueError(f"a rank group needs world_size >= 2, got {world_size}")
        self.world_size = world_size
        self.name = name  # the processes are named <name>-rank<r>
        self._procs: dict[int, Any] = {}  # {rank: multiprocessing.Process}
        self.exited: int | None = None  # the rank the monitor reported (written once)
        self._stopping = threading.Event()
        self._monitor: threading.Thread | None = None

    def start(
        self,
        entry: Callable[..., object],
        args_for: Callable[[int], Sequence[Any]],
        on_exit: OnExit,
    ) -> list[RankProcess]:
        ctx = multiprocessing.get_context("spawn")
        for rank in range(1, self.world_size):
            proc = ctx.Process(
                target=run_then_exit, args=(entry, *args_for(rank)), name=f"{self.name}-rank{rank}",
                daemon=True,  # multiprocessing kills it when the engine process exits
            )  # fmt: skip
            proc.start()
            self._procs[rank] = proc
        self._monitor = threading.Thread(
            target=self._watch, args=(on_exit,), name=f"{self.name}-monitor", daemon=True
        )
        self._monitor.start()
        return self.placements

    @property
    def placements(self) -> list[RankProcess]:
        return [RankProcess(rank=r, pid=p.pid or 0) for r, p in self._procs.items()]

    def pid(self, rank: int) -> int:
        return int(self._procs[rank].pid)

    def _watch(self, on_exit: OnExit) -> None:
        by_sentinel = {p.sentinel: (r, p) for r, p in self._procs.items()}
        while not self._stopping.is_set():
            ready = multiprocessing.connection.wait(list(by_sentinel), timeout=POLL_S)
            if not ready or self._stopping.is_set():
                continue
            rank, proc = by_sentinel[ready[0]]
            proc.join(1.0)  # reaped at once: its exit code for the report
            self.exited = rank
            on_exit(rank, f"tensor-parallel rank {rank} (pid {proc.pid}) exited: {proc.exitcode}")
            return  # one report per group: the supervisor replaces the whole group

    def stop(self, grace_s: float = 5.0) -> None:
        self._stopping.set()
        for proc in self._procs.values():
            proc.join(grace_s)
        for proc in self._procs.values():
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join()
        self._monitor = None

    def statistics(self) -> MpRankGroupStatistics:
        return MpRankGroupStatistics(
            ranks=self.placements, exited=self.exited, stopping=self._stopping.is_set()
        )
