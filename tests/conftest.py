"""Project-wide test configuration: async tests run on both anyio backends by default."""

from __future__ import annotations

import os

import pytest


def _set_triton_interpreter() -> None:
    """Triton picks interpreter or compiler when it is first imported, so decide before any
    test module can import it: without a CUDA device, kernels run in the interpreter."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


_set_triton_interpreter()

# pytester: tests/testing runs small suites through the actorllm plugin in-process.
pytest_plugins = ["pytester"]


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every ``@pytest.mark.anyio`` test runs once on trio (the reference) and once on asyncio."""
    return str(request.param)
