"""Keep the memory a CPU step frees inside the process, so the next step does not fault it
back in page by page.

Why
---
A CPU model step allocates its activations fresh through torch's CPU allocator, which is
glibc's ``malloc``. glibc hands blocks from 128 KiB (its threshold adapts, up to 32 MiB)
to the kernel with ``mmap`` and gives them back with ``munmap`` when freed, and it trims
the top of its heaps (``madvise(MADV_DONTNEED)`` on the worker thread's arena) when more
than its trim threshold sits free. Either way the next step's allocation of the same size
gets fresh pages, and the kernel faults and zeroes every 4 KiB of it inside the step: a
[2048, 4096] float32 gate/up output (a prefill chunk of 2048 tokens, exactly 32 MiB, so
always mapped) is 8192 faults per layer, a [128, 4096] decode one ~150. vLLM's CPU build
avoids this by preloading tcmalloc (``vllm/platforms/cpu.py``, when its wheel bundles it).

What
----
:func:`keep_freed_memory` sets, once per process, glibc's ``mallopt``: ``M_MMAP_MAX=0``
(no block is ``mmap``-ed: all come from the heaps), ``M_TRIM_THRESHOLD`` 1 GiB and
``M_TOP_PAD`` 64 MiB (freed memory stays for the next step). Process-wide and not undone
(glibc has no getter for these; a tcmalloc preload is as process-wide): the process keeps
up to ~1 GiB of freed heap instead of returning it. ``EngineConfig.cpu_keep_freed_memory=
False`` leaves malloc as the host set it. Detected: Linux with glibc only (musl and other
C libraries have no ``mallopt``; nothing is done there).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform
import threading

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4  # glibc's malloc.h
TRIM_THRESHOLD = 1 << 30
TOP_PAD = 64 << 20

_lock = threading.Lock()
_done: bool | None = None  # None: not tried yet; else whether the settings took


def keep_freed_memory() -> bool:
    """Apply the settings (idempotent, thread-safe); returns whether they are in force."""
    global _done
    with _lock:
        if _done is None:
            _done = _apply()
        return _done


def _apply() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD))
    ok = all(mallopt(param, value) == 1 for param, value in settings)  # 1: accepted
    if not ok:
        logger.info("malloc: glibc refused a mallopt setting; freed memory may be returned")
    return ok
