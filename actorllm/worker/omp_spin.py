"""Keep libgomp's long spin-waits for the engine's team, whatever torch work the host did.

Why
---
torch's CPU wheels run their parallel ops on GNU OpenMP (libgomp). Every thread that
enters a parallel region gets its own team of ``torch.get_num_threads() - 1`` helper
threads, kept for the thread's life. Between regions a team's helpers wait on a barrier,
and libgomp picks how long they busy-spin before sleeping on a futex from one process-wide
count: while the helper threads of all teams (plus the initial thread) are no more than
the CPUs, ~300k iterations (a few ms, ``GOMP_SPINCOUNT``); once they outnumber them, 100
("throttled"). A decode step enters a parallel region for every linear and kernel, with
the worker's Python between them, so in the throttled regime each region first wakes a
sleeping helper (a futex and, in a VM, an idle vCPU's wake-up): the same step on the same
box ran 8-12% slower (``qwen3-75m-fp32``: 514 / 559 against 591 / 620 out tok/s), and a
small parallel op 46 against 102 us.

Which regime the engine's team gets depended on the host: transformers ``generate`` (or
any parallel torch op) on the host's thread leaves that thread an idle team, which pushes
the count over the CPUs (measured: the same ``LLM.generate`` 27% slower after an HF
``generate`` in the process).

What
----
:func:`release_thread_team` frees the calling thread's idle team: libgomp's
``omp_pause_resource_all(omp_pause_hard)`` on a thread outside any parallel region frees
that thread's pool (its helpers exit and leave the count). The engine calls it on the
host's thread when it starts and whenever a blocking offline call (``LLM.generate``,
``LLMEngine.step``, ...) hands the thread to the engine, so the engine's worker team is the
process's only one and keeps the long spins a fresh process has (vLLM's engine process has
them too). The host's next parallel op makes its team again (~100 us); the count is then
over the CPUs while both exist, the right regime when both really compute.

What it cannot free: the team of another live thread that ran torch work (a thread pool's
worker, say); only that thread can. The host does it by calling
``actorllm.utils.release_openmp_team()`` (this module's :func:`release_thread_team`) on that
thread when its torch work is done. ``EngineConfig.cpu_omp_short_spin=True`` instead parks
a team of its own (:func:`park_openmp_team`), which keeps libgomp throttled whatever the
host does: the same speed in every process, the slower one, and the regime that holds up
on a box whose cores other processes keep busy (a spinning helper there burns the time
slice its descheduled partner needs).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import threading
from typing import Any

logger = logging.getLogger(__name__)

_OMP_PAUSE_HARD = 2  # omp_pause_resource_t: free the resources (threads) as well

_lock = threading.Lock()
_parked: threading.Thread | None = None


@functools.cache
def _pause_all() -> Any | None:
    """libgomp's ``omp_pause_resource_all`` from the copy loaded in this process (torch's
    own), or None: no libgomp loaded (another OpenMP runtime, or none) or one too old to
    have it (OpenMP 5.0, GCC 9 and later)."""
    path = _loaded_libgomp()
    if path is None:
        return None
    try:
        fn = ctypes.CDLL(path).omp_pause_resource_all  # already loaded: the same handle
    except (OSError, AttributeError) as exc:
        logger.info("OpenMP: %s has no omp_pause_resource_all (%s)", path, exc)
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _loaded_libgomp() -> str | None:
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if os.path.basename(path).startswith("libgomp"):
                    return path
    except OSError:  # not Linux
        pass
    return None


def release_thread_team() -> bool:
    """Free the calling thread's idle OpenMP team, if it has one. Returns whether libgomp
    did it (False: no libgomp here, or the thread is inside a parallel region). Cheap
    when there is no team: a thread-local check inside libgomp.

    Public as ``actorllm.utils.release_openmp_team``: an application embedding the engine
    calls it on any long-lived thread of its own after that thread's torch work (a thread
    pool's worker), so the engine's team keeps libgomp's long spins (the module's Why)."""
    pause = _pause_all()
    return pause is not None and pause(_OMP_PAUSE_HARD) == 0


def park_openmp_team() -> bool:
    """Give the process a parked OpenMP team (idempotent, thread-safe): libgomp then always
    takes its short-spin regime (``EngineConfig.cpu_omp_short_spin``). Returns whether one
    exists: with one torch thread there is no team to make (nothing ever waits)."""
    global _parked
    import torch

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
