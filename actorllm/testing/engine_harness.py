"""The engine under test: a full actor engine on a ``ScriptedModel``, fault injection and
invariant checks. Public API of ``actorllm.testing`` (see docs/testing.md).

    async with open_test_engine(step_delay_s=0.001) as engine:
        inject_fault(engine, "scheduler", at_step=5)
        outs = [o async for o in engine.generate("hi", SamplingParams(max_tokens=8))]
        await check_invariants(engine)
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any

import anyio

from actorllm.actors import attach_probe
from actorllm.engine.actors.context import EngineContext
from actorllm.engine.actors.messages import ExecuteStep
from actorllm.engine.api.async_engine import ACTORS, AsyncEngine
from actorllm.testing.scripted_model import ScriptedModel
from actorllm.worker.worker import Worker


class InjectedFault(RuntimeError):
    """The exception ``inject_fault`` raises by default."""


@lru_cache(maxsize=1)
def demo_tokenizer() -> Any:
    """The shipped demo tokenizer, loaded once per process."""
    from transformers import AutoTokenizer

    from actorllm.demo import demo_tokenizer_path

    return AutoTokenizer.from_pretrained(str(demo_tokenizer_path()))


@asynccontextmanager
async def open_test_engine(
    *,
    model: ScriptedModel | None = None,
    step_delay_s: float = 0.0,
    eos_period: int | None = None,
    tokenizer: Any = None,
    num_blocks: int = 512,
    **config: Any,
) -> AsyncIterator[AsyncEngine]:
    """The whole actor engine on a ``ScriptedModel`` (no weights, deterministic tokens).

    ``config`` takes ``EngineConfig`` fields (block_size, max_num_seqs, async_scheduling, …).
    """
    tok = tokenizer if tokenizer is not None else demo_tokenizer()
    scripted = model or ScriptedModel(
        vocab_size=len(tok),
        eos_token_id=tok.eos_token_id,
        step_delay_s=step_delay_s,
        eos_period=eos_period,
    )
    config.setdefault("num_gpu_blocks_override", num_blocks)
    config.setdefault("max_model_len", min(scripted.model_config.max_model_len, 1024))
    config.setdefault("served_model_name", "scripted")
    runners = iter([scripted])  # the first replica's; each other replica gets a fresh one

    def factory(_cfg: Any) -> ScriptedModel:
        return next(runners, None) or scripted.fresh()

    async with AsyncEngine.open(None, runner_factory=factory, tokenizer=tok, **config) as engine:
        yield engine


def engine_context(engine: AsyncEngine, replica: int = 0) -> EngineContext:
    """A data-parallel replica's context (its Admission, its refs); the ledger is shared."""
    return engine._parts.replicas[replica].ctx


def scripted_model(engine: AsyncEngine, replica: int = 0) -> ScriptedModel:
    runner = _local_worker(engine, replica).model_runner
    assert isinstance(runner, ScriptedModel), "the engine does not run a ScriptedModel"
    return runner


def inject_fault(
    engine: AsyncEngine,
    actor: str,
    *,
    at_step: int | None = None,
    at_message: int | None = None,
    exc: BaseException | None = None,
    times: int = 1,
    when: Callable[[Any], bool] | None = None,
    stall_s: float | None = None,
    replica: int = 0,
) -> None:
    """Crash ``actor`` ("router", "input_processor", "scheduler", "executor",
    "output_processor", or "worker" for the model step itself) ``times`` times.

    It fires at the actor's first message once the engine has completed ``at_step`` steps,
    or at its ``at_message``-th message from now (1-based), or whenever ``when(msg)``
    holds; with none of them, at its next message. A "worker" fault fails a model step as
    the executor takes it (``when`` then sees the step's ``SchedulerOutput``), which crashes
    the executor with the step in flight, as a failing model step does. A step of an older
    epoch (launched ahead under async scheduling, still queued when the core restarted)
    never runs on the worker, so it never fails: the executor drops it.

    Faults use the actor runtime's probes (:func:`actorllm.actors.attach_probe`): the
    crash happens where a real one would, with the message in hand.

    ``stall_s`` stalls instead of crashing: the actor holds the message that long before
    handling it (``math.inf``: it hangs; ``actor_message_deadline_s`` restarts it), or,
    for "worker", the model step runs that much longer on the worker thread (finite only;
    ``step_timeout_s`` turns a long one into an executor crash).

    ``replica`` picks the data-parallel replica whose scheduler, executor or worker fails
    (and whose steps ``at_step`` counts); the shared actors ignore it.
    """
    if actor not in (*ACTORS, "worker"):
        raise ValueError(f"unknown actor {actor!r}; expected one of {(*ACTORS, 'worker')}")
    if stall_s is not None and not (stall_s >= 0 and (actor != "worker" or stall_s < math.inf)):
        raise ValueError(f"stall_s must be >= 0 (and finite for the worker), got {stall_s}")
    ctx = engine_context(engine, replica)
    error = exc if exc is not None else InjectedFault(f"injected fault in {actor}")
    counter = itertools.count(1)
    remaining = [times]

    def matches(msg: Any) -> bool:
        if actor == "worker":
            if not isinstance(msg, ExecuteStep) or msg.epoch != ctx.admission.epoch:
                return False
            msg = msg.scheduler_output
        n = next(counter)
        if when is not None and not when(msg):
            return False
        if at_step is not None:
            return ctx.admission.steps_done >= at_step
        if at_message is not None:
            return n >= at_message
        return True

    stalled_steps: set[int] = set()  # "worker" stalls: steps to slow down on the thread

    def probe(_name: str, msg: object) -> Any:
        if remaining[0] > 0 and matches(msg):
            remaining[0] -= 1
            if remaining[0] == 0:
                detach()
            if stall_s is None:
                raise error
            if actor != "worker":
                return anyio.sleep_forever() if stall_s == math.inf else anyio.sleep(stall_s)
            assert isinstance(msg, ExecuteStep)
            stalled_steps.add(msg.scheduler_output.step_id)
        return None

    if actor == "worker" and stall_s is not None:
        _slow_down_steps(scripted_or_runner(engine, replica), stalled_steps, stall_s)
    target = ctx.refs.executor if actor == "worker" else ctx.refs.started()[actor]
    detach = attach_probe(target, probe)


def scripted_or_runner(engine: AsyncEngine, replica: int = 0) -> Any:
    """A replica's model runner (scripted or real)."""
    return _local_worker(engine, replica).model_runner


def _local_worker(engine: AsyncEngine, replica: int) -> Worker:
    worker = engine._parts.replicas[replica].worker
    assert isinstance(worker, Worker), "the replica's runner is not in this process"
    return worker


def _slow_down_steps(runner: Any, step_ids: set[int], stall_s: float) -> None:
    """Make the runner sleep ``stall_s`` on the worker thread in each step of ``step_ids``."""
    step = runner.launch  # what the step pipeline calls (worker/runner.py)

    def slow(so: Any) -> Any:  # runs on the worker thread
        if so.step_id in step_ids:
            step_ids.discard(so.step_id)
            time.sleep(stall_s)  # a stuck kernel, a slow device: the loop runs on meanwhile
        return step(so)

    runner.launch = slow


async def wait_idle(engine: AsyncEngine, timeout: float = 10.0) -> None:  # noqa: ASYNC109
    """Wait until no step is in flight and every engine mailbox is empty."""

    def idle() -> bool:
        busy = any(r.ctx.admission.inflight for r in engine._live())
        return not busy and not any(engine._actor_stat("depth").values())

    with anyio.fail_after(timeout):
        while True:
            if idle():
                await anyio.sleep(0.005)  # let a just-finished handler's sends land
                if idle():
                    return
            await anyio.sleep(0.005)


async def check_invariants(engine: AsyncEngine, timeout: float = 10.0) -> None:  # noqa: ASYNC109
    """Wait for quiescence, then check the engine's bookkeeping; raises AssertionError.

    * KV blocks (each live replica): each block's ref count equals the requests holding
      it, free + used = total, no request holds a free block, nothing is held when no
      request is open;
    * requests: every request in a replica's scheduler is open in the ledger and routed to
      that replica, and every open, processed, unfinished ledger request is in its
      replica's scheduler (unless asleep); with several replicas, every processed one is
      routed to a live replica;
    * the output processor tracks exactly the open, processed ledger requests.
    """
    await wait_idle(engine, timeout)
    ctx = engine_context(engine)
    problems: list[str] = []
    several = engine.data_parallel_size > 1
    for replica in engine._live():
        tag = f"replica {replica.index}: " if several else ""
        problems.extend(tag + p for p in _replica_problems(replica.ctx, replica.index, several))
    if several:
        live = {r.index for r in engine._live()}
        stray = [e.request_id for e in ctx.ledger if e.processed and e.replica not in live]
        if stray:
            problems.append(f"processed requests on no live replica: {stray[:5]}")
    report = ctx.refs.output_processor.statistics().report
    open_processed = {e.request_id for e in ctx.ledger if e.processed}
    if report is None or report.num_unfinished != len(open_processed):
        tracked = None if report is None else report.num_unfinished
        problems.append(
            f"output processor tracks {tracked} requests, the ledger {len(open_processed)}"
        )
    if problems:
        raise AssertionError("engine invariants violated:\n  " + "\n  ".join(problems))


def _replica_problems(ctx: EngineContext, index: int, several: bool) -> list[str]:
    problems: list[str] = []
    adm = ctx.admission
    core = adm.core
    kv = core.kv_cache_manager
    pool = kv.block_pool
    holders: dict[int, int] = {}
    for blocks in kv.req_to_blocks.values():
        for block in blocks:
            holders[block.block_id] = holders.get(block.block_id, 0) + 1
    free_ids = {b.block_id for b in pool.free_queue}
    for block in pool.blocks[1:]:
        held = holders.get(block.block_id, 0)
        if block.ref_cnt != held:
            problems.append(f"block {block.block_id}: ref_cnt {block.ref_cnt} != {held} holders")
        if held and block.block_id in free_ids:
            problems.append(f"block {block.block_id} is held and free at once")
        if not held and block.block_id not in free_ids:
            problems.append(f"block {block.block_id} leaked: held by nobody, not free")
    if len(free_ids) + sum(1 for b in pool.blocks[1:] if b.ref_cnt > 0) != pool.num_blocks - 1:
        problems.append("free + used != total")
    ledger_children = {
        child.child_id
        for entry, child in ctx.ledger.open_children()
        if not several or entry.replica == index
    }
    scheduler_ids = set(core.requests)
    leaked = scheduler_ids - ledger_children
    if leaked:
        problems.append(f"scheduler holds requests no caller waits for: {sorted(leaked)[:5]}")
    if not adm.sleep_level:
        missing = ledger_children - scheduler_ids - set(adm.waiting_children())
        if missing:
            problems.append(f"open requests missing from the scheduler: {sorted(missing)[:5]}")
    mine = [e for e in ctx.ledger if not several or e.replica == index]
    if not mine and (kv.req_to_blocks or any(b.ref_cnt for b in pool.blocks[1:])):
        problems.append("blocks still held with no open request")
    return problems
