"""Pin OpenMP's wait regime, so the engine's CPU speed does not depend on the host's past.

Why
---
torch's CPU wheels run their parallel ops on GNU OpenMP (libgomp). Every thread that
enters a parallel region gets its own team of ``torch.get_num_threads() - 1`` helper
threads, kept for the thread's life. Between regions a team's threads wait on a barrier,
and libgomp picks how long they busy-spin before sleeping from a process-wide count: while
the OpenMP threads of all teams are no more than the CPUs, they spin ~300k iterations
(``GOMP_SPINCOUNT``); once they outnumber the CPUs, only ~1000 ("throttled") and then sleep
on a futex. The env vars are read once, when torch loads libgomp.

The engine's worker thread owns one team. Whether the host already ran torch work on
another live thread (transformers ``generate`` on the main thread is enough) decides
which regime that team gets, so the same ``LLM.generate`` ran at a different speed:
measured on a 2-core box, 27% slower after an HF ``generate`` when the box was quiet
(spinning keeps wake-ups cheap), and 50x *faster* when 8 other processes shared the cores
(a spinning thread burns the time slice its descheduled partner needs). See
``benchmarks/README.md`` (embedded) for the figures.

What
----
:func:`park_openmp_team` starts, once per process, a daemon thread that runs one parallel
op (libgomp gives it a team) and then parks forever. With the engine's team beside it, the
OpenMP threads outnumber the CPUs whenever the engine's team fills them, so libgomp always
takes the short-spin regime, whatever the host did or does next. Short spinning is the
regime a host with any other torch thread gets anyway, and the one that holds up on a
shared machine. ``EngineConfig.cpu_omp_short_spin=False`` leaves libgomp as the host left it.
"""

from __future__ import annotations

import threading

import torch

_lock = threading.Lock()
_parked: threading.Thread | None = None


def park_openmp_team() -> bool:
    """Give the process a parked OpenMP team (idempotent, thread-safe). Returns whether one
    exists: with one torch thread there is no team to make (nothing ever waits)."""
    global _parked
    with _lock:
        if _parked is not None:
            return True
        if torch.get_num_threads() < 2:
            return False
        ready = threading.Event()

        def hold() -> None:
            # [2^20] float32 fill: far above ATen's grain size, so it runs as a parallel
            # region on this thread, whose team libgomp keeps until the thread exits.
            torch.empty(1 << 20).fill_(1.0)
            ready.set()
            threading.Event().wait()  # park forever; the team parks with us

        _parked = threading.Thread(target=hold, name="actorllm-omp-parked", daemon=True)
        _parked.start()
        ready.wait()
        return True


def parked() -> bool:
    return _parked is not None and _parked.is_alive()
