"""The scale-out routes' server: the fake engine behind ``--enable-scale-out``, on trio
and on asyncio (a test module may bring its own ``engine``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def server(engine: FakeEngine, request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    srv = start_server(engine, worker_class=request.param, enable_scale_out=True)
    yield srv
    srv.stop()
    assert srv.error is None
