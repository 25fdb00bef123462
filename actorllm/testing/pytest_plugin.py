"""The actorllm pytest plugin, registered through the ``pytest11`` entry point.

It gives every suite that installs actorllm:

* the ``actorllm_both_backends`` marker: run an async test on trio and on asyncio;
* fixtures ``mock_clock`` (trio's MockClock with autojump) and ``actor_harness``.

The fuller harness (fault injection, ``wait_idle``) lives in :mod:`actorllm.testing`.
"""

from __future__ import annotations

import pytest

BACKENDS = ("trio", "asyncio")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "actorllm_both_backends: run this async test on the trio and the asyncio anyio backends",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("actorllm_both_backends") is None:
        return
    if "anyio_backend" in metafunc.fixturenames and not _is_parametrized(metafunc):
        metafunc.parametrize("anyio_backend", BACKENDS, indirect=True)


def _is_parametrized(metafunc: pytest.Metafunc) -> bool:
    return any("anyio_backend" in c.params for c in metafunc._calls)
