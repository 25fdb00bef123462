"""Per-step CPU cost of the actor engine at zero model time, against the bare core loop.

Both sides run the same :class:`~actorllm.testing.ScriptedModel` (no weights, a token is a
hash of the context) on the same scheduler settings, with ``num_running`` requests all in
steady decode:

* **engine**: the whole actor engine (router, input processor, scheduler, executor and its
  worker thread, output processor with detokenization, one caller task per request reading
  its stream) via :func:`actorllm.testing.open_test_engine`;
* **core**: ``Scheduler.schedule()`` -> ``ScriptedModel.execute()`` ->
  ``Scheduler.update_from_output()`` in a plain for-loop.

Per step = wall time of the timed window / steps in it (CPU time of the process beside
it). The ratio engine / core is what the actor pipeline costs per step on top of the core
work; with a real model it hides behind the model's own step time (or overlaps with it
under ``async_scheduling``).

A DELTA row also measures the **wake floor** (:mod:`actorllm.bench.wake_floor`): waking
``num_running`` parked tasks once, with the event loop's own primitive and nothing else.
Every DELTA caller is a task that each step wakes, so ``(core + wake floor) / core`` (the
``floor ratio``) is the least engine/core ratio an engine with a task per caller can
reach on that loop. It also measures the **output floor**
(:mod:`actorllm.bench.output_floor`): handing each of ``num_running`` callers one
``RequestOutput`` through an async generator of ``generate``'s shape, with nothing of the
engine; ``(core + output floor) / core`` (the ``output floor ratio``) is the least ratio
any engine serving vLLM's streaming API with a task per caller can reach. FINAL_ONLY
callers are woken once per request, not per step.

    >>> rows = run_overhead([64], steps=50)  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio

from actorllm.engine.config.engine_config import CPU_BLOCK_SIZE

PROMPT_LEN = 32
BLOCK_SIZE = CPU_BLOCK_SIZE  # both sides at the engine's CPU default


def _limits(num_running: int, steps: int) -> dict[str, Any]:
    max_len = PROMPT_LEN + 4 * steps + 256  # never reached: the run is cancelled first
    per_req = -(-max_len // BLOCK_SIZE)
    return {
        "max_num_seqs": num_running,
        "max_num_batched_tokens": max(8192, num_running * PROMPT_LEN),
        "max_model_len": max_len,
        "block_size": BLOCK_SIZE,
        "num_blocks": num_running * per_req + 1,
    }


def _prompt(i: int) -> list[int]:
    # Distinct prompts: no prefix-cache sharing between requests.
    return [3 + (i * 131 + j * 7) % 4000 for j in range(PROMPT_LEN)]


def core_step_ms(num_running: int, steps: int, *, gc_freeze: bool = False) -> dict[str, Any]:
    """The bare core loop with the ScriptedModel as its runner."""
    from actorllm.core.request import Request
    from actorllm.core.sampling_params import SamplingParams
    from actorllm.core.scheduler import Scheduler, SchedulerConfig
    from actorllm.testing.scripted_model import ScriptedModel

    gc.collect()  # the garbage of what ran before (an engine side: ~34K cycles) is not ours
    lim = _limits(num_running, steps)
    sched = Scheduler(SchedulerConfig(**lim))
    model = ScriptedModel(vocab_size=4096, eos_token_id=0, max_model_len=lim["max_model_len"])
    params = SamplingParams(max_tokens=lim["max_model_len"] - PROMPT_LEN, ignore_eos=True)
    for i in range(num_running):
        sched.add_request(Request(f"r{i}", _prompt(i), params, eos_token_id=0))

    def step() -> None:
        so = sched.schedule()
        sched.update_from_output(so, model.execute(so))

    while sched.statistics().num_running_reqs < num_running or sched.num_waiting:
        step()
    for _ in range(10):
        step()
    with _frozen_gc(gc_freeze):
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(steps):
            step()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"steps": steps, "step_ms": wall / steps * 1e3, "cpu_ms_per_step": cpu / steps * 1e3}


async def engine_step_ms(
    num_running: int,
    steps: int,
    *,
    output_kind: str = "delta",
    async_scheduling: bool = False,
    stream_interval: int = 1,
    gc_freeze: bool = False,
    window: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
) -> dict[str, Any]:
    """The actor engine on the ScriptedModel; must run inside an event loop (trio or
    asyncio). Returns once the timed window is over (the requests are then cancelled).
    ``window()``, when given, is entered around the timed window (e.g. a profiler).
    ``stream_interval``: the engine's (a DELTA stream gets an output every that many
    tokens)."""
    from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
    from actorllm.testing.engine_harness import engine_context, open_test_engine

    gc.collect()  # the garbage of what ran before (a core side) is not the engine's
    lim = _limits(num_running, steps)
    kind = RequestOutputKind.DELTA if output_kind == "delta" else RequestOutputKind.FINAL_ONLY
    params = SamplingParams(
        max_tokens=lim["max_model_len"] - PROMPT_LEN, ignore_eos=True, output_kind=kind
    )
    async with open_test_engine(
        num_blocks=lim.pop("num_blocks"),
        async_scheduling=async_scheduling,
        stream_interval=stream_interval,
        mailbox_size=max(1024, 2 * num_running),
        **lim,
    ) as engine:
        ctx = engine_context(engine)

        async def consume(i: int) -> None:
            async for _ in engine.generate({"prompt_token_ids": _prompt(i)}, params):
                pass

        async with anyio.create_task_group() as tg:
            for i in range(num_running):
                tg.start_soon(consume, i)
            while True:  # until every request is in steady decode
                stats = await engine.get_stats()
                if stats.num_running_reqs == num_running and not stats.num_waiting_reqs:
                    break
                if ctx.admission.steps_done + 10 + steps >= lim["max_model_len"] - PROMPT_LEN:
                    # (a poll that never ends otherwise: requests start finishing)
                    raise RuntimeError(
                        f"{num_running} requests were not all decoding after "
                        f"{ctx.admission.steps_done} steps: the first ones would finish "
                        "inside the timed window"
                    )
                await anyio.sleep(0.01)
            await _wait_steps(ctx, ctx.admission.steps_done + 10)
            around = window() if window is not None else contextlib.nullcontext()
            with _frozen_gc(gc_freeze), around:
                s0, c0, t0 = ctx.admission.steps_done, time.process_time(), time.perf_counter()
                await _wait_steps(ctx, s0 + steps)
                s1, c1, t1 = ctx.admission.steps_done, time.process_time(), time.perf_counter()
            tg.cancel_scope.cancel()
    n = s1 - s0
    return {"steps": n, "step_ms": (t1 - t0) / n * 1e3, "cpu_ms_per_step": (c1 - c0) / n * 1e3}


@contextlib.contextmanager
def _frozen_gc(freeze: bool) -> Iterator[None]:
    """``gc.freeze()`` for the timed window: what lives now is never scanned again, so a
    collection only walks what the window allocates (a diagnostic for GC cost)."""
    if not freeze:
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _wait_steps(ctx: Any, target: int) -> None:
    # A poll, not an event: the engine has no step hook. Each wake-up is a task step and a
    # timer on the loop being measured (every 2 ms it was ~1 % of a 256-request step), so
    # it polls rarely: the window's steps and time are both read when the poll returns, so
    # running past the target only lengthens the window.
    while ctx.admission.steps_done < target:  # noqa: ASYNC110
        await anyio.sleep(0.02)


def run_overhead(
    sizes: list[int],
    *,
    steps: int = 100,
    output_kind: str = "delta",
    async_scheduling: bool = False,
    stream_interval: int = 1,
    backend: str = "trio",
    gc_freeze: bool = False,
    repeat: int = 1,
    lane_bound: bool = False,
) -> list[dict[str, Any]]:
    """One row per size: engine and core figures and their ratio (engine / core).

    ``repeat`` > 1 runs engine and core in turn that many times per size (interleaved, so
    a shared machine's load weighs on both alike) and reports medians, with every run's
    figures beside them. ``lane_bound`` (DELTA, ``stream_interval`` 1) adds a run of the
    engine with the least output lane (:mod:`actorllm.bench.lane_bound`) to each turn."""
    from actorllm.bench.lane_bound import least_output_lane
    from actorllm.bench.output_floor import output_floor_ms
    from actorllm.bench.wake_floor import wake_floor_ms

    if lane_bound and (output_kind != "delta" or stream_interval != 1):
        raise ValueError(
            "lane_bound measures the DELTA lane at stream_interval 1 "
            f"(got output_kind={output_kind!r}, stream_interval={stream_interval})"
        )

    rows = []
    for n in sizes:
        engines: list[dict[str, Any]] = []
        cores: list[dict[str, Any]] = []
        floors: list[float] = []
        output_floors: list[float] = []
        bounds: list[dict[str, Any]] = []
        for _ in range(repeat):
            engines.append(
                anyio.run(
                    functools.partial(
                        engine_step_ms,
                        n,
                        steps,
                        output_kind=output_kind,
                        async_scheduling=async_scheduling,
                        stream_interval=stream_interval,
                        gc_freeze=gc_freeze,
                    ),
                    backend=backend,
                )
            )
            if lane_bound:
                run = functools.partial(
                    engine_step_ms, n, steps, gc_freeze=gc_freeze, window=least_output_lane
                )
                bounds.append(anyio.run(run, backend=backend))
            cores.append(core_step_ms(n, steps, gc_freeze=gc_freeze))
            if output_kind == "delta":  # a FINAL_ONLY caller is not woken per step
                floor = anyio.run(wake_floor_ms, n, steps, backend=backend)
                floors.append(floor["step_ms"] / stream_interval)
                floor = anyio.run(output_floor_ms, n, steps, backend=backend)
                output_floors.append(floor["step_ms"] / stream_interval)
        eng = {k: statistics.median(e[k] for e in engines) for k in engines[0]}
        core = {k: statistics.median(c[k] for c in cores) for k in cores[0]}
        row = {
            "num_running": n,
            "engine_step_ms": eng["step_ms"],
            "engine_cpu_ms_per_step": eng["cpu_ms_per_step"],
            "engine_steps": int(eng["steps"]),
            "core_step_ms": core["step_ms"],
            "core_cpu_ms_per_step": core["cpu_ms_per_step"],
            "core_steps": int(core["steps"]),
            "ratio": eng["step_ms"] / core["step_ms"],
            "cpu_ratio": eng["cpu_ms_per_step"] / core["cpu_ms_per_step"],
            "engine_us_per_request_step": eng["step_ms"] / n * 1e3,
            # Waking every DELTA caller's task once per step (bench/wake_floor.py), and
            # the least engine/core ratio that leaves (core + wake floor) / core.
            "wake_floor_ms": statistics.median(floors) if floors else 0.0,
            # And building one RequestOutput per caller and reading it through an async
            # generator (bench/output_floor.py): the floor of the streaming API itself.
            "output_floor_ms": statistics.median(output_floors) if output_floors else 0.0,
        }
        row["floor_ratio"] = (core["step_ms"] + row["wake_floor_ms"]) / core["step_ms"]
        row["output_floor_ratio"] = (core["step_ms"] + row["output_floor_ms"]) / core["step_ms"]
        # The engine against the core plus the streaming API's floor (1.0: nothing of its own).
        row["engine_over_floor"] = eng["step_ms"] / (core["step_ms"] + row["output_floor_ms"])
        if bounds:
            bound = statistics.median(b["step_ms"] for b in bounds)
            row["lane_bound_step_ms"] = bound
            row["lane_bound_over_floor"] = bound / (core["step_ms"] + row["output_floor_ms"])
        if repeat > 1:
            row["engine_step_ms_runs"] = [e["step_ms"] for e in engines]
            row["core_step_ms_runs"] = [c["step_ms"] for c in cores]
            row["engine_cpu_ms_runs"] = [e["cpu_ms_per_step"] for e in engines]
            row["core_cpu_ms_runs"] = [c["cpu_ms_per_step"] for c in cores]
            row["wake_floor_ms_runs"] = floors
            row["output_floor_ms_runs"] = output_floors
            if bounds:
                row["lane_bound_step_ms_runs"] = [b["step_ms"] for b in bounds]
        rows.append(row)
    return rows


# -- command line ----------------------------------------------------------------------------

_COLUMNS = [
    ("num_running", "running", "d"),
    ("engine_step_ms", "engine ms/step", ".3f"),
    ("engine_cpu_ms_per_step", "engine cpu ms", ".3f"),
    ("core_step_ms", "core ms/step", ".3f"),
    ("core_cpu_ms_per_step", "core cpu ms", ".3f"),
    ("ratio", "engine/core", ".1f"),
    ("cpu_ratio", "cpu ratio", ".1f"),
    ("engine_us_per_request_step", "engine us/req", ".1f"),
    ("wake_floor_ms", "wake floor ms", ".3f"),
    ("floor_ratio", "floor ratio", ".2f"),
    ("output_floor_ms", "output floor ms", ".3f"),
    ("output_floor_ratio", "output floor ratio", ".2f"),
    ("engine_over_floor", "engine/(core+floor)", ".2f"),
]
_LANE_COLUMNS = [
    ("lane_bound_step_ms", "lane bound ms/step", ".3f"),
    ("lane_bound_over_floor", "lane bound/(core+floor)", ".2f"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from actorllm.bench.cli_args import add_output_argument

    parser.add_argument(
        "--num-running", default="64,256,1024", help="running requests to test (comma list)"
    )
    parser.add_argument("--steps", type=int, default=100, help="timed decode steps per size")
    parser.add_argument("--output-kind", choices=("delta", "final"), default="delta")
    parser.add_argument("--async-scheduling", action="store_true")
    parser.add_argument(
        "--stream-interval",
        type=int,
        default=1,
        help="the engine's stream_interval: a DELTA stream gets an output every N tokens",
    )
    parser.add_argument("--event-loop", choices=("trio", "asyncio"), default="trio")
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() over the timed window on both sides (shows what GC costs)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="interleaved engine/core runs per size; medians reported (a shared machine)",
    )
    parser.add_argument(
        "--profile-top",
        type=int,
        default=0,
        metavar="N",
        help="then cProfile the engine's event loop at the largest size over one timed "
        "window and keep the top N functions by own time",
    )
    parser.add_argument(
        "--lane-bound",
        action="store_true",
        help="also run the engine with its output processor cut to the least any output "
        "lane does (bench/lane_bound.py): how far an output-lane redesign could go",
    )
    add_output_argument(parser)


def main(args: argparse.Namespace) -> int:
    from actorllm.bench.machine import result_document, write_json
    from actorllm.bench.report import format_table

    sizes = [int(x) for x in args.num_running.split(",") if x.strip()]
    if args.lane_bound and (args.output_kind != "delta" or args.stream_interval != 1):
        raise SystemExit(
            "--lane-bound measures the DELTA lane at --stream-interval 1: drop "
            "--output-kind final / --stream-interval"
        )
    rows = run_overhead(
        sizes,
        steps=args.steps,
        output_kind=args.output_kind,
        async_scheduling=args.async_scheduling,
        stream_interval=args.stream_interval,
        backend=args.event_loop,
        gc_freeze=args.gc_freeze,
        repeat=args.repeat,
        lane_bound=args.lane_bound,
    )
    print(format_table(rows, _COLUMNS + (_LANE_COLUMNS if args.lane_bound else [])))
    figures: dict[str, Any] = {"rows": rows}
    if args.profile_top:
        from actorllm.bench.overhead_profile import profile_engine_loop

        figures["profile"] = profile_engine_loop(
            max(sizes),
            args.steps,
            top=args.profile_top,
            backend=args.event_loop,
            output_kind=args.output_kind,
            async_scheduling=args.async_scheduling,
            stream_interval=args.stream_interval,
        )
        for entry in figures["profile"]["top"]:
            print(f"{entry['own_percent']:5.1f}%  {entry['function']}")
    if args.output_json:
        config = {
            "num_running": sizes,
            "steps": args.steps,
            "prompt_len": PROMPT_LEN,
            "output_kind": args.output_kind,
            "async_scheduling": args.async_scheduling,
            "stream_interval": args.stream_interval,
            "event_loop": args.event_loop,
            "gc_freeze": args.gc_freeze,
            "repeat": args.repeat,
            "lane_bound": args.lane_bound,
        }
        write_json(
            args.output_json,
            result_document("overhead", figures=figures, config=config, args=args),
        )
    return 0
