"""The metrics endpoint beside a run with no server: the event loop refreshes, a thread
answers every GET path with the last body, and cancelling the refresh stops the server."""

from __future__ import annotations

import anyio
import httpx
import pytest

from actorllm.engine.api.stats import EngineStats
from actorllm.engine.metrics.endpoint import MetricsEndpoint
from actorllm.engine.metrics.prometheus import ServerMetrics


class _Engine:
    def __init__(self) -> None:
        self.running = 0

    async def get_stats(self) -> EngineStats:
        return EngineStats(num_running_reqs=self.running)


def _running(url: str) -> str:
    text = httpx.get(url, timeout=10).text
    return next(line for line in text.splitlines() if line.startswith("vllm:num_requests_running"))


@pytest.mark.anyio
async def test_scrapes_see_the_refreshed_figures_until_cancelled() -> None:
    engine = _Engine()
    endpoint = MetricsEndpoint(ServerMetrics("m", prefix="vllm"), "127.0.0.1", 0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(endpoint.refresh_forever, engine, 0.01)
        engine.running = 3
        await anyio.sleep(0.1)
        line = await anyio.to_thread.run_sync(_running, endpoint.url + "/any/path")
        assert line.endswith(" 3.0")
        tg.cancel_scope.cancel()
    with pytest.raises(httpx.ConnectError):
        await anyio.to_thread.run_sync(_running, endpoint.url)
