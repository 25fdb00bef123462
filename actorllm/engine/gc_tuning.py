"""The cyclic garbage collector while an engine runs: process-wide settings, put back at close.

Why: a decode step at 1024 running requests allocates some ten thousand short-lived
containers (outputs, token lists, messages), almost all freed by reference counting. With
CPython's default generation-0 threshold (700 allocations) that still triggers a dozen
young collections per step, each scanning the survivors, and every tenth one an older
generation too: about a third of the event loop's time per step in ``bench overhead``.
Two settings (``EngineConfig``), as vLLM does:

* ``freeze_gc_at_start``: after start-up, collect once and move every live object to the
  permanent generation (``gc.freeze``), so collections never rescan the start-up heap;
* ``gc_gen0_threshold``: a higher generation-0 threshold, so young collections run a few
  times per step instead of a dozen.

Both are process-wide. The threshold is set when the first engine of the process starts
and restored when the last one closes (engines may overlap: tests, data-parallel
benchmarks); a threshold the host set higher is left alone. ``gc.unfreeze`` at close
hands the frozen heap back, so the engine's objects are collected normally once it is
gone.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Engines of this process that hold the raised threshold, and the threshold the first one
# found (restored when the count drops to zero). Module state because the GC is process
# state; written only on the event loop's thread, at engine start and close.
_holders = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def engine_gc(*, freeze: bool, gen0_threshold: int | None) -> Iterator[None]:
    """Apply the engine's GC settings for the ``with`` block (the running engine).

    >>> with engine_gc(freeze=False, gen0_threshold=10**9):
    ...     gc.get_threshold()[0] == 10**9
    True
    """
    raised = gen0_threshold is not None and _raise_threshold(gen0_threshold)
    if freeze:
        gc.collect()
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()
        if raised:
            _release_threshold()


def _raise_threshold(gen0: int) -> bool:
    global _holders, _saved
    current = gc.get_threshold()
    if _holders == 0:
        if current[0] >= gen0:
            return False  # the host's own setting is higher: keep it
        _saved = current
    _holders += 1
    gc.set_threshold(max(gen0, current[0]), current[1], current[2])
    return True


def _release_threshold() -> None:
    global _holders, _saved
    _holders -= 1
    if _holders == 0 and _saved is not None:
        gc.set_threshold(*_saved)
        _saved = None
