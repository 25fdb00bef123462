"""Project-wide test configuration: async tests run on both anyio backends by default."""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

import anyio
import pytest

# pytest-timeout's own reading of a test's settings (it has no public form).
from pytest_timeout import _get_item_settings


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


def _share_the_cpus_between_workers() -> None:
    """Each pytest-xdist worker (and every process its tests start) gets its share of the
    usable CPUs as torch threads, one each on two cores: two workers whose OpenMP teams
    each take every core spin against each other between parallel regions. The tiny
    models of the suite gain nothing from a second thread. ``OMP_NUM_THREADS`` set by the
    caller wins."""
    from tests.helpers.suite_report import worker_threads

    share = worker_threads(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    if share is None:
        return
    os.environ["OMP_NUM_THREADS"] = str(share)
    import torch

    torch.set_num_threads(share)


# pytester: tests/testing runs small suites through the actorllm plugin in-process.
# suite_report: the machine and the time per test file at the end of every run.
pytest_plugins = ["pytester", "tests.helpers.suite_report"]


def pytest_configure(config: pytest.Config) -> None:
    _share_the_cpus_between_workers()  # before any test starts a process


@pytest.fixture
def float_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weight-only linears keep their inputs in float (``VLLM_CPU_INT4_W4A8=0`` for 4-bit
    weights, ``ACTORLLM_CPU_GGUF_A8=0`` for GGUF's 8-bit blocks; engine processes started
    by the test inherit them): for tests that compare a checkpoint's tokens exactly with
    its dequantized weights' (the defaults round the inputs to int8 too; the kernels' own
    tests bound the difference)."""
    monkeypatch.setenv("ACTORLLM_CPU_INT4_W4A8", "0")
    monkeypatch.setenv("ACTORLLM_CPU_GGUF_A8", "0")


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every ``@pytest.mark.anyio`` test runs once on trio (the reference) and once on asyncio."""
    return str(request.param)


# An async test gets this much less than its pytest-timeout limit as an anyio deadline.
DEADLINE_MARGIN_S = 15.0


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> None:
    """Run every anyio test under ``anyio.fail_after`` a little inside its timeout.

    pytest-timeout's signal method cannot end a hung trio test: anyio runs trio in guest
    mode, the alarm's exception lands in the host loop, and the run then waits forever for
    the guest to finish (seen: one hung test made CI run out its 90 minutes). A deadline
    inside the test's own event loop cancels it there, so a hang fails that one test and
    the rest of the suite runs."""
    limit = _timeout_s(pyfuncitem)
    test = pyfuncitem.obj
    if limit is None or not inspect.iscoroutinefunction(test):
        return
    if "anyio_backend" not in pyfuncitem.funcargs:
        return
    deadline = max(limit - DEADLINE_MARGIN_S, limit * 0.8)

    @functools.wraps(test)
    async def bounded(*args: Any, **kwargs: Any) -> Any:
        with anyio.fail_after(deadline):
            return await test(*args, **kwargs)

    pyfuncitem.obj = bounded  # anyio's own hook (next) runs it


def _timeout_s(item: pytest.Function) -> float | None:
    """The test's pytest-timeout limit, as that plugin reads it (marker, ``--timeout``,
    ``PYTEST_TIMEOUT``, ini); None without one."""
    limit = _get_item_settings(item).timeout
    return limit if limit is not None and limit > 0 else None
