"""Profiler ranges around native kernel calls: a ctypes call is invisible to
``torch.profiler``, so the kernels that dominate a step (the AMX linears) name themselves in
traces through :func:`call`.

``start_profile``'s profiler (``worker/profiler.py``) runs on another thread than the model,
whose ``torch.autograd._profiler_enabled()`` stays False: while it records every thread it
switches :func:`record_ranges` on, and every call records its range on any thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_all_threads_profiled = False


def record_ranges(on: bool) -> None:
    """Whether every native call records a profiler range, on any thread."""
    global _all_threads_profiled
    _all_threads_profiled = on


def call(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, inside a profiler range called ``name`` while a profiler records."""
    if _all_threads_profiled or torch.autograd._profiler_enabled():
        with torch.profiler.record_function(name):
            return fn(*args)
    return fn(*args)
