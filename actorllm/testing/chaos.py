"""``chaos_soak``: crash an engine's actors over and over while requests stream, and check
that no request is lost, changed or hung (docs/testing.md, "Chaos soak").

Theory of operation:

1. **Reference.** Each workload (a list of :class:`ChaosRequest`) runs once on a fresh
   engine with no fault, recording every request's final samples (a pooling request's
   pooled result), its latency, and how many messages each actor took (counting probes
   that never fire).
2. **Soak.** Batch after batch on one engine, each batch runs one workload concurrently
   (batch ``b`` uses ``workloads[b % len(workloads)]``, request ids ``b{b}-{name}``).
   At the start of a batch the :class:`~actorllm.testing.chaos_plan.ChaosPlanner`'s
   points are armed with ``inject_fault(engine, actor, when=trigger)``. Every request is
   classified against the reference (:mod:`actorllm.testing.chaos_report`); after the
   batch ``check_invariants`` runs. The soak ends once every planned crash has fired (or
   ``max_batches`` ran; unfired points are reported).
3. An engine that dies (``EngineDeadError``: restart intensity exceeded) counts in
   ``engine_deaths``; a fresh one is opened and the soak goes on.

    async with anyio.create_task_group():
        report = await chaos_soak(lambda: open_test_engine(max_restarts=10**6),
                                  [default_workload(16)], crashes=20, seed=1)
    assert report.ok()
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import anyio
import sniffio

from actorllm.core.pooling_params import PoolingParams
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.api.async_engine import AsyncEngine
from actorllm.engine.errors import EngineDeadError
from actorllm.testing.chaos_plan import ACTOR_NAMES, ChaosPlanner, CrashPoint, Trigger
from actorllm.testing.chaos_report import (
    Accumulator,
    ChaosReport,
    OutputAccumulator,
    PooledAccumulator,
    RequestRecord,
)
from actorllm.testing.engine_harness import check_invariants, inject_fault

EngineOpener = Callable[[], AbstractAsyncContextManager[AsyncEngine]]


@dataclass(frozen=True)
class ChaosRequest:
    """One request of a workload; ``name`` is unique within its workload. With
    ``PoolingParams`` it is a pooling request, sent through ``AsyncEngine.encode``."""

    name: str
    prompt: Any  # text, or token ids as AsyncEngine.generate takes them
    params: SamplingParams | PoolingParams
    lora_request: Any = None  # a LoRARequest (None: the base model)


def default_workload(n: int = 64, *, seed: int = 0, max_tokens: int = 16) -> list[ChaosRequest]:
    """``n`` streaming requests of mixed lengths, half greedy, half seeded random."""
    out = []
    for i in range(n):
        k = i + seed * n
        params = SamplingParams(
            max_tokens=max(1, max_tokens - 6 + k % 7),
            temperature=0.0 if k % 2 else 0.8,
            seed=k,
        )
        out.append(ChaosRequest(f"r{i}", f"request {k} says " + "hello " * (k % 5), params))
    return out


@dataclass
class _Reference:
    signatures: dict[str, object]  # {request name: final samples, or pooled result}
    traffic: dict[str, int]  # {actor: messages taken during the workload}


async def chaos_soak(
    open_engine: EngineOpener,
    workloads: Sequence[Sequence[ChaosRequest]],
    *,
    crashes: int = 100,
    actors: Sequence[str] = ACTOR_NAMES,
    seed: int = 0,
    crashes_per_batch: int = 1,
    hangs: float = 0.0,
    worker_hang_s: float = 5.0,
    points: Sequence[CrashPoint] | None = None,
    request_timeout_s: float = 60.0,
    max_batches: int | None = None,
    check: bool = True,
    progress: Callable[[ChaosReport], None] | None = None,
) -> ChaosReport:
    """Soak the engines ``open_engine()`` opens under ``crashes`` crashes; see the module
    docstring. ``points`` scripts the crashes (then ``crashes``, ``actors`` and ``seed`` are
    unused). ``open_engine`` must give a fault-free engine each call, with a restart
    intensity that tolerates the crash rate (e.g. ``max_restarts`` >= ``crashes``).
    ``progress`` is called after every batch. Runs on the current anyio backend.

    ``hangs`` (0..1) makes that fraction of the random points hang instead of raising: the
    actor holds its message for good, or the model step stalls for ``worker_hang_s``; the
    engine must then be configured with ``actor_message_deadline_s`` and a
    ``step_timeout_s`` below ``worker_hang_s``, or those requests end "hung".
    """
    if not workloads or any(not w for w in workloads):
        raise ValueError("chaos_soak needs at least one non-empty workload")
    for w in workloads:
        names = [r.name for r in w]
        if len(set(names)) != len(names):
            raise ValueError(f"request names must be unique within a workload: {names}")
    planner = (
        ChaosPlanner.script(points)
        if points is not None
        else ChaosPlanner.random(crashes, actors, seed, crashes_per_batch, hangs)
    )
    report = ChaosReport(backend=sniffio.current_async_library())
    report.crashes_planned = planner.crashes
    started = time.perf_counter()
    refs = [await _reference(open_engine, w, request_timeout_s, report) for w in workloads]
    limit = max_batches if max_batches is not None else 4 * planner.crashes + 8 * len(workloads)
    triggers: list[Trigger] = []
    soak = _Soak(planner, workloads, refs, triggers, report, request_timeout_s, check, progress)
    soak.worker_hang_s = worker_hang_s
    while not soak.done and report.batches < limit:
        try:
            async with open_engine() as engine:
                await soak.run(engine, limit)
        except EngineDeadError:
            report.engine_deaths += 1
            soak.rearm = True
    report.unfired = [f"{t.point.actor}@{t.point.at_message}" for t in triggers if not t.fired]
    report.wall_s = time.perf_counter() - started
    return report


class _Soak:
    """The batch loop over one engine at a time (see ``chaos_soak``)."""

    def __init__(
        self,
        planner: ChaosPlanner,
        workloads: Sequence[Sequence[ChaosRequest]],
        refs: list[_Reference],
        triggers: list[Trigger],
        report: ChaosReport,
        timeout: float,
        check: bool,
        progress: Callable[[ChaosReport], None] | None,
    ) -> None:
        self.planner = planner
        self.workloads = workloads
        self.refs = refs
        self.triggers = triggers  # every armed point, in arming order
        self.report = report
        self.timeout = timeout
        self.check = check
        self.progress = progress
        self.rearm = False  # a new engine: re-arm the points that have not fired yet
        # LoRA: the adapters each worker held at the last check (a new engine: none)
        self.resident: list[set[str]] | None = None
        self.worker_hang_s = 5.0  # how long a hanging model step stalls

    @property
    def done(self) -> bool:
        return self.planner.exhausted and all(t.fired for t in self.triggers)

    async def run(self, engine: AsyncEngine, limit: int) -> None:
        self.resident = None
        if self.rearm:
            for t in self.triggers:
                if not t.fired:
                    self._arm(engine, t)
            self.rearm = False
        restarts_at_start = (await engine.get_stats()).actor_restarts
        try:
            while not self.done and self.report.batches < limit:
                await self._batch(engine, self.report.batches)
        finally:
            with contextlib.suppress(Exception):  # a dying engine answers no stats
                now = (await engine.get_stats()).actor_restarts
                for actor, n in now.items():
                    self.report.restarts[actor] += n - restarts_at_start.get(actor, 0)

    async def _check_adapters(self, engine: AsyncEngine, batch: int) -> None:
        """Every adapter a worker held at the last check it still holds (a restarted
        worker gets the engine's adapters back)."""
        self.report.invariant_checks += 1
        try:
            now = [set(names) for names in await engine.collective_rpc("list_loras")]
        except Exception as exc:
            self.report.invariant_violations.append(f"batch {batch}: list_loras: {exc!r}")
            return
        if self.resident is not None:
            for rank, (before, after) in enumerate(zip(self.resident, now, strict=False)):
                if before - after:
                    self.report.invariant_violations.append(
                        f"batch {batch}: worker {rank} lost adapters {sorted(before - after)}"
                    )
        self.resident = now

    def _arm(self, engine: AsyncEngine, trigger: Trigger) -> None:
        point, stall = trigger.point, None
        if point.hang:
            stall = self.worker_hang_s if point.actor == "worker" else math.inf
        inject_fault(engine, point.actor, when=trigger, stall_s=stall)

    async def _batch(self, engine: AsyncEngine, batch: int) -> None:
        index = batch % len(self.workloads)
        workload, ref = self.workloads[index], self.refs[index]
        for t in self.triggers:
            t.batch = batch
        for point in self.planner.points_for(batch, ref.traffic):
            trigger = Trigger(point)
            self.triggers.append(trigger)
            self._arm(engine, trigger)
        records = await _run_workload(engine, workload, batch, self.timeout)
        for rec in records:
            self.report.record(_judge(rec, ref.signatures.get(rec.name)))
        self.report.batches += 1
        if self.check:
            await _check(engine, batch, self.report)
            if engine.config.enable_lora:
                await self._check_adapters(engine, batch)
        # Counted over every trigger: one may fire after its batch's requests ended (while
        # the engine settles), which belongs to no batch's window.
        fired = [t.point for t in self.triggers if t.fired]
        self.report.crashes_by_actor = Counter(p.actor for p in fired)
        self.report.hangs_by_actor = Counter(p.actor for p in fired if p.hang)
        if self.progress is not None:
            self.progress(self.report)


@dataclass
class _Run:
    """A request's raw result before judging: outputs folded, or what ended it."""

    name: str
    batch: int
    acc: Accumulator
    latency_s: float | None = None
    error: BaseException | None = None
    hung: bool = False


async def _run_workload(
    engine: AsyncEngine, workload: Sequence[ChaosRequest], batch: int, deadline_s: float
) -> list[_Run]:
    runs = [_Run(r.name, batch, _accumulator(r.params)) for r in workload]

    async def one(req: ChaosRequest, run: _Run) -> None:
        t0 = time.perf_counter()
        with anyio.move_on_after(deadline_s) as scope:
            try:
                async for out in _stream(engine, req, f"b{batch}-{req.name}"):
                    run.acc.add(out)
            except Exception as exc:
                run.error = exc
        run.hung = scope.cancelled_caught
        run.latency_s = time.perf_counter() - t0

    async with anyio.create_task_group() as tg:
        for req, run in zip(workload, runs, strict=True):
            tg.start_soon(one, req, run)
    return runs


def _accumulator(params: SamplingParams | PoolingParams) -> Accumulator:
    if isinstance(params, PoolingParams):
        return PooledAccumulator()
    return OutputAccumulator(params.output_kind)


def _stream(engine: AsyncEngine, req: ChaosRequest, request_id: str) -> AsyncIterator[Any]:
    """The request's outputs: ``encode``'s one pooled result, or ``generate``'s stream."""
    if isinstance(req.params, PoolingParams):
        return engine.encode(req.prompt, req.params, request_id=request_id)
    return engine.generate(
        req.prompt, req.params, request_id=request_id, lora_request=req.lora_request
    )


def _judge(run: _Run, expected: object) -> RequestRecord:
    def rec(outcome: str, detail: str | None = None, error: str | None = None) -> RequestRecord:
        return RequestRecord(run.batch, run.name, outcome, run.latency_s, detail, error)

    if run.hung:
        return rec("hung", "no end within the deadline")
    if run.error is not None:
        return rec("failed", f"{type(run.error).__name__}: {run.error}", type(run.error).__name__)
    if not run.acc.finished:
        return rec("lost", "the stream ended without a finished output or an error")
    if run.acc.signature() == expected:
        return rec("identical")
    return rec("changed", run.acc.change(expected))


async def _reference(
    open_engine: EngineOpener,
    workload: Sequence[ChaosRequest],
    deadline_s: float,
    report: ChaosReport,
) -> _Reference:
    """The workload on a fault-free engine: its outputs, latencies and per-actor traffic."""
    async with open_engine() as engine:
        counters = {a: Trigger(CrashPoint(a), fire=False) for a in ACTOR_NAMES}
        for actor, counter in counters.items():
            inject_fault(engine, actor, when=counter)
        runs = await _run_workload(engine, workload, -1, deadline_s)
    signatures: dict[str, object] = {}
    for run in runs:
        if run.hung or run.error is not None or not run.acc.finished:
            what = "hung" if run.hung else repr(run.error) if run.error else "lost"
            raise RuntimeError(f"the fault-free reference run of {run.name!r} failed: {what}")
        signatures[run.name] = run.acc.signature()
        assert run.latency_s is not None
        report.latency_reference.append(run.latency_s)
    return _Reference(signatures, {a: c.seen for a, c in counters.items()})


async def _check(engine: AsyncEngine, batch: int, report: ChaosReport) -> None:
    report.invariant_checks += 1
    try:
        await check_invariants(engine)
    except (AssertionError, TimeoutError) as exc:
        report.invariant_violations.append(f"batch {batch}: {type(exc).__name__}: {exc}")
