"""A replica's whole worker in a Ray actor: rank 0 remote, the worker thread its driver.

Theory of operation
-------------------
With ``distributed_executor_backend="ray"`` (or ``data_parallel_backend="ray"``) no rank
runs in the engine process. Each data-parallel replica reserves one placement group with a
bundle per rank (``{"CPU": 1}``, ``PACK``); bundle 0 holds a
:class:`~actorllm.worker.ray_host.WorkerHost` actor,
which builds the replica's :class:`~actorllm.worker.worker.Worker` exactly as the worker
thread does under ``mp`` (model runner, batch state, sampler, async-scheduling
placeholders, profiler and, for tensor parallel, the rank group, whose ranks 1..N-1 it
starts in bundles 1..N-1 of the same placement group).

The replica's worker thread keeps a :class:`RemoteWorker`: a
:class:`~actorllm.worker.worker.ReplicaWorker` with no runner of its own. Each step it
msgpack-encodes the ``SchedulerOutput`` (a msgspec struct from ``core/``; a grammar
bitmask travels as raw int32 bytes), sends it with one actor call
(``WorkerHost.execute(bytes)``) and later gets the ``ModelRunnerOutput`` back as bytes: no
pickle per step (Ray passes ``bytes`` through its object store as they are). The call
returns a Ray object ref at once and the reply is posted to the executor from its future's
callback, in step order: the thread never waits for a step, so under async scheduling step
N+1 is shipped while step N is still on the remote worker (Ray runs one caller's calls on
an actor in order), which hides the round trip behind the step.
:class:`~actorllm.worker.ray_host.RemoteHost` places, builds, probes and replaces
the actor.

Failure: an actor that dies (``ray.kill``, its process or node lost) fails every pending
``ray.get`` with ``RayActorError``: the step's outcome is that error, the executor crashes
as after any failed step (one that dies between steps is seen by the host's liveness
probe and crashes it too), the core restarts, and its first job,
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
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from typing import Any

import msgspec

from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.scheduler.kv_connector import KVConnectorMetadata
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.worker.ray_host import (
    LOAD_TIMEOUT_S,
    BuildWorker,
    BuiltInfo,
    RemoteHost,
    RemoteSpec,
    RemoteWorkerDied,
    decode_reply,
    encode_step,
)
from actorllm.worker.step_pipeline import Post
from actorllm.worker.worker import ReplicaWorker, WorkerStatistics
from actorllm.worker.worker_thread import Outcome


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


class _RemoteProfiling:
    """The host's profiler as the driver last set it (its trace is on the host's node)."""

    def __init__(self) -> None:
        self.running = False


class RemoteWorker:
    """The driver: a :class:`~actorllm.worker.worker.ReplicaWorker` on the replica's worker
    thread whose runner, request state and control all live in the replica's
    :class:`WorkerHost` actor; the executor uses it exactly as a local Worker.

    Steps never block the thread: each is shipped at once and its reply posted (to the
    executor, in step order) from the callback of its Ray future. Control calls wait for
    every shipped step's reply first, as a local Worker flushes its pipeline."""

    def __init__(self, host: RemoteHost) -> None:
        self.host = host
        self.profiler = _RemoteProfiling()
        self._lock = threading.Lock()
        # Steps shipped to the host whose reply is not posted yet, in send order.
        self._shipped: deque[_RemoteStep] = deque()
        self._timing = _Timing()

    @classmethod
    def start(cls, spec: RemoteSpec, build: BuildWorker) -> tuple[RemoteWorker, BuiltInfo]:
        """Place and build replica ``spec.replica``'s worker (on its worker thread);
        returns the driver and the engine's ModelInfo."""
        host = RemoteHost(spec, build)
        info = host.start()
        return cls(host), info

    def watched(self) -> RemoteHost:
        """The executor crashes when the host dies, even between steps."""
        return self.host

    # -- steps ------------------------------------------------------------------------------

    def execute_step(
        self, so: SchedulerOutput, meta: KVConnectorMetadata | None, post: Post
    ) -> None:
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
            step = _RemoteStep(ref, post, alone=not self._shipped, request_bytes=len(payload))
            self._shipped.append(step)
            t.steps += 1
            t.max_in_flight = max(t.max_in_flight, len(self._shipped))
        step.future.add_done_callback(lambda _: self._post_ready())

    def _post_ready(self) -> None:
        """Post every finished step at the head of the queue, in order (any thread)."""
        with self._lock:
            while self._shipped and self._shipped[0].future.done():
                step = self._shipped.popleft()
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
        rtt = time.perf_counter() - step.sent
        try:
            output, host_s = decode_reply(raw)
        except BaseException as e:
            return Outcome(error=e)
        t = self._timing
        t.last_bytes = (step.request_bytes, len(raw))
        if step.alone:
            t.alone += 1
            t.rtt_s += rtt
            t.overhead_s += rtt - host_s
        return Outcome(value=output)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every shipped step's outcome is posted; False when ``timeout``
        seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._shipped:
                    return True
                future = self._shipped[0].future
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
        timeout = self.host.spec.step_timeout_s
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

    def sleep_group(self, level: int = 1, tags: Sequence[str] | None = None) -> None:
        self.flush()
        self.host.call("sleep_group", level, None if tags is None else list(tags))

    def wake_up_group(self, tags: Sequence[str] | None = None) -> None:
        self.flush()
        self.host.call("wake_up_group", tags)

    def start_profile(self) -> None:
        """The host's torch profiler (its trace is written on its node, under
        ``profiler_dir``)."""
        self.host.call("start_profile")
        self.profiler.running = True

    def stop_profile(self) -> str:
        self.flush()
        trace = str(self.host.call("stop_profile"))
        self.profiler.running = False
        return trace

    def statistics(self) -> WorkerStatistics:
        return self._with_driver(self.host.call("statistics"))

    def _with_driver(self, stats: WorkerStatistics) -> WorkerStatistics:
        """The host's figures, with this driver's steps in flight and round trips."""
        with self._lock:
            pending, t = len(self._shipped), self._timing
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


def _conforms(worker: RemoteWorker) -> ReplicaWorker:
    return worker  # mypy: RemoteWorker satisfies the ReplicaWorker protocol
