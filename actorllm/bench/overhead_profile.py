"""Where the engine's event loop spends a step: ``bench overhead --profile-top N``.

cProfile of the event-loop thread (actors, output processing, the callers' tasks) over one
timed window of :func:`actorllm.bench.overhead.engine_step_ms`; the worker thread (the
ScriptedModel) is not in it. cProfile's own overhead inflates small, frequent calls, so
read the shares, not the milliseconds.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import os
import pstats
from collections.abc import Iterator
from typing import Any

import anyio


def profile_engine_loop(
    num_running: int,
    steps: int,
    *,
    top: int = 15,
    backend: str = "trio",
    output_kind: str = "delta",
    async_scheduling: bool = False,
    stream_interval: int = 1,
) -> dict[str, Any]:
    """The top ``top`` functions by own time, with their share of the profiled time (the
    engine run as the table's: same output kind and scheduling)."""
    from actorllm.bench.overhead import engine_step_ms

    profiler = cProfile.Profile()

    @contextlib.contextmanager
    def window() -> Iterator[None]:
        profiler.enable()
        try:
            yield
        finally:
            profiler.disable()

    run = anyio.run(
        functools.partial(
            engine_step_ms,
            num_running,
            steps,
            output_kind=output_kind,
            async_scheduling=async_scheduling,
            stream_interval=stream_interval,
            window=window,
        ),
        backend=backend,
    )
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    entries = stats.stats.items()  # type: ignore[attr-defined]
    ranked = sorted(entries, key=lambda item: item[1][2], reverse=True)[:top]
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in ranked:
        rows.append(
            {
                "function": f"{_short(filename)}:{line}({name})",
                "ncalls": ncalls,
                "own_s": tottime,
                "cumulative_s": cumtime,
                "own_percent": 100.0 * tottime / total if total else 0.0,
            }
        )
    return {
        "num_running": num_running,
        "output_kind": output_kind,
        "steps": run["steps"],
        "profiled_step_ms": run["step_ms"],
        "profiled_total_s": total,
        "top": rows,
    }


def _short(filename: str) -> str:
    """``actorllm/...`` or ``trio/...`` rather than the absolute path."""
    parts = filename.replace(os.sep, "/").split("/")
    for anchor in ("actorllm", "trio", "anyio", "outcome"):
        if anchor in parts:
            i = len(parts) - 1 - parts[::-1].index(anchor)
            return "/".join(parts[i:])
    return filename
