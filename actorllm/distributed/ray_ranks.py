"""Ranks 1..N-1 of a tensor-parallel group as Ray actors, one placement-group bundle each.

Theory of operation
-------------------
Rank 0 holds the group (in the engine, a replica's :class:`WorkerHost` actor,
``worker/remote.py``); the other ranks need a process each, and with the Ray
backend Ray provides them, on whichever nodes of the cluster have room. One placement
group reserves a bundle per rank (``{"CPU": 1}`` on CPU,
``{"GPU": 1}`` on CUDA) with the ``PACK`` strategy: all on one node when one node has
room, spread over as few nodes as possible otherwise. The reservation is atomic, so a
group either gets every rank's resources or waits (and, past ``ready_timeout_s``, fails
with what it asked for) — never half a group.

Each rank is a :class:`RankHost` actor pinned to its bundle. :meth:`RayRankGroup.start`
calls its ``run(entry, args)`` once: that call *is* the rank's life (the entry joins the
``torch.distributed`` group rank 0 opened and serves steps until told to stop), so its
result ref doubles as a liveness signal. A monitor thread ``ray.wait``s on those refs;
when one resolves while the group is meant to be running, the rank has died — killed,
crashed, its node lost (Ray then raises ``ActorDiedError``) or its entry raised — and
``on_exit(rank, why)`` is called from the monitor thread. Ray reports an actor's death
to its owner in milliseconds on one node; the monitor polls its stop flag every
``POLL_S``, so stopping takes at most that long.

With a remote rank 0 (``worker/remote.py``) the replica's placement group is made
by the engine with a bundle for every rank; rank 0's host runs in bundle 0 and passes the
group here (``placement_group``), so ranks 1..N-1 take bundles 1..N-1 of it and the group
is neither reserved nor removed here.

Actors are created with ``max_restarts=0``: a rank's state (its shard of the KV cache, its
place in the collective) cannot be recovered alone, so the executor's supervisor restarts
the whole group instead, as it does for the ``mp`` backend.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any, final

import msgspec

from actorllm.distributed.ray_connect import RayClusterError, connect
from actorllm.distributed.ray_nodes import check_capacity, lost_bundles, wait_for_room

POLL_S = 0.25  # the monitor's stop-flag period (death itself is seen at once)
READY_TIMEOUT_S = 120.0  # waiting for the cluster to grant the placement group

# on_exit(rank, why): a rank ended while the group was meant to run.
OnExit = Callable[[int, str], None]


class RankPlacement(msgspec.Struct, frozen=True, kw_only=True):
    rank: int
    node_ip: str  # the node the rank's actor runs on
    pid: int  # its process on that node


class RankHost:
    """Lives in a Ray worker process and hosts one rank (wrapped by ``ray.remote``)."""

    def placement(self, rank: int) -> RankPlacement:
        import os

        import ray

        return RankPlacement(rank=rank, node_ip=ray.util.get_node_ip_address(), pid=os.getpid())

    def run(self, entry: Callable[..., object], args: Sequence[Any]) -> object:
        return entry(*args)


class RayRankGroupStatistics(msgspec.Struct, frozen=True, kw_only=True):
    placement_group: str  # its name (`ray list placement-groups`)
    ranks: list[RankPlacement]  # ranks 1..N-1, where they run
    exited: int | None  # the rank reported dead, if any
    stopping: bool


@final
class RayRankGroup:
    """Ranks ``1..world_size-1`` on the Ray cluster; blocking calls, made off the event loop.
    One use: started once, stopped once (a restart makes a new group).

    >>> group = RayRankGroup(world_size=2, bundle={"CPU": 1})  # doctest: +SKIP
    >>> group.start(entry, lambda rank: (rank, init_method), on_exit)  # doctest: +SKIP
    [RankPlacement(rank=1, node_ip='10.0.0.2', pid=4242)]
    >>> group.stop(grace_s=5.0)  # doctest: +SKIP
    """

    def __init__(
        self,
        world_size: int,
        bundle: dict[str, float],
        strategy: str = "PACK",
        ready_timeout_s: float = READY_TIMEOUT_S,
        name: str = "actorllm-tp",
        placement_group: Any = None,
    ) -> None:
        if world_size < 2:
            raise ValueError(f"a rank group needs world_size >= 2, got {world_size}")
        self.world_size = world_size
        # Placement-group names are unique in a Ray namespace, and a restarted group's
        # reservation may be asked for before the old one is gone: a random suffix.
        self.name = f"{name}-{secrets.token_hex(4)}"
        self.bundle = bundle
        self.strategy = strategy
        self.ready_timeout_s = ready_timeout_s
        self.placements: list[RankPlacement] = []  # ranks 1..N-1, filled by start()
        self._actors: list[Any] = []  # Ray actor handles, index = rank - 1
        self._runs: dict[Any, int] = {}  # {run() ref: rank}, for stop's grace wait
        self.exited: int | None = None  # the rank the monitor reported (written once)
        # A placement group reserved by the caller (bundle 0: rank 0's host): use bundles
        # 1..N-1 of it, never remove it.
        self._shared_pg = placement_group
        self._pg: Any = None
        self._stopping = threading.Event()
        self._monitor: threading.Thread | None = None

    def start(
        self,
        entry: Callable[..., object],
        args_for: Callable[[int], Sequence[Any]],
        on_exit: OnExit,
    ) -> list[RankPlacement]:
        """Reserve the bundles, start one actor per rank and call ``entry(*args_for(rank))``
        in each; returns where the ranks run. Blocks until every actor is up (not until the
        entries finish: they run for the group's life). Raises :class:`RayClusterError`
        when the cluster cannot grant the resources within ``ready_timeout_s``."""
        ray = connect()
        from ray.util.placement_group import placement_group

        n = self.world_size - 1
        if self._shared_pg is not None:
            self.name = self._shared_pg_name()
            # Bundles on a lost node are rescheduled by Ray where there is room; where
            # there is none they would wait forever: say so soon.
            if lost := lost_bundles(ray, self._shared_pg):
                wait_for_room(ray, lost, self.bundle, f"tensor-parallel group {self.name}")
        else:
            check_capacity(ray, n, self.bundle, self.name)
            bundles = [dict(self.bundle) for _ in range(n)]
            self._pg = placement_group(bundles, strategy=self.strategy, name=self.name)
        ready, _ = ray.wait([self._placement().ready()], timeout=self.ready_timeout_s)
        if not ready:
            self.stop(grace_s=0.0)
            raise RayClusterError(
                f"the Ray cluster did not grant {n} bundle(s) of {self.bundle} "
                f"({self.strategy}, placement group {self.name}) within "
                f"{self.ready_timeout_s:.0f}s; "
                f"it has {ray.available_resources()} free (see `ray status`)"
            )
        try:
            self._launch(ray, entry, args_for)
        except BaseException:
            self.stop(grace_s=0.0)  # an actor that could not start: none of them stays
            raise
        self._monitor = threading.Thread(
            target=self._watch,
            args=(dict(self._runs), on_exit),
            name="actorllm-ray-ranks",
            daemon=True,
        )
        self._monitor.start()
        return self.placements

    def _placement(self) -> Any:
        return self._shared_pg if self._shared_pg is not None else self._pg

    def _shared_pg_name(self) -> str:
        from ray.util.placement_group import placement_group_table

        return str(placement_group_table(self._shared_pg).get("name") or self.name)

    def _launch(
        self, ray: Any, entry: Callable[..., object], args_for: Callable[[int], Sequence[Any]]
    ) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        host = ray.remote(RankHost)
        first = 1 if self._shared_pg is not None else 0  # bundle 0 of a shared group: rank 0
        for index in range(self.world_size - 1):
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=self._placement(), placement_group_bundle_index=first + index
            )
            self._actors.append(
                host.options(
                    num_cpus=self.bundle.get("CPU", 0),
                    num_gpus=self.bundle.get("GPU", 0),
                    max_restarts=0,
                    max_task_retries=0,
                    scheduling_strategy=strategy,
                ).remote()
            )
        self.placements = ray.get(
            [actor.placement.remote(index + 1) for index, actor in enumerate(self._actors)],
            timeout=self.ready_timeout_s,  # an actor whose process cannot start
        )
        for index, actor in enumerate(self._actors):
            rank = index + 1
            self._runs[actor.run.remote(entry, tuple(args_for(rank)))] = rank

    def pid(self, rank: int) -> int:
        """Rank ``rank``'s process id on its node."""
        return self.placements[rank - 1].pid

    def actor(self, rank: int) -> Any:
        """Rank ``rank``'s Ray actor handle (``ray.kill`` it to fail the rank)."""
        return self._actors[rank - 1]

    def _watch(self, pending: dict[Any, int], on_exit: OnExit) -> None:
        """Monitor thread: report the first rank whose run() ends while not stopping.
        ``pending`` ({run ref: rank}) is this thread's own copy."""
        ray = connect()
        while not self._stopping.is_set():
            done, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            if not done or self._stopping.is_set():
                continue
            rank = pending.pop(done[0])
            why = f"rank {rank} returned"
            try:
                ray.get(done[0])
            except Exception as e:  # ActorDiedError, or the entry's own exception
                why = f"rank {rank} Ray actor ended: {type(e).__name__}: {e}"
            self.exited = rank
            on_exit(rank, why)
            return  # one report per group: the supervisor replaces the whole group

    def stop(self, grace_s: float = 5.0) -> None:
        """Give the ranks ``grace_s`` to return from their entries (the caller has told
        them to stop), then kill what is left and release the placement group.
        Idempotent; no ``on_exit`` is reported after it begins."""
        self._stopping.set()
        if self._runs or self._actors or self._pg is not None:
            ray = connect()
            if self._runs and grace_s > 0:
                ray.wait(list(self._runs), num_returns=len(self._runs), timeout=grace_s)
            for actor in self._actors:
                ray.kill(actor, no_restart=True)
            if self._pg is not None:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self._pg)
        self._runs.clear()
        self._actors.clear()
        self._pg = None
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join()
        self._monitor = None

    def statistics(self) -> RayRankGroupStatistics:
        return RayRankGroupStatistics(
            placement_group=self.name,
            ranks=list(self.placements),
            exited=self.exited,
            stopping=self._stopping.is_set(),
        )
