"""/pooling on the reward models: rewards per token, STEP pooling's fields honoured on a
process reward model, and refused (400, OpenAI's body naming the field) on another."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.reward_models import reference_logits, reward_checkpoint

STEP_TAG = 7
PROMPT = [5, 9, STEP_TAG, 12, 30, STEP_TAG, 40]


def _serve(path: str, **kwargs: object) -> ServerThread:
    app = build_app(
        lambda: AsyncEngine.open(path, dtype="float32", served_model_name="rm", **kwargs),
        AppSettings(log_interval_s=0),
    )
    return ServerThread(app).start(timeout_s=240)


@pytest.fixture(scope="module")
def orm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerThread]]:
    path = reward_checkpoint(tmp_path_factory.mktemp("orm"), "Qwen2ForRewardModel", 1)
    server = _serve(path)
    yield path, server
    server.stop()
    assert server.error is None


def test_rewards_per_token(orm: tuple[str, ServerThread]) -> None:
    path, srv = orm
    r = httpx.post(srv.url + "/pooling", json={"model": "rm", "input": PROMPT}, timeout=60)
    assert r.status_code == 200, r.text
    got = torch.tensor(r.json()["data"][0]["data"])
    assert got.shape == (len(PROMPT), 1)
    assert torch.allclose(got, reference_logits(path, PROMPT), atol=1e-4)


@pytest.mark.parametrize(
    ("field", "value"), [("step_tag_id", STEP_TAG), ("returned_token_ids", [0])]
)
def test_step_fields_refused_without_step_pooling(
    orm: tuple[str, ServerThread], field: str, value: object
) -> None:
    _, srv = orm
    r = httpx.post(
        srv.url + "/pooling", json={"model": "rm", "input": PROMPT, field: value}, timeout=60
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field and err["code"] == 400 and err["type"] == "BadRequestError"
    assert err["message"] == (
        f"Task token_classify only supports ['use_activation'] parameters, does not support "
        f"['{field}'] parameters"
    )


def test_step_fields_on_a_process_reward_model(tmp_path: Path) -> None:
    path = reward_checkpoint(tmp_path, "Qwen2ForProcessRewardModel", 2)
    want = reference_logits(path, PROMPT)[[2, 5]]
    srv = _serve(path)
    try:
        body = {"model": "rm", "input": PROMPT, "step_tag_id": STEP_TAG,
                "returned_token_ids": [1, 0]}  # fmt: skip
        r = httpx.post(srv.url + "/pooling", json=body, timeout=60)
        assert r.status_code == 200, r.text
        got = torch.tensor(r.json()["data"][0]["data"])
        assert torch.allclose(got, want[:, [1, 0]].softmax(-1), atol=1e-4)
        body["returned_token_ids"] = [2]
        r = httpx.post(srv.url + "/pooling", json=body, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "returned_token_ids"
    finally:
        srv.stop()
    assert srv.error is None


def test_invocations_answers_as_pooling(orm: tuple[str, ServerThread]) -> None:
    """vLLM's /invocations for a model whose task is neither embed nor classify: /pooling."""
    _, srv = orm
    body = {"model": "rm", "input": PROMPT}
    pooled = httpx.post(srv.url + "/pooling", json=body, timeout=60).json()
    r = httpx.post(srv.url + "/invocations", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["data"] == pooled["data"] and r.json()["object"] == pooled["object"]
