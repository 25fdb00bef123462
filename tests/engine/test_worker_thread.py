import threading
import time

import anyio
import pytest

from actorllm.worker.worker_thread import WorkerThread

pytestmark = pytest.mark.anyio


async def test_jobs_run_in_order_on_one_dedicated_thread():
    worker = WorkerThread()
    worker.start()
    try:
        idents = [await worker.call(threading.get_ident) for _ in range(3)]
        assert len(set(idents)) == 1 and idents[0] != threading.get_ident()
        order: list[int] = []
        done = anyio.Event()
        for i in range(5):
            worker.submit(lambda i=i: order.append(i))
        worker.submit(lambda: None, lambda _outcome: done.set())
        await done.wait()
        assert order == [0, 1, 2, 3, 4]
    finally:
        worker.stop()
    assert not worker.is_alive()


async def test_exceptions_come_back_to_the_caller():
    worker = WorkerThread()
    worker.start()
    try:
        with pytest.raises(KeyError):
            await worker.call(lambda: {}["missing"])
        assert await worker.call(lambda: 42) == 42  # the thread survived
    finally:
        worker.stop()


async def test_the_loop_stays_responsive_during_a_long_job():
    worker = WorkerThread()
    worker.start()
    try:
        finished = anyio.Event()
        worker.submit(lambda: time.sleep(0.3), lambda _o: finished.set())
        t0 = time.perf_counter()
        await anyio.sleep(0.01)
        assert time.perf_counter() - t0 < 0.1  # not stuck behind the 300 ms job
        await finished.wait()
    finally:
        worker.stop()
