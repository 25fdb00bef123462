"""A replica's worker in a Ray actor: the actor (:class:`WorkerHost`), the step codec, and
the driver's handle on the actor and its placement group (:class:`RemoteHost`: placing,
building, probing, replacing). The driver itself, the replica worker on the replica's
worker thread that ships the steps, is :class:`~actorllm.worker.remote.RemoteWorker`;
its module docstring tells the whole story.

The host does not know how the engine builds a Worker: the engine hands it a
:data:`BuildWorker` (picklable: Ray ships it to the actor), called there with the
replica's placement group and, for a replacement, the KV block count to hold.
"""

from __future__ import annotations

import os
import secrets
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, final

import msgspec

from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.distributed.ray_connect import RayClusterError, connect
from actorllm.distributed.ray_nodes import check_capacity, check_nodes, wait_for_room
from actorllm.worker.worker import Worker

WATCH_S = 0.5  # the monitor's period: an idle host's death is seen within it
READY_TIMEOUT_S = 120.0  # the cluster granting the placement group
LOAD_TIMEOUT_S = 600.0  # the host loading its model (and its ranks theirs)
_ARRAY_EXT = 1  # msgpack extension code of a numpy array (a grammar bitmask)
_HOST_TIME = struct.Struct("<d")  # appended to every reply: the host's seconds on the step


class RemoteWorkerDied(RuntimeError):
    """The replica's remote worker (its Ray actor) is gone; the core restart replaces it."""


# -- the per-step codec ---------------------------------------------------------------------


def _enc_hook(obj: Any) -> Any:
    import numpy as np

    if hasattr(obj, "numpy") and hasattr(obj, "dtype"):  # a torch tensor
        obj = obj.cpu().numpy()
    if isinstance(obj, np.ndarray):
        header = msgspec.msgpack.encode((obj.dtype.str, list(obj.shape)))
        return msgspec.msgpack.Ext(
            _ARRAY_EXT, len(header).to_bytes(4, "little") + header + obj.tobytes()
        )
    raise NotImplementedError(f"cannot send {type(obj).__name__} to a remote worker")


def _ext_hook(code: int, data: memoryview) -> Any:
    import numpy as np

    if code != _ARRAY_EXT:
        raise NotImplementedError(f"unknown msgpack extension {code}")
    size = int.from_bytes(data[:4], "little")
    dtype, shape = msgspec.msgpack.decode(data[4 : 4 + size])
    return np.frombuffer(data[4 + size :], dtype=dtype).reshape(shape).copy()


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_step_decoder = msgspec.msgpack.Decoder(SchedulerOutput, ext_hook=_ext_hook)
_output_decoder = msgspec.msgpack.Decoder(ModelRunnerOutput)


def encode_step(so: SchedulerOutput) -> bytes:
    """``so`` as msgpack; a grammar bitmask still being filled is waited for first."""
    grammar = so.grammar_bitmask
    if grammar is not None and hasattr(grammar.bitmask, "result"):
        grammar = msgspec.structs.replace(grammar, bitmask=grammar.array())
        so = msgspec.structs.replace(so, grammar_bitmask=grammar)
    return _encoder.encode(so)


def decode_step(payload: bytes) -> SchedulerOutput:
    return _step_decoder.decode(payload)


def decode_reply(raw: bytes) -> tuple[ModelRunnerOutput, float]:
    """A :meth:`WorkerHost.execute` reply: the step's output and the host's seconds on it."""
    (host_s,) = _HOST_TIME.unpack_from(raw, len(raw) - _HOST_TIME.size)
    return _output_decoder.decode(memoryview(raw)[: -_HOST_TIME.size]), host_s


# -- the remote side ------------------------------------------------------------------------


class BuiltInfo(Protocol):
    """What the host reads off the engine's description of the model it built."""

    @property
    def num_blocks(self) -> int: ...


# build(placement_group, num_blocks): the replica's Worker, built in the actor (ranks
# 1..N-1 started in the placement group's other bundles), and the engine's ModelInfo;
# ``num_blocks``: the KV block count a replacement must hold, None for the first build.
BuildWorker = Callable[[Any, int | None], tuple[Worker, BuiltInfo]]


class RemoteSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What the driver needs to place and watch a replica's remote worker."""

    replica: int  # the data-parallel replica
    world_size: int  # tensor parallel: a placement-group bundle per rank
    data_parallel_size: int = 1  # names (placement groups, errors) per replica when > 1
    gpu: bool = False  # bundles of {"GPU": 1}, else {"CPU": 1}
    step_timeout_s: float | None = None  # a host whose steps take longer is replaced
    # Local directories every node of the placement must hold (the model's), checked
    # with the versions before the model is loaded there (distributed/ray_nodes.py).
    model_dirs: tuple[str, ...] = ()


class HostPlacement(msgspec.Struct, frozen=True, kw_only=True):
    node_ip: str  # the node the replica's worker runs on
    pid: int  # its process there


class WorkerHost:
    """Lives in a Ray worker process and holds a replica's Worker (wrapped by
    ``ray.remote``). Its methods run one at a time, in the order the driver called them."""

    def __init__(self) -> None:
        self.worker: Worker | None = None

    def build(
        self, build: BuildWorker, placement_group: Any, num_blocks: int | None
    ) -> tuple[BuiltInfo, HostPlacement]:
        """Load the model (and start ranks 1..N-1 beside this one); returns the engine's
        ModelInfo and where this host runs. The Worker resolves each step at once:
        nothing else is ever queued here."""
        import ray

        self.worker, info = build(placement_group, num_blocks)
        where = HostPlacement(node_ip=ray.util.get_node_ip_address(), pid=os.getpid())
        return info, where

    def execute(self, payload: bytes) -> bytes:
        """One step: msgpack ``SchedulerOutput`` in, msgpack ``ModelRunnerOutput`` out
        (plus 8 bytes: the seconds spent here). A failed step raises (to the driver)."""
        start = time.perf_counter()
        assert self.worker is not None
        outcomes: list[Any] = []
        self.worker.execute_step(decode_step(payload), None, outcomes.append)
        (outcome,) = outcomes  # resolved at once (no job is ever queued behind it)
        reply = _encoder.encode(outcome.unwrap())
        return reply + _HOST_TIME.pack(time.perf_counter() - start)

    def ping(self) -> None:
        """The driver's liveness probe (between steps)."""

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A control call on the Worker (between steps)."""
        assert self.worker is not None
        return getattr(self.worker, method)(*args, **kwargs)


# -- the driver's handle on the actor -------------------------------------------------------


@final
class RemoteHost:
    """The replica's placement group and its :class:`WorkerHost` actor, seen from the
    driver; every method blocks and runs on the replica's worker thread."""

    def __init__(self, spec: RemoteSpec, build: BuildWorker) -> None:
        self.spec = spec
        self.replica = spec.replica
        self.build = build
        self.generation = 0
        self.actor: Any = None  # the WorkerHost handle (``ray.kill`` it to fail the replica)
        self.placement = HostPlacement(node_ip="", pid=0)
        self.broken: str | None = None  # why the host is gone (any thread, under _lock)
        # notify(generation, why): the host of that generation died (set by each executor
        # incarnation, which crashes on it, as for a tensor-parallel group).
        self.notify: Callable[[int, str], None] | None = None
        self.info: BuiltInfo | None = None  # the engine's ModelInfo, from the first build
        self.pg_name = ""
        self._pg: Any = None
        self._lock = threading.Lock()
        self._watching: threading.Event | None = None  # set: the monitor thread returns

    @property
    def bundle(self) -> dict[str, float]:
        return {"GPU": 1.0} if self.spec.gpu else {"CPU": 1.0}

    def start(self, blocks: int | None = None) -> BuiltInfo:
        """Reserve the placement group (a bundle per rank) and build the Worker in an actor
        in bundle 0; ``blocks``: the KV block count to hold (a replacement). Returns the
        ModelInfo. Raises :class:`RayClusterError` when the cluster cannot place it."""
        ray = connect()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        n, bundle = self.spec.world_size, self.bundle
        dp = f"dp{self.replica}-" if self.spec.data_parallel_size > 1 else ""
        who = f"data-parallel replica {self.replica}" if dp else "the model's worker"
        if blocks is None:
            check_capacity(ray, n, bundle, who)  # never placeable: say so now
        else:
            wait_for_room(ray, n, bundle, who)  # a replacement: no room left, say so soon
        self.pg_name = f"actorllm-{dp}worker-{secrets.token_hex(4)}"  # unique while replaced
        self._pg = placement_group([dict(bundle) for _ in range(n)], "PACK", name=self.pg_name)
        try:
            ready, _ = ray.wait([self._pg.ready()], timeout=READY_TIMEOUT_S)
            if not ready:
                raise RayClusterError(
                    f"the Ray cluster did not grant {n} bundle(s) of {bundle} (PACK, "
                    f"placement group {self.pg_name}) within {READY_TIMEOUT_S:.0f}s; it has "
                    f"{ray.available_resources()} free (see `ray status`)"
                )
            check_nodes(ray, self._pg, self.spec.model_dirs, who)
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=self._pg, placement_group_bundle_index=0
            )
            self.actor = (
                ray.remote(WorkerHost)
                .options(
                    num_cpus=bundle.get("CPU", 0),
                    num_gpus=bundle.get("GPU", 0),
                    max_restarts=0,
                    max_task_retries=0,
                    scheduling_strategy=strategy,
                )
                .remote()
            )
            # A replacement (``blocks``) holds the scheduler's block count.
            info, self.placement = ray.get(
                self.actor.build.remote(self.build, self._pg, blocks), timeout=LOAD_TIMEOUT_S
            )
        except BaseException:
            self.stop()
            raise
        if self.info is not None and info.num_blocks != self.info.num_blocks:
            self.stop()
            raise RemoteWorkerDied(
                f"the replacement worker holds {info.num_blocks} KV blocks, not "
                f"{self.info.num_blocks}"
            )
        self.info = self.info or info
        with self._lock:
            self.broken = None
        self._watching = threading.Event()
        threading.Thread(
            target=self._watch,
            args=(self.actor, self.generation, self._watching),
            name=f"actorllm-ray-worker{self.replica}",
            daemon=True,
        ).start()
        return info

    def _watch(self, actor: Any, generation: int, stop: threading.Event) -> None:
        """Monitor thread: a tiny call every ``WATCH_S``, so that a host that dies while its
        replica is idle is reported at once, not at the next step. (A call runs between
        steps; one pending while a step runs fails as soon as the actor dies.)"""
        ray = connect()
        while not stop.wait(WATCH_S):
            try:
                ray.get(actor.ping.remote())
            except ray.exceptions.RayActorError as e:
                self.mark_broken(generation, f"the remote worker died: {type(e).__name__}: {e}")
                return
            except Exception:  # the connection is going away (engine closing)
                return

    def mark_broken(self, generation: int, why: str) -> None:
        """The host of ``generation`` is gone (any thread); tells the executor once."""
        if self.spec.data_parallel_size > 1:
            why = f"data-parallel replica {self.replica}: {why}"
        with self._lock:
            if generation != self.generation or self.broken is not None:
                return
            self.broken = why
            notify = self.notify
        if notify is not None:
            notify(generation, why)

    def replace(self) -> None:
        """A new host for a broken one (the old actor killed, its group released)."""
        assert self.info is not None, "replace() before start()"
        self.stop()
        self.generation += 1
        self.start(blocks=self.info.num_blocks)

    def abandon(self, why: str) -> None:
        """Give up on a host that does not answer (hung): broken, without a report (the
        caller replaces it), and killed, so that its pending calls fail at once."""
        with self._lock:
            self.broken = self.broken or f"the remote worker hung: {why}"
        if self.actor is not None:
            connect().kill(self.actor, no_restart=True)

    def stop(self) -> None:
        """Kill the actor (its ranks 1..N-1 die with it: it owns them) and release the
        placement group. Idempotent."""
        with self._lock:
            self.broken = self.broken or "stopped"  # its end is not a failure to report
        if self._watching is not None:
            self._watching.set()
        if self.actor is None and self._pg is None:
            return
        ray = connect()
        if self.actor is not None:
            ray.kill(self.actor, no_restart=True)
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._pg)
        self.actor, self._pg = None, None

    def call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Run ``Worker.<method>`` on the host and return its result (or raise its error;
        a broken host: :class:`RemoteWorkerDied`; no answer within ``timeout`` seconds:
        ``TimeoutError``)."""
        ray = connect()
        if self.actor is None or self.broken is not None:
            raise RemoteWorkerDied(f"the remote worker is gone: {self.broken}")
        try:
            return ray.get(self.actor.call.remote(method, args, kwargs), timeout=timeout)
        except ray.exceptions.GetTimeoutError as e:
            raise TimeoutError(f"the remote worker did not answer {method} in {timeout}s") from e
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, RayClusterError):  # the host's ranks found no room: as is
                raise e.cause from e
            raise
        except ray.exceptions.RayActorError as e:
            why = f"the remote worker died: {type(e).__name__}: {e}"
            self.mark_broken(self.generation, why)
            raise RemoteWorkerDied(why) from e
