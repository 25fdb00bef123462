"""The control plane of ``AsyncEngine``: sleep, wake-up (by tags), pause and resume,
prefix cache, KV connector, ``collective_rpc``, profiling, statistics.

Each call is a typed ask straight to the actor that owns the state (a replica's scheduler
or executor), sent to every live data-parallel replica at once; results come back in
replica order. How replicas' answers combine: ``is_sleeping`` is true while any replica
sleeps (a sleep or wake-up in progress included); ``wake_up`` is fully awake when every
replica is; ``is_paused`` is true while any replica is paused; ``reset_prefix_cache`` is true only
when every replica reset its cache; ``collective_rpc`` returns every replica's ranks,
replica 0's first. The torch profiler is one per process: ``start_profile`` runs it on the
first live replica's worker thread and it records every thread (all replicas' workers and
the event loop) into one trace; with the Ray backend each replica's worker is a process of
its own, so each runs its own profiler (one trace per replica, on its node).

:class:`ControlPlane` is a component of ``AsyncEngine`` (which delegates these methods to
it): it holds the engine's parts and the shared :class:`EngineStatus`, handed to it at
construction. What it reports about a replica's scheduler comes in the scheduler actor's
``GetStats`` answer; it reads no actor's state directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, final

import anyio

from actorllm.actors import ActorCrashed, ActorRef, Reply
from actorllm.engine.actors.assembly import EngineParts, Replica
from actorllm.engine.actors.messages import (
    Abort,
    AwaitPaused,
    CollectiveRPC,
    ExecutorMsg,
    FlushOutputs,
    GetStats,
    IsKVConnectorEnabled,
    IsPaused,
    IsSleeping,
    PauseGeneration,
    PinLoRAs,
    ReleaseKVCache,
    ReplicaSchedulerStats,
    ResetPrefixCache,
    ResumeGeneration,
    SchedulerMsg,
    SetKVConnector,
    Sleep,
    StartProfile,
    StopProfile,
    WakeUp,
)
from actorllm.engine.api.engine_status import EngineStatus, ask_each, live_replicas
from actorllm.engine.api.stats import EngineDebugState, EngineStats, ReplicaStats
from actorllm.engine.errors import InvalidRequestError
from actorllm.engine.recovery.pause import PauseMode, check_mode
from actorllm.worker.sleep_tags import check_tags

T = TypeVar("T")
M = TypeVar("M")

ACTORS = ("router", "input_processor", "scheduler", "executor", "output_processor")


@final
class ControlPlane:
    """The control side of one ``AsyncEngine``."""

    def __init__(self, parts: EngineParts, status: EngineStatus) -> None:
        self._parts = parts
        self._ctx = parts.ctx  # the first replica's: the shared ledger and refs
        self._status = status  # shared with the request API; read before every call
        # A level-0 sleep holds the pause (vLLM's: scheduling stopped, requests accepted):
        # the next wake-up that leaves nothing asleep, or a resume, ends it.
        self._scheduling_asleep = False

    def live(self) -> list[Replica]:
        """The replicas that still take work, in replica order."""
        return live_replicas(self._parts)

    async def _ask(
        self,
        ref: ActorRef[M],
        make: Callable[[Reply[T]], M],
        timeout: float | None = None,  # noqa: ASYNC109 - a documented per-call deadline
    ) -> T:
        """Ask the actor that owns the state a control call touches."""
        self._status.check_open()
        return await ref.ask(make, timeout=timeout)

    async def _ask_all(
        self,
        actor: str,
        make: Callable[[Reply[T]], Any],
        timeout: float | None = None,  # noqa: ASYNC109 - a documented per-call deadline
    ) -> list[T]:
        """Ask every live replica's ``actor`` ("scheduler" or "executor") at once; the
        answers in replica order."""
        return await ask_each(
            self.live(), lambda replica: self._ask(_ref(replica, actor), make, timeout)
        )

    async def sleep(self, level: int = 1, mode: PauseMode = "keep") -> None:
        """Free the KV cache (level 1: keep weights in host memory; level 2: drop them) of
        every replica; new requests wait for ``wake_up``. Level 0 frees nothing: it stops
        scheduling (:meth:`pause_generation` in ``mode``, the prefix cache kept) while
        requests are still accepted, until ``wake_up`` (``["scheduling"]`` or any call
        that leaves nothing asleep), as vLLM's. ``mode`` says what happens to the
        requests in flight, as vLLM's ``sleep(level, mode)`` (its default is ``"abort"``;
        the vLLM front doors pass it): ``"keep"`` (here the default) recomputes them after
        ``wake_up`` (level 0: they stay frozen where they stand), ``"abort"`` ends them
        (``finish_reason="abort"``), ``"wait"`` lets those that have started finish first
        (see :meth:`pause_generation`)."""
        if level not in (0, 1, 2):
            raise InvalidRequestError(f"sleep level must be 0, 1 or 2, got {level}.", param="level")
        mode = check_mode(mode)
        if level == 0:
            await self.pause_generation(mode=mode, clear_cache=False)
            self._scheduling_asleep = True
            return
        # A pause of the caller's own stays on; one taken here only for the sleep is lifted
        # once asleep (what arrives then waits for wake_up anyway).
        lift = mode != "keep" and not await self.is_paused()
        if mode != "keep":
            await self.pause_generation(mode=mode)
        try:
            await self._ask_all("scheduler", lambda r: Sleep(level=level, reply=r))
        finally:
            if lift:
                await self.resume_generation()

    async def wake_up(self, tags: list[str] | None = None) -> bool:
        """Restore what ``tags`` names on every replica: ``"weights"``, ``"kv_cache"``
        (None: both), and ``"scheduling"`` (a level-0 sleep; vLLM's tags). Returns whether
        the engine is fully awake; until it is, new requests wait and nothing is
        scheduled. As vLLM's, a level-0 sleep ends with any wake-up that leaves nothing
        else asleep. Waking the weights first lets a trainer update them
        (``collective_rpc``, ``load_weights``) before the KV cache takes its memory back."""
        if tags is not None and not isinstance(tags, str):
            tags = [t for t in tags if t != "scheduling"]
        if tags is None or isinstance(tags, str) or tags:
            try:
                checked = check_tags(tags)
            except ValueError as e:
                raise InvalidRequestError(str(e), param="tags") from None
            awake: list[bool] = await self._ask_all(
                "scheduler", lambda r: WakeUp(tags=checked, reply=r)
            )
            fully_awake = all(awake)
        else:
            fully_awake = not await self._replicas_sleeping()
        if fully_awake and self._scheduling_asleep:
            await self.resume_generation()
        return fully_awake

    async def is_sleeping(self) -> bool:
        """Whether the engine sleeps at any level (or a replica is going to sleep)."""
        return self._scheduling_asleep or await self._replicas_sleeping()

    async def _replicas_sleeping(self) -> bool:
        flags: list[bool] = await self._ask_all("scheduler", lambda r: IsSleeping(reply=r))
        return any(flags)

    async def release_kv_cache_memory(self) -> None:
        """vLLM's: free every replica's KV cache, the weights staying where they are, until
        ``wake_up(["kv_cache"])`` (or a wake-up of everything). Only after a completed
        pause (``sleep(level=0)`` or :meth:`pause_generation`) with nothing asleep; else
        ``InvalidRequestError`` saying which. Requests kept by the pause, and those queued
        meanwhile, are recomputed once the cache is back and scheduling resumes."""
        await self._ask_all("scheduler", lambda r: ReleaseKVCache(reply=r))

    async def pause_generation(
        self, *, mode: PauseMode = "abort", clear_cache: bool = True
    ) -> None:
        """Pause generation (to update the weights), vLLM's modes (engine/recovery/pause.py):

        * ``"abort"`` (default): every open request ends now, its caller's last output
          with ``finish_reason="abort"``;
        * ``"wait"``: the requests that have started run to their end; queued ones wait;
        * ``"keep"``: running requests are frozen with their KV cache and go on at
          :meth:`resume_generation` exactly where they stood.

        Requests that arrive while paused queue (nothing fails) and run after resume.
        Returns once the pause is complete: no step in flight, nothing running (under
        ``keep``: nothing scheduled). ``clear_cache`` then resets the prefix cache, whose
        blocks hold KV of the old weights (under ``keep`` only when nothing is frozen).
        A scheduler that crashes meanwhile comes back still paused; the call still returns
        once the pause is complete. A bad ``mode`` raises ``InvalidRequestError``."""
        mode = check_mode(mode)
        ledger = self._ctx.ledger
        aborted = [entry.request_id for entry in ledger] if mode == "abort" else []
        await self._ask_all("scheduler", lambda r: PauseGeneration(mode=mode, reply=r))
        for rid in aborted:  # those arriving from here on are parked, not aborted
            await self._ctx.refs.router.send(Abort(request_id=rid))
        for attempt in range(3):
            try:
                await self._ask_all(
                    "scheduler", lambda r: AwaitPaused(clear_cache=bool(clear_cache), reply=r)
                )
                break
            except ActorCrashed:  # the new incarnation is still paused: ask it again
                if attempt == 2:
                    raise
        # The last in-flight tokens, and the aborted requests' last outputs (finish_reason
        # "abort"), are in their callers' streams before this returns.
        await self._ask(self._ctx.refs.output_processor, lambda r: FlushOutputs(reply=r))
        with anyio.move_on_after(5.0):
            while any(rid in ledger for rid in aborted) and not self._status.is_dead:  # noqa: ASYNC110
                await anyio.sleep(0.005)

    async def resume_generation(self) -> None:
        """Resume after :meth:`pause_generation` (or a level-0 sleep, which it ends):
        requests that arrived while paused run (in arrival order), frozen ones go on. A
        pause still in progress ends with an error (it never completed)."""
        self._scheduling_asleep = False
        await self._ask_all("scheduler", lambda r: ResumeGeneration(reply=r))

    async def is_paused(self) -> bool:
        """Whether generation is paused (on any replica)."""
        flags: list[bool] = await self._ask_all("scheduler", lambda r: IsPaused(reply=r))
        return any(flags)

    async def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        """Drop every cached block of every replica; False when some replica refused
        (a block of it is in use).

        vLLM's two options are refused when on, naming them, rather than dropped: the
        caller asked for something this call would not do. ``reset_running_requests``
        (vLLM preempts every running request so that the reset cannot fail) has no
        counterpart here: requests hold their blocks until they end or a pause frees them
        (``pause_generation`` then ``reset_prefix_cache``). ``reset_connector`` would also
        empty the KV connector's cache (here the offload tier), which is not built: its
        copies stay until the tier evicts them."""
        if reset_running_requests:
            raise InvalidRequestError(
                "reset_prefix_cache(reset_running_requests=True) is not supported: running "
                "requests keep their blocks; pause generation first (pause_generation, "
                "POST /pause), then reset the prefix cache.",
                param="reset_running_requests",
            )
        if reset_connector:
            raise InvalidRequestError(
                "reset_prefix_cache(reset_connector=True) is not supported: the KV "
                "connector's offload tier is not emptied on demand.",
                param="reset_connector",
            )
        done: list[bool] = await self._ask_all("scheduler", lambda r: ResetPrefixCache(reply=r))
        return all(done)

    async def set_kv_connector_enabled(self, enabled: bool) -> None:
        await self._ask_all("scheduler", lambda r: SetKVConnector(enabled=bool(enabled), reply=r))

    async def is_kv_connector_enabled(self) -> bool:
        flags: list[bool] = await self._ask_all(
            "scheduler", lambda r: IsKVConnectorEnabled(reply=r)
        )
        return all(flags)

    async def pin_loras(self, names: frozenset[str]) -> None:
        """Tell every replica's scheduler which LoRA adapters are pinned (all of them): each
        step counts them as holding their slots."""
        await self._ask_all("scheduler", lambda r: PinLoRAs(names=sorted(names), reply=r))

    async def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,  # noqa: ASYNC109 - vLLM's signature
        args: tuple = (),
        kwargs: dict | None = None,
    ) -> list[Any]:
        """Run ``method`` on every worker (rank) of every replica between steps; one result
        per rank, replica 0's ranks first.

        ``method`` is the name of a :class:`~actorllm.worker.worker.Worker` method
        (``"load_weights"``, ``"get_model"``, ...) or a callable called as
        ``method(worker, *args, **kwargs)``; it runs on the worker threads, after the steps
        already launched and before the next one. ``timeout`` (seconds) raises
        ``TimeoutError``: the engine stays healthy, and the method still runs to its end on
        the worker thread (its result is dropped). An exception raised by the method is
        raised here; no actor crashes. After changing weights, call
        :meth:`reset_prefix_cache`: cached prefixes hold KV computed with the old weights.
        """
        if not (callable(method) or isinstance(method, str)):
            raise InvalidRequestError(
                "method must be a worker method name or a callable.", param="method"
            )
        per_replica: list[list[Any]] = await self._ask_all(
            "executor",
            lambda r: CollectiveRPC(
                method=method, args=tuple(args), kwargs=dict(kwargs or {}), reply=r
            ),
            timeout=timeout,
        )
        return [result for ranks in per_replica for result in ranks]

    async def compute_weight_checksums(self) -> list[dict[str, str]]:
        """vLLM's: one ``{"dp<replica>:pp<stage>:pcp0:tp<rank>:<parameter>": SHA-256}`` per
        worker rank, replica 0's first (``Worker.compute_weight_checksums``): a trainer
        compares them before and after an update (``POST /weight_checker``)."""
        per_replica: list[list[dict[str, str]]] = await self._ask_all(
            "executor",
            lambda r: CollectiveRPC(method="compute_weight_checksums", args=(), kwargs={}, reply=r),
        )
        return [
            {f"dp{replica.index}:{key}": digest for key, digest in rank.items()}
            for replica, ranks in zip(self.live(), per_replica, strict=True)
            for rank in ranks
        ]

    async def start_profile(self) -> None:
        """Start the torch profiler (CPU, and CUDA on a GPU) over every thread: all
        replicas' workers and the event loop. Raises ``ProfilerError`` when
        ``EngineConfig.profiler_dir`` is None or a profile is already running."""
        if self._remote_workers():
            await self._ask_all("executor", lambda r: StartProfile(reply=r))
            return
        await self._ask(self._profiled().ctx.refs.executor, lambda r: StartProfile(reply=r))

    async def stop_profile(self) -> None:
        """Stop the profiler and write its Chrome trace under ``profiler_dir``. Raises
        ``ProfilerError`` when no profile is running."""
        if self._remote_workers():
            await self._ask_all("executor", lambda r: StopProfile(reply=r))
            return
        await self._ask(self._profiled().ctx.refs.executor, lambda r: StopProfile(reply=r))

    def _remote_workers(self) -> bool:
        """Ray backend: every replica's worker is a process of its own (a Ray actor), with
        its own profiler: each is started and stopped, and writes its own trace on its
        node."""
        return self._parts.config.distributed_executor_backend == "ray"

    def _profiled(self) -> Replica:
        """The replica whose worker thread runs the process's one torch profiler."""
        running = [r for r in self.live() if r.worker.profiler.running]
        return running[0] if running else self.live()[0]

    async def get_stats(self) -> EngineStats:
        """Figures for metrics: the engine's totals, and each replica's (``engines``)."""
        replicas = self.live()
        sched: list[ReplicaSchedulerStats] = await self._ask_all(
            "scheduler", lambda r: GetStats(reply=r)
        )
        engines = [
            _replica_stats(replica, s, self._actor_restarts(replica))
            for replica, s in zip(replicas, sched, strict=True)
        ]
        return EngineStats(
            num_running_reqs=sum(e.num_running_reqs for e in engines),
            num_waiting_reqs=sum(e.num_waiting_reqs for e in engines),
            num_deferred_reqs=sum(e.num_deferred_reqs for e in engines),
            kv_cache_usage=sum(e.kv_cache_usage for e in engines) / len(engines),
            prefix_cache_queries=sum(e.prefix_cache_queries for e in engines),
            prefix_cache_hits=sum(e.prefix_cache_hits for e in engines),
            connector_queries=sum(s.core.connector_queries for s in sched),
            connector_hits=sum(s.core.connector_hits for s in sched),
            num_preemptions=sum(e.num_preemptions for e in engines),
            num_open_requests=len(self._ctx.ledger),
            steps_done=sum(e.steps_done for e in engines),
            iterations_done=sum(e.iterations_done for e in engines),
            # Step sizes in order, for one replica (the cursor contract); else per replica.
            iteration_tokens=engines[0].iteration_tokens if len(engines) == 1 else [],
            is_sleeping=any(e.is_sleeping for e in engines),
            kv_connector_enabled=all(s.kv_connector_enabled for s in sched),
            actor_restarts=self.actor_stat("restarts"),
            mailbox_depth=self.actor_stat("depth"),
            num_gpu_blocks=sum(e.num_gpu_blocks for e in engines),
            stream_outputs_merged=self._ctx.ledger.merged_outputs(),
            requests=self._parts.request_stats.snapshot(),
            engines=engines,
            spec_decode_num_drafts=sum(e.spec_decode_num_drafts for e in engines),
            spec_decode_num_draft_tokens=sum(e.spec_decode_num_draft_tokens for e in engines),
            spec_decode_num_accepted_tokens=sum(e.spec_decode_num_accepted_tokens for e in engines),
            spec_decode_num_accepted_tokens_per_pos=_sum_positions(
                [e.spec_decode_num_accepted_tokens_per_pos for e in engines]
            ),
            running_lora_adapters=_sum_counts([e.running_lora_adapters for e in engines]),
            waiting_lora_adapters=_sum_counts([e.waiting_lora_adapters for e in engines]),
        )

    def actor_stat(self, key: str) -> dict[str, int]:
        """{actor: restarts} (key "restarts") or {actor: queued messages} (key "depth");
        a replica's scheduler and executor summed over the live replicas."""
        out = dict.fromkeys(ACTORS, 0)
        for replica in self.live():
            for name, ref in replica.ctx.refs.started().items():
                if replica.index and name not in ("scheduler", "executor"):
                    continue  # shared actors: counted once
                stats = ref.statistics()
                out[name] += int(stats.mailbox.depth if key == "depth" else stats.restarts)
        return out

    def _actor_restarts(self, replica: Replica) -> int:
        refs = replica.ctx.refs.started()
        return sum(int(refs[n].statistics().restarts) for n in ("scheduler", "executor"))

    def statistics(self) -> EngineDebugState:
        """Internal state for debugging: ledger, blame, worker thread, each actor (with its
        own report: the scheduler's steps in flight, probation and sleep state...), the
        router's routing figures and the supervisor tree. Replica ``i > 0``'s scheduler
        and executor appear as ``scheduler<i>`` / ``executor<i>``."""
        actors = {name: ref.statistics() for name, ref in self._ctx.refs.started().items()}
        for replica in self._parts.replicas[1:]:
            for name in ("scheduler", "executor"):
                actors[f"{name}{replica.index}"] = replica.ctx.refs.started()[name].statistics()
        return EngineDebugState(
            ledger=self._ctx.ledger.statistics(),
            blame=self._ctx.blame.statistics(),
            worker_thread=self._parts.replicas[0].thread.statistics(),
            actors=actors,
            supervisor=None if (sup := self._status.supervisor) is None else sup.statistics(),
            routing=self._parts.routing.statistics(),
        )


def _ref(replica: Replica, actor: str) -> ActorRef[Any]:
    refs = replica.ctx.refs
    ref: ActorRef[SchedulerMsg] | ActorRef[ExecutorMsg] = (
        refs.scheduler if actor == "scheduler" else refs.executor
    )
    return ref


def _replica_stats(replica: Replica, sched: ReplicaSchedulerStats, restarts: int) -> ReplicaStats:
    core = sched.core
    return ReplicaStats(
        engine=replica.index,
        num_running_reqs=core.num_running_reqs,
        num_waiting_reqs=core.num_waiting_reqs,
        num_deferred_reqs=core.num_deferred_reqs,
        kv_cache_usage=core.kv_cache_usage,
        prefix_cache_queries=core.prefix_cache_queries,
        prefix_cache_hits=core.prefix_cache_hits,
        num_preemptions=core.num_preemptions,
        num_open_requests=replica.ctx.ledger.load(replica.index),
        steps_done=sched.steps_done,
        iterations_done=sched.iterations_done,
        iteration_tokens=sched.iteration_tokens,
        is_sleeping=sched.is_sleeping,
        num_gpu_blocks=replica.ctx.model.num_blocks - 1,  # the null block holds no KV
        actor_restarts=restarts,
        spec_decode_num_drafts=core.spec_num_drafts,
        spec_decode_num_draft_tokens=core.spec_num_draft_tokens,
        spec_decode_num_accepted_tokens=core.spec_num_accepted_tokens,
        spec_decode_num_accepted_tokens_per_pos=list(core.spec_accepted_per_pos),
        running_lora_adapters=dict(core.running_lora_adapters),
        waiting_lora_adapters=dict(core.waiting_lora_adapters),
    )


def _sum_counts(rows: list[dict[str, int]]) -> dict[str, int]:
    """{name: count} of several replicas, added name by name (first seen first)."""
    out: dict[str, int] = {}
    for row in rows:
        for name, n in row.items():
            out[name] = out.get(name, 0) + n
    return out


def _sum_positions(rows: list[list[int]]) -> list[int]:
    """Per-position counts of several replicas, added position by position."""
    out = [0] * max((len(r) for r in rows), default=0)
    for r in rows:
        for i, n in enumerate(r):
            out[i] += n
    return out
