"""Test harness for actorllm and for applications built on its actor runtime.

Re-exports; see docs/testing.md. The pytest plugin (markers and fixtures) is
:mod:`actorllm.testing.pytest_plugin`, loaded automatically through ``pytest11``.

``inject_fault`` and ``wait_idle`` take either an actor ref / supervisor (the generic
runtime) or an engine (the LLM engine under test):

    inject_fault(ref, ValueError("bad"), on_message=2)        # crash an actor
    inject_fault(engine, "scheduler", at_step=5)               # crash an engine actor

``chaos_soak`` crashes an engine's actors many times while requests stream and compares
every request with a fault-free run (``actorllm bench chaos`` is its command line).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actorllm.testing.actor_faults import Fault
    from actorllm.testing.chaos import ChaosRequest, chaos_soak, default_workload
    from actorllm.testing.chaos_plan import CrashPoint
    from actorllm.testing.chaos_report import ChaosReport
    from actorllm.testing.engine_harness import (
        InjectedFault,
        check_invariants,
        engine_context,
        open_test_engine,
        scripted_model,
    )
    from actorllm.testing.scripted_model import ScriptedModel

# The re-exports load on first use: a light submodule (``percentiles``, which the bench
# clients import) must not pull the whole engine in through this package's import.
_LAZY = {
    "Fault": "actor_faults",
    "ChaosRequest": "chaos",
    "chaos_soak": "chaos",
    "default_workload": "chaos",
    "CrashPoint": "chaos_plan",
    "ChaosReport": "chaos_report",
    "InjectedFault": "engine_harness",
    "check_invariants": "engine_harness",
    "engine_context": "engine_harness",
    "open_test_engine": "engine_harness",
    "scripted_model": "engine_harness",
    "ScriptedModel": "scripted_model",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def inject_fault(target: Any, *args: Any, **kwargs: Any) -> Any:
    """Crash an actor on purpose.

    * ``inject_fault(ref, exc=RuntimeError, *, on_message=1, times=1, match=None)``: the
      generic runtime; returns a :class:`Fault`.
    * ``inject_fault(engine, actor, *, at_step=None, at_message=None, exc=None, times=1,
      when=None)``: one of the engine's actors ("router", "input_processor",
      "scheduler", "executor", "output_processor", or "worker" for the model step).
    """
    from actorllm.engine.api.async_engine import AsyncEngine
    from actorllm.testing import actor_faults, engine_harness

    if isinstance(target, AsyncEngine):
        return engine_harness.inject_fault(target, *args, **kwargs)
    return actor_faults.inject_fault(target, *args, **kwargs)


async def wait_idle(target: Any, **kwargs: Any) -> None:
    """Wait until the supervisor's actors (or the engine) have nothing left to do."""
    from actorllm.engine.api.async_engine import AsyncEngine
    from actorllm.testing import actor_faults, engine_harness

    if isinstance(target, AsyncEngine):
        await engine_harness.wait_idle(target, **kwargs)
    else:
        await actor_faults.wait_idle(target, **kwargs)


__all__ = [
    "ChaosReport",
    "ChaosRequest",
    "CrashPoint",
    "Fault",
    "InjectedFault",
    "ScriptedModel",
    "chaos_soak",
    "check_invariants",
    "default_workload",
    "engine_context",
    "inject_fault",
    "open_test_engine",
    "scripted_model",
    "wait_idle",
]
