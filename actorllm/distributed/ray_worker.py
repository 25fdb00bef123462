"""A replica's whole worker in a Ray actor: rank 0 remote, the worker thread its driver.

Theory of operation
-------------------
With ``distributed_executor_backend="ray"`` (or ``data_parallel_backend="ray"``) no rank
runs in the engine process. Each data-parallel replica reserves one placement group with a
bundle per rank (``{"CPU": 1}``, ``PACK``); bundle 0 holds a :class:`WorkerHost` actor,
which builds the replica's :class:`~actorllm.worker.worker.Worker` exactly as the worker
thread does under ``mp`` (model runner, batch state, sampler, async-scheduling
placeholders, profiler and, for tensor parallel, the rank group, whose ranks 1..N-1 it
starts in bundles 1..N-1 of the same placement group).

The replica's worker thread keeps a :class:`RemoteWorker`: a ``Worker`` whose runner is a
proxy. Each step the proxy msgpack-encodes the ``SchedulerOutput`` (a msgspec struct from
``core/``; a grammar bitmask travels as raw int32 bytes), sends it with one actor call
(``WorkerHost.execute(bytes)``) and later gets the ``ModelRunnerOutput`` back as bytes: no
pickle per step (Ray passes ``bytes`` through its object store as they are). The call
returns a Ray object ref at once, so under async scheduling the step pipeline ships step
N+1 while step N is still on the remote worker (Ray runs one caller's calls on an actor in
order), which hides the round trip behind the step.

Failure: an actor that dies (``ray.kill``, its process or node lost) fails every pending
``ray.get`` with ``RayActorError``: the step's outcome is that error, the executor crashes
as after any failed step, the core restarts, and its first job,
:meth:`RemoteWorker.reset_requests`, replaces the host: the old actor killed, its
placement group removed, a new one reserved and the model loaded there with the same KV
block count (``generation + 1``). Requests are rebuilt from the ledger. A failure inside a
host that is still alive (a failed step, a dead rank 1) is handled by the host's own
``Worker.reset_requests``, as under ``mp``.

Control calls (``collective_rpc``, ``sleep``, ``wake_up``, profiling, statistics) are
forwarded to the host's Worker between steps; their arguments and results go by Ray's
pickle (rare calls).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent import futures
from typing import Any, final

import msgspec

from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.distributed.ray_connect import RayClusterError, connect
from actorllm.worker.step_pipeline import Post
from actorllm.worker.worker import Worker, WorkerStatistics
from actorllm.worker.worker_thread import Outcome

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


# -- the remote side ------------------------------------------------------------------------


class HostPlacement(msgspec.Struct, frozen=True, kw_only=True):
    node_ip: str  # the node the replica's worker runs on
    pid: int  # its process there


class WorkerHost:
    """Lives in a Ray worker process and holds a replica's Worker (wrapped by
    ``ray.remote``). Its methods run one at a time, in the order the driver called them."""

    def __init__(self) -> None:
        self.worker: Worker | None = None

    def build(
        self, config: Any, replica: int, factory: Callable[..., Any], placement_group: Any
    ) -> tuple[Any, HostPlacement]:
        """Load the model (and start ranks 1..N-1 beside this one); returns the ModelInfo
        and where this host runs."""
        import ray

        from actorllm.engine.startup import _build_rank0, _model_info

        runner, blocks, group = _build_rank0(config, factory, replica, placement_group)
        self.worker = Worker(
            runner,
            lambda: False,  # nothing else is ever queued here: resolve each step at once
            profiler_dir=config.profiler_dir,
            cuda=config.resolved_device() == "cuda",
            tp=group,
        )
        where = HostPlacement(node_ip=ray.util.get_node_ip_address(), pid=os.getpid())
        return _model_info(config, runner, blocks), where

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


# -- the driver side (the replica's worker thread) ------------------------------------------


class RemoteWorkerStatistics(msgspec.Struct, frozen=True, kw_only=True):
    placement_group: str  # `ray list placement-groups`
    node_ip: str  # where the replica's worker (rank 0) runs
    pid: int  # its process there
    generation: int  # 0 for the first host, +1 per replacement
    broken: str | None  # why the current host is gone, if it is
    steps: int  # steps shipped to the host
    max_in_flight: int  # 2: a step was shipped while the previous one ran (async scheduling)
    steps_alone: int  # steps shipped with no other in flight (the ones timed below)
    mean_round_trip_ms: float  # send to reply, those steps
    mean_overhead_ms: float  # the same minus the host's own time: transport and codec
    last_request_bytes: int
    last_reply_bytes: int


@final
class RemoteHost:
    """The replica's placement group and its :class:`WorkerHost` actor, seen from the
    driver; every method blocks and runs on the replica's worker thread."""

    def __init__(self, config: Any, replica: int, factory: Callable[..., Any]) -> None:
        self.config = config
        self.replica = replica
        self.factory = factory
        self.generation = 0
        self.actor: Any = None  # the WorkerHost handle (``ray.kill`` it to fail the replica)
        self.placement = HostPlacement(node_ip="", pid=0)
        self.broken: str | None = None  # why the host is gone (any thread, under _lock)
        # notify(generation, why): the host of that generation died (set by each executor
        # incarnation, which crashes on it, as for a tensor-parallel group).
        self.notify: Callable[[int, str], None] | None = None
        self.info: Any = None  # ModelInfo, from the first build
        self.pg_name = ""
        self._pg: Any = None
        self._lock = threading.Lock()
        self._watching: threading.Event | None = None  # set: the monitor thread returns

    @property
    def bundle(self) -> dict[str, float]:
        return {"GPU": 1.0} if self.config.device == "cuda" else {"CPU": 1.0}

    def start(self, blocks: int | None = None) -> Any:
        """Reserve the placement group (a bundle per rank) and build the Worker in an actor
        in bundle 0; ``blocks``: the KV block count to hold (a replacement). Returns the
        ModelInfo. Raises :class:`RayClusterError` when the cluster cannot place it."""
        ray = connect()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        n, bundle = int(self.config.tensor_parallel_size), self.bundle
        dp = f"dp{self.replica}-" if self.config.data_parallel_size > 1 else ""
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
            config = self.config
            if blocks is not None:  # a replacement holds the scheduler's block count
                config = msgspec.structs.replace(config, num_gpu_blocks_override=blocks)
            info, self.placement = ray.get(
                self.actor.build.remote(config, self.replica, self.factory, self._pg),
                timeout=LOAD_TIMEOUT_S,
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
        if self.config.data_parallel_size > 1:
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
        except ray.exceptions.RayActorError as e:
            why = f"the remote worker died: {type(e).__name__}: {e}"
            self.mark_broken(self.generation, why)
            raise RemoteWorkerDied(why) from e


class _RemoteStep:
    """A step shipped to the host, its reply a future (completed on a Ray thread)."""

    def __init__(self, ref: Any, post: Post, *, alone: bool, request_bytes: int) -> None:
        self.ref = ref  # kept: the future alone does not hold the object
        self.future = ref.future()
        self.post = post
        self.alone = alone
        self.request_bytes = request_bytes
        self.sent = time.perf_counter()


class _Timing:
    """Round-trip figures (under the RemoteWorker's lock)."""

    def __init__(self) -> None:
        self.steps = self.alone = self.max_in_flight = 0
        self.rtt_s = self.overhead_s = 0.0
        self.last_bytes = (0, 0)


class RemoteWorker(Worker):
    """The driver: a :class:`Worker` on the replica's worker thread whose runner, request
    state and control all live in the replica's :class:`WorkerHost` actor; the executor
    uses it exactly as a local Worker.

    Steps never block the thread: each is shipped at once and its reply posted (to the
    executor, in step order) from the callback of its Ray future. Control calls wait for
    every shipped step's reply first, as a local Worker flushes its pipeline."""

    def __init__(self, host: RemoteHost, has_queued_jobs: Callable[[], bool]) -> None:
        super().__init__(None, has_queued_jobs)
        self.host = host
        self._lock = threading.Lock()
        self._steps: deque[_RemoteStep] = deque()  # shipped, reply not posted; send order
        self._timing = _Timing()

    @classmethod
    def start(
        cls,
        config: Any,
        replica: int,
        factory: Callable[..., Any],
        has_queued_jobs: Callable[[], bool],
    ) -> tuple[RemoteWorker, Any]:
        """Place and build replica ``replica``'s worker (on its worker thread); returns the
        driver and the ModelInfo."""
        host = RemoteHost(config, replica, factory)
        info = host.start()
        return cls(host, has_queued_jobs), info

    def watched(self) -> RemoteHost:
        """The executor crashes when the host dies, even between steps."""
        return self.host

    # -- steps ------------------------------------------------------------------------------

    def execute_step(self, so: SchedulerOutput, meta: Any, post: Post) -> None:
        """Ship ``so``; its outcome is posted when the reply comes (or the host dies)."""
        try:
            if meta is not None:  # refused by the config: kv_connector with ray
                raise RuntimeError("a KV connector cannot reach a remote worker")
            actor = self.host.actor
            if actor is None or self.host.broken is not None:
                raise RemoteWorkerDied(f"the remote worker is gone: {self.host.broken}")
            payload = encode_step(so)  # waits for a grammar bitmask being filled
            ref = actor.execute.remote(payload)
        except BaseException as exc:  # reported in order, after the steps before it
            self.flush()
            post(Outcome(error=exc))
            return
        with self._lock:
            t = self._timing
            step = _RemoteStep(ref, post, alone=not self._steps, request_bytes=len(payload))
            self._steps.append(step)
            t.steps += 1
            t.max_in_flight = max(t.max_in_flight, len(self._steps))
        step.future.add_done_callback(lambda _: self._post_ready())

    def _post_ready(self) -> None:
        """Post every finished step at the head of the queue, in order (any thread)."""
        with self._lock:
            while self._steps and self._steps[0].future.done():
                step = self._steps.popleft()
                step.post(self._outcome(step))

    def _outcome(self, step: _RemoteStep) -> Outcome[ModelRunnerOutput]:
        import ray

        try:
            raw: bytes = step.future.result()
        except ray.exceptions.RayActorError as e:
            why = f"the remote worker died: {type(e).__name__}: {e}"
            self.host.mark_broken(self.host.generation, why)
            return Outcome(error=RemoteWorkerDied(why))
        except BaseException as e:  # the step raised on the host
            return Outcome(error=e)
        (host_s,) = _HOST_TIME.unpack_from(raw, len(raw) - _HOST_TIME.size)
        t = self._timing
        t.last_bytes = (step.request_bytes, len(raw))
        if step.alone:
            rtt = time.perf_counter() - step.sent
            t.alone += 1
            t.rtt_s += rtt
            t.overhead_s += rtt - host_s
        try:
            return Outcome(value=_output_decoder.decode(memoryview(raw)[: -_HOST_TIME.size]))
        except BaseException as e:
            return Outcome(error=e)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every shipped step's outcome is posted; False when ``timeout``
        seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._steps:
                    return True
                future = self._steps[0].future
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, _ = futures.wait([future], timeout=left)
            if not done:
                return False
            self._post_ready()

    # -- lifecycle --------------------------------------------------------------------------

    def reset_requests(self) -> None:
        """A new core starts: the host forgets every request; a broken host is replaced.
        With ``step_timeout_s``, a host whose shipped steps do not answer within it (hung:
        the step timeout is what restarted the core) is killed and replaced too, so a hung
        actor never holds the worker thread as a hung local step would."""
        timeout = self.host.config.step_timeout_s
        if not self.flush(timeout):
            self.host.abandon(f"its steps did not answer within {timeout}s")
            self.flush()  # the kill fails them at once
        if self.host.broken is None:
            # It answered every step: it may now reload its ranks (a dead rank 1), which
            # takes a model load, not a step.
            try:
                self.host.call("reset_requests", timeout=LOAD_TIMEOUT_S)
            except RemoteWorkerDied:
                pass  # replaced below
            except TimeoutError:
                self.host.abandon(f"reset_requests did not answer within {LOAD_TIMEOUT_S}s")
        if self.host.broken is not None:
            self.host.replace()

    def shutdown(self) -> None:
        self.flush()
        if self.host.broken is None:
            with contextlib.suppress(Exception):  # stopping anyway
                self.host.call("shutdown")  # tensor parallel: STOP to ranks 1..N-1
        self.host.stop()

    # -- control (forwarded to the host's Worker, between steps) -----------------------------

    def collective_rpc_group(
        self,
        method: str | Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> list[Any]:
        """One result per rank of this replica, rank 0 (the host) first."""
        self.flush()
        results: list[Any] = self.host.call("collective_rpc_group", method, args, kwargs)
        if method == "statistics" and results:  # rank 0's seen from here: add the driver's
            results[0] = self._with_driver(results[0])
        return results

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        self.flush()
        return self.host.call("collective_rpc", method, args, kwargs)

    def sleep_group(self, level: int = 1) -> None:
        self.flush()
        self.host.call("sleep_group", level)

    def wake_up_group(self) -> None:
        self.flush()
        self.host.call("wake_up_group")

    def sleep(self, level: int = 1) -> None:
        self.sleep_group(level)

    def wake_up(self) -> None:
        self.wake_up_group()

    def get_model(self) -> Any:
        return self.collective_rpc("get_model")

    def load_weights(self, weights: Any) -> list[str]:
        result: list[str] = self.collective_rpc("load_weights", (weights,))
        return result

    def start_profile(self) -> None:
        """The host's torch profiler (its trace is written on its node, under
        ``profiler_dir``)."""
        self.host.call("start_profile")

    def stop_profile(self) -> str:
        self.flush()
        return str(self.host.call("stop_profile"))

    def statistics(self) -> WorkerStatistics:
        return self._with_driver(self.host.call("statistics"))

    def _with_driver(self, stats: WorkerStatistics) -> WorkerStatistics:
        """The host's figures, with this driver's steps in flight and round trips."""
        with self._lock:
            pending, t = len(self._steps), self._timing
            alone = max(1, t.alone)
            remote = RemoteWorkerStatistics(
                placement_group=self.host.pg_name,
                node_ip=self.host.placement.node_ip,
                pid=self.host.placement.pid,
                generation=self.host.generation,
                broken=self.host.broken,
                steps=t.steps,
                max_in_flight=t.max_in_flight,
                steps_alone=t.alone,
                mean_round_trip_ms=1000 * t.rtt_s / alone,
                mean_overhead_ms=1000 * t.overhead_s / alone,
                last_request_bytes=t.last_bytes[0],
                last_reply_bytes=t.last_bytes[1],
            )
        return msgspec.structs.replace(
            stats, pending_steps=pending, max_pending_seen=t.max_in_flight, remote=remote
        )
