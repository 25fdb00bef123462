"""``/generative_scoring`` runs on the engine's supervised path: a model step that crashes
while the items are scored is replayed from the ledger, and the answer is the one a run
without faults gives (the scripted model, trio and asyncio servers)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from actorllm.entrypoints.openai.app import AppSettings, app_state, build_app
from actorllm.testing import inject_fault, open_test_engine
from tests.entrypoints.server_thread import ServerThread
from tests.entrypoints.test_server_metrics import sample

BODY = {"query": "Is this the one? ", "items": ["yes", "no", "maybe"],
        "label_token_ids": [5, 6, 7]}  # fmt: skip


@pytest.fixture(params=["trio", "asyncio"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    engine = lambda: open_test_engine(max_restarts=10, restart_window_s=1.0)  # noqa: E731
    srv = ServerThread(build_app(engine, AppSettings(log_interval_s=0)), worker_class=request.param)
    srv.start()
    yield srv
    srv.stop()
    assert srv.error is None


@pytest.mark.parametrize("actor", ["worker", "scheduler", "output_processor"])
def test_a_crash_mid_scoring_changes_nothing(server: ServerThread, actor: str) -> None:
    url = server.url + "/generative_scoring"
    reference = httpx.post(url, json=BODY, timeout=30)
    assert reference.status_code == 200, reference.text
    seen: list[object] = []  # the message the actor crashes on

    def first(msg: object) -> bool:
        seen.append(msg)
        return True

    inject_fault(app_state(server.app).ctx.engine, actor, when=first)
    crashed = httpx.post(url, json=BODY, timeout=30)
    assert crashed.status_code == 200, crashed.text
    assert crashed.json()["data"] == reference.json()["data"]
    assert crashed.json()["usage"] == reference.json()["usage"]
    # It crashed and was restarted (a failed model step restarts the executor)
    restarted = "executor" if actor == "worker" else actor
    metrics = httpx.get(server.url + "/metrics").text
    assert seen
    assert (
        sample(metrics, "actorllm:actor_restarts_total", model_name="scripted", actor=restarted)
        >= 1
    )
