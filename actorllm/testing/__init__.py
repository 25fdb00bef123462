"""Test harness for actorllm and for applications built on its actor runtime.

Re-exports only; see docs/testing.md. The pytest plugin (markers and fixtures) is
:mod:`actorllm.testing.pytest_plugin`, loaded automatically through ``pytest11``.
"""

from actorllm.testing.actor_faults import Fault, inject_fault, wait_idle

__all__ = ["Fault", "inject_fault", "wait_idle"]
