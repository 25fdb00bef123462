"""Interpreter settings while an engine runs: process-wide, put back when the last one closes.

Why: the engine's event loop runs Python for every request on every step, beside a worker
thread that needs the GIL between its torch calls. Three settings (``EngineConfig``):

* ``freeze_gc_at_start``: after start-up, collect once and move every live object to the
  permanent generation (``gc.freeze``, as vLLM does), so collections never rescan the
  start-up heap (weights' Python objects, tokenizer, modules);
* ``gc_gen0_threshold``: a decode step at 1024 running requests allocates some ten
  thousand short-lived containers (outputs, token lists, messages), almost all freed by
  reference counting. At CPython's default generation-0 threshold (700) that still made a
  dozen young collections per step, each scanning the survivors, and every tenth an older
  generation too: about a third of the loop's time in ``bench overhead``. A higher
  threshold makes it a few per step;
* ``switch_interval_s``: how long a thread may hold the GIL while another waits for it
  (``sys.setswitchinterval``, default 5 ms). While the loop processes a step's outputs,
  every torch call the worker returns from waits for the GIL up to this long.

All three are process state. The threshold and the switch interval are set when the first
engine of the process starts and restored when the last one closes (engines may overlap:
tests, data-parallel benchmarks); a GC threshold the host set higher, or a switch interval
it set shorter, is left alone. ``gc.unfreeze`` when the last freezing engine closes hands
the frozen heap back, so the engines' objects are collected normally once they are gone
(not at the first close: that would hand a still running engine's start-up heap back to
the collector).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar, final

T = TypeVar("T")


@final
class _SharedSetting(Generic[T]):
    """A process-wide setting held by the running engines: applied by the first, restored
    by the last. Module state because the interpreter's settings are process state;
    touched only on the event loop's thread, at engine start and close."""

    def __init__(
        self, get: Callable[[], T], put: Callable[[T], None], better: Callable[[T, T], bool]
    ) -> None:
        self._get, self._put, self._better = get, put, better
        self._holders = 0  # engines holding the setting
        self._saved: T | None = None  # the value the first holder found

    def acquire(self, wanted: T) -> bool:
        """Apply ``wanted`` unless the current value is already as good; returns whether
        this engine holds the setting (and must release it)."""
        current = self._get()
        if self._holders == 0:
            if not self._better(wanted, current):
                return False  # the host's own setting is as good: keep it
            self._saved = current
        self._holders += 1
        if self._better(wanted, current):
            self._put(wanted)
        return True

    def release(self) -> None:
        self._holders -= 1
        if self._holders == 0 and self._saved is not None:
            self._put(self._saved)
            self._saved = None


def _get_gen0() -> int:
    return gc.get_threshold()[0]


def _put_gen0(gen0: int) -> None:
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0, gen1, gen2)


_GEN0 = _SharedSetting(_get_gen0, _put_gen0, better=lambda new, old: new > old)
_SWITCH = _SharedSetting(sys.getswitchinterval, sys.setswitchinterval, lambda n, o: n < o)
_freezers = 0  # running engines that froze the heap at start (freeze_gc_at_start)


@contextmanager
def engine_interpreter_settings(
    *, freeze: bool, gen0_threshold: int | None, switch_interval_s: float | None
) -> Iterator[None]:
    """Apply the engine's settings for the ``with`` block (the running engine).

    >>> with engine_interpreter_settings(
    ...     freeze=False, gen0_threshold=10**9, switch_interval_s=None
    ... ):
    ...     gc.get_threshold()[0] == 10**9
    True
    """
    global _freezers
    held: list[_SharedSetting[Any]] = []
    if gen0_threshold is not None and _GEN0.acquire(gen0_threshold):
        held.append(_GEN0)
    if switch_interval_s is not None and _SWITCH.acquire(switch_interval_s):
        held.append(_SWITCH)
    if freeze:
        gc.collect()
        gc.freeze()  # (cumulative: a second engine freezes its own start-up heap too)
        _freezers += 1
    try:
        yield
    finally:
        if freeze:
            _freezers -= 1
            if _freezers == 0:
                gc.unfreeze()
        for setting in held:
            setting.release()
