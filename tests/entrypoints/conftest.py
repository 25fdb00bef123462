"""Fixtures: the app on a real hypercorn server (module scope), over the fake engine.

Switching the end-to-end tests to the real engine is the one line in ``engine_factory``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any

import pytest

from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.fake_engine import FakeEngine, open_fake_engine
from tests.entrypoints.server_thread import ServerThread


def engine_factory(engine: FakeEngine) -> AbstractAsyncContextManager[Any]:
    # Real engine: `return AsyncEngine.open(str(demo_model_path()), max_model_len=256)`.
    return open_fake_engine(engine)


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine(token_delay_s=0.001)


@contextmanager
def real_server(model: str, **engine_kwargs: Any) -> Iterator[ServerThread]:
    """``AsyncEngine.open(model, **engine_kwargs)`` served on a thread; on exit it stops,
    and the server must not have failed."""
    from actorllm.engine import AsyncEngine

    app = build_app(lambda: AsyncEngine.open(model, **engine_kwargs), AppSettings(log_interval_s=0))
    srv = ServerThread(app).start(timeout_s=240)
    try:
        yield srv
    finally:
        srv.stop()
    assert srv.error is None


def start_server(engine: FakeEngine, worker_class: str = "trio", **settings: Any) -> ServerThread:
    app = build_app(lambda: engine_factory(engine), AppSettings(log_interval_s=0, **settings))
    return ServerThread(app, worker_class=worker_class).start()


@pytest.fixture(scope="module")
def server(engine: FakeEngine) -> Iterator[ServerThread]:
    srv = start_server(engine)
    yield srv
    srv.stop()
    assert srv.error is None
