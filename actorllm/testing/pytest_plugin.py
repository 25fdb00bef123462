"""The actorllm pytest plugin, registered through the ``pytest11`` entry point.

Every suite that installs actorllm gets:

* ``@pytest.mark.actorllm_both_backends`` on an ``async def`` test: run it on trio and on
  asyncio (it implies ``@pytest.mark.anyio``);
* ``@pytest.mark.actorllm_mock_clock``: run it on trio under a ``trio.testing.MockClock``
  with ``autojump_threshold=0`` — time jumps to the next deadline whenever every task is
  blocked, so timeouts and restart backoff take no real time;
* the ``mock_clock`` fixture: that clock (for ``mock_clock.jump(s)`` or reading time). In a
  test without the marker it is a fresh MockClock you can hand to anyio yourself::

      @pytest.fixture
      def anyio_backend(mock_clock):
          return ("trio", {"clock": mock_clock})

* fixtures ``inject_fault`` and ``wait_idle`` (the functions of the same names from
  :mod:`actorllm.testing.actor_faults`, for tests that prefer fixtures to imports);
* the module-scoped ``netns_cluster`` fixture: a 3-host Ray cluster in network namespaces
  (:mod:`actorllm.testing.netns_cluster`; root only, skipped elsewhere).

The two markers are applied at collection by adding ``anyio`` / ``usefixtures`` and a
direct ``parametrize`` of ``anyio_backend``, which takes precedence over any
``anyio_backend`` fixture of the suite.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from actorllm.testing import actor_faults

BACKENDS = ("trio", "asyncio")
BOTH_MARK = "actorllm_both_backends"
CLOCK_MARK = "actorllm_mock_clock"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{BOTH_MARK}: run this async test on the trio and the asyncio backends"
    )
    config.addinivalue_line(
        "markers",
        f"{CLOCK_MARK}: run this async test on trio under a MockClock(autojump_threshold=0)",
    )


def _has_mark(collector: pytest.Collector, obj: object, name: str) -> bool:
    own = getattr(obj, "pytestmark", ())
    return collector.get_closest_marker(name) is not None or any(m.name == name for m in own)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    if not (isinstance(collector, pytest.Module | pytest.Class) and inspect.isfunction(obj)):
        return
    if not (collector.istestfunction(obj, name) and inspect.iscoroutinefunction(obj)):
        return
    clock = _has_mark(collector, obj, CLOCK_MARK)
    both = _has_mark(collector, obj, BOTH_MARK)
    if not (clock or both):
        return
    pytest.mark.anyio(obj)
    pytest.mark.usefixtures("anyio_backend")(obj)
    if clock:
        backend = ("trio", {"clock": _new_mock_clock()})
        pytest.mark.parametrize("anyio_backend", [pytest.param(backend, id="trio-mockclock")])(obj)
    else:
        pytest.mark.parametrize("anyio_backend", list(BACKENDS))(obj)


def _new_mock_clock() -> Any:
    from trio.testing import MockClock

    return MockClock(autojump_threshold=0)


@pytest.fixture
def mock_clock(request: pytest.FixtureRequest) -> Any:
    """The test's ``trio.testing.MockClock`` (autojump), see the module docstring."""
    callspec = getattr(request.node, "callspec", None)
    backend = callspec.params.get("anyio_backend") if callspec is not None else None
    if isinstance(backend, tuple) and "clock" in backend[1]:
        return backend[1]["clock"]
    return _new_mock_clock()


@pytest.fixture(name="inject_fault")
def inject_fault_fixture() -> Iterator[Callable[..., actor_faults.Fault]]:
    """:func:`actorllm.testing.actor_faults.inject_fault`; faults are disarmed at teardown."""
    armed: list[actor_faults.Fault] = []

    def inject(*args: Any, **kwargs: Any) -> actor_faults.Fault:
        fault = actor_faults.inject_fault(*args, **kwargs)
        armed.append(fault)
        return fault

    yield inject
    for fault in armed:
        fault.remove()


@pytest.fixture(name="wait_idle")
def wait_idle_fixture() -> Callable[..., Any]:
    """:func:`actorllm.testing.actor_faults.wait_idle`."""
    return actor_faults.wait_idle


@pytest.fixture(scope="module", name="netns_cluster")
def netns_cluster_fixture() -> Iterator[Any]:
    """A 3-host Ray cluster in network namespaces for the module's tests (one CPU per
    host, the head in host 0; :class:`actorllm.testing.netns_cluster.NetnsCluster`), this
    process its driver. Skipped, saying why, where namespaces cannot be made (not root,
    no ``ip``, no CAP_NET_ADMIN) or Ray is not installed; removed after the module's
    last test whatever the tests did to it."""
    from actorllm.testing.netns import unavailable
    from actorllm.testing.netns_cluster import NetnsCluster

    if (reason := unavailable()) is not None:
        pytest.skip(reason)
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install actorllm[ray])")
    with NetnsCluster(hosts=3) as cluster:
        yield cluster
