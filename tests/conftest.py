"""Project-wide test configuration: async tests run on both anyio backends by default."""

from __future__ import annotations

import pytest

# pytester: tests/testing runs small suites through the actorllm plugin in-process.
pytest_plugins = ["pytester"]


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every ``@pytest.mark.anyio`` test runs once on trio (the reference) and once on asyncio."""
    return str(request.param)
