"""What starts and watches ranks 1..N-1 of a tensor-parallel group: the launcher protocol.

A launcher owns the rank *processes* and nothing else: which entry they run, how they
meet (the rendezvous) and what they exchange belong to the group (worker/tp_group.py).
``mp`` (``distributed/mp_launcher.py``: ``multiprocessing`` spawn on this node) and
``ray`` (``distributed/ray_ranks.py``'s :class:`RayRankGroup`: Ray actors in one placement
group, on any node of an existing cluster) implement it; ``worker/tp_group.py`` picks one
by ``distributed_executor_backend``.

Contract: :meth:`start` blocks until every rank process is running ``entry(*args_for(r))``
(not until the entries return: they serve for the group's life); ``on_exit(rank, why)`` is
called from a monitor thread, at most once per group, when a rank ends while the group is
meant to run; :meth:`stop` is idempotent and reports nothing after it begins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

# on_exit(rank, why): a rank ended while the group was meant to run (monitor thread).
OnExit = Callable[[int, str], None]


class RankLauncher(Protocol):
    world_size: int

    def start(
        self,
        entry: Callable[..., object],
        args_for: Callable[[int], Sequence[Any]],
        on_exit: OnExit,
    ) -> Sequence[object]:
        """Start ranks ``1..world_size-1``; returns where each runs."""
        ...

    def stop(self, grace_s: float = 5.0) -> None:
        """Give the ranks ``grace_s`` to return, then kill what is left."""
        ...

    def pid(self, rank: int) -> int:
        """Rank ``rank``'s process id (on its node)."""
        ...

    def statistics(self) -> object: ...
