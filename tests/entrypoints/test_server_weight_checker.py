"""vLLM 0.32's RL routes beside weight transfer, on a tiny real model in dev mode:
``/weight_checker`` (checksum, reset, compare), ``/abort_requests``, and
``/start_draft_weight_update`` refused by name."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import httpx
import pytest

from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.testing.engine_harness import open_test_engine
from tests.engine.conftest import tiny_model
from tests.entrypoints.server_thread import ServerThread

__all__ = ["tiny_model"]  # the fixture


@pytest.fixture(scope="module")
def dev(tiny_model: str) -> Iterator[ServerThread]:
    engine = lambda: AsyncEngine.open(  # noqa: E731
        tiny_model, max_model_len=256, kv_cache_memory_bytes=4 * 2**20, dtype="float32",
        served_model_name="tiny",
    )  # fmt: skip
    srv = ServerThread(build_app(engine, AppSettings(log_interval_s=0, dev_mode=True))).start(
        timeout_s=240
    )
    yield srv
    srv.stop()
    assert srv.error is None


def check(srv: ServerThread, **body: object) -> dict:
    r = httpx.post(srv.url + "/weight_checker", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_checksum_compare_and_reset(dev: ServerThread) -> None:
    sums = check(dev, action="checksum")["checksums"]
    assert sums and all(k.startswith("dp0:pp0:pcp0:tp0:") for k in sums)
    assert any(k.endswith("embed_tokens.weight") for k in sums)
    assert check(dev, action="compare", baseline=sums) == {"match": True, "mismatches": []}
    tampered = {**sums, "dp0:pp0:pcp0:tp0:nope": "0"}
    assert check(dev, action="compare", baseline=tampered)["mismatches"] == [
        "dp0:pp0:pcp0:tp0:nope"
    ]
    r = httpx.post(dev.url + "/weight_checker", json={"action": "compare"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "baseline"
    r = httpx.post(dev.url + "/weight_checker", json={"action": "sum"}, timeout=60)
    assert r.status_code == 400
    assert check(dev, action="reset") == {"status": "reset"}
    after = check(dev, action="compare", baseline=sums)
    assert not after["match"] and set(after["mismatches"]) == set(sums)  # every weight zeroed


@pytest.fixture(scope="module")
def slow_dev() -> Iterator[ServerThread]:
    # the scripted model at 10 ms a step: requests are still running when aborted
    app = build_app(
        lambda: open_test_engine(step_delay_s=0.01),
        AppSettings(log_interval_s=0, dev_mode=True),
    )
    srv = ServerThread(app).start()
    yield srv
    srv.stop()
    assert srv.error is None


def test_abort_requests_and_draft_updates(slow_dev: ServerThread) -> None:
    dev = slow_dev
    results: list[dict] = []

    async def run() -> None:
        async with httpx.AsyncClient(base_url=dev.url, timeout=60) as client:

            async def one(i: int) -> None:
                body = {"model": "scripted", "prompt": f"abort {i}", "max_tokens": 200,
                        "ignore_eos": True}  # fmt: skip
                results.append((await client.post("/v1/completions", json=body)).json())

            async with anyio.create_task_group() as tg:
                for i in range(2):
                    tg.start_soon(one, i)
                running = 'num_requests_running{engine="0",model_name="scripted"} 2.0'
                with anyio.fail_after(30):  # both in the engine before the abort
                    while running not in (await client.get("/metrics")).text:
                        await anyio.sleep(0.01)
                r = await client.post("/abort_requests", json={})
                assert r.json() == {"status": "aborted", "aborted": 2}

    anyio.run(run)
    assert [r["choices"][0]["finish_reason"] for r in results] == ["abort", "abort"]
    r = httpx.post(dev.url + "/abort_requests", json={"request_ids": ["nobody"]})
    assert r.json() == {"status": "aborted", "aborted": 1}  # unknown ids: nothing to do
    r = httpx.post(dev.url + "/start_draft_weight_update")
    assert r.status_code == 400 and "draft model" in r.json()["error"]["message"]
