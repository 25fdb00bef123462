"""Dev mode's weight-transfer routes (vLLM's RL router): payloads, answers and status
codes on the scripted engine, and one real push over HTTP into a tiny model."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from safetensors.torch import load_file

from actorllm.demo import demo_tokenizer_path
from actorllm.distributed.weight_transfer import (
    GlooTrainerInitInfo,
    HTTPVLLMWeightSyncClient,
    StateDictSource,
    WeightTransferTrainerFactory,
)
from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.testing.engine_harness import open_test_engine
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.models import make_tiny_checkpoint
from tests.helpers.trainers import free_port

ROUTES = [
    ("POST", "/init_weight_transfer_engine"),
    ("POST", "/start_weight_update"),
    ("POST", "/update_weights"),
    ("POST", "/finish_weight_update"),
    ("GET", "/weight_info"),
    ("GET", "/get_world_size"),
]


def _server(make, dev_mode: bool = True) -> ServerThread:
    return ServerThread(build_app(make, AppSettings(log_interval_s=0, dev_mode=dev_mode))).start(
        timeout_s=240
    )


@pytest.fixture(scope="module")
def scripted() -> Iterator[ServerThread]:
    srv = _server(lambda: open_test_engine(weight_transfer_backend="gloo"))
    yield srv
    srv.stop()
    assert srv.error is None


def test_the_routes_exist_only_in_dev_mode() -> None:
    srv = _server(lambda: open_test_engine(), dev_mode=False)
    try:
        for method, path in ROUTES:
            assert httpx.request(method, srv.url + path).status_code == 404
    finally:
        srv.stop()


def test_version_and_world_size(scripted: ServerThread) -> None:
    url = scripted.url
    assert httpx.get(url + "/weight_info").json() == {"weight_version": "default"}
    r = httpx.post(url + "/update_weight_version", json={"new_version": "v7"})
    assert r.json() == {"success": True, "new_version": "v7"}
    assert httpx.get(url + "/weight_info").json() == {"weight_version": "v7"}
    assert httpx.get(url + "/get_world_size").json() == {"world_size": 1}
    assert httpx.get(url + "/get_world_size?include_dp=false").json() == {"world_size": 1}
    assert httpx.get(url + "/get_world_size?include_dp=maybe").status_code == 400


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/start_weight_update", None, 409, "init_weight_transfer_engine first"),
        ("/finish_weight_update", {"weight_version": "x"}, 409, "init_weight_transfer_engine"),
        ("/update_weights", {"update_info": {}}, 409, "init_weight_transfer_engine first"),
        ("/update_weights", {"update_info": 3}, 400, "update_info"),
        ("/init_weight_transfer_engine", {}, 400, "init_info"),
        ("/init_weight_transfer_engine", {"init_info": {}, "x": 1}, 400, "x"),
        ("/init_weight_transfer_engine", {"init_info": {"world_size": 2}}, 400, "no weights"),
        ("/update_weight_version", {}, 400, "new_version"),
    ],
)
def test_bad_calls_are_clear_errors_and_the_engine_goes_on(
    scripted: ServerThread, path: str, body: object, status: int, words: str
) -> None:
    r = httpx.post(scripted.url + path, json=body)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]
    assert httpx.get(scripted.url + "/health").status_code == 200


def test_not_configured_is_a_400_naming_weight_transfer_config() -> None:
    srv = _server(lambda: open_test_engine())
    try:
        r = httpx.post(srv.url + "/start_weight_update")
        assert r.status_code == 400 and "weight_transfer_config" in r.json()["error"]["message"]
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    paths = []
    for seed in (0, 1):
        path = make_tiny_checkpoint(
            tmp_path_factory.mktemp(f"tiny{seed}"), "llama", seed=seed, vocab_size=4096,
            eos_token_id=0, max_position_embeddings=512,
        )  # fmt: skip
        for f in demo_tokenizer_path().iterdir():
            shutil.copy(f, path / f.name)
        paths.append(path)
    return paths[0], paths[1]


def test_a_trainer_pushes_weights_over_http(tiny: tuple[Path, Path]) -> None:
    old, new = tiny
    settings = dict(weight_transfer_backend="gloo", max_model_len=256, kv_cache_memory_bytes=2**23)
    srv = _server(lambda: AsyncEngine.open(str(old), **settings))
    body = {"model": str(old), "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}
    try:
        before = httpx.post(srv.url + "/v1/completions", json=body, timeout=60).json()
        trainer = WeightTransferTrainerFactory.trainer_init(
            GlooTrainerInitInfo(master_address="127.0.0.1", master_port=free_port(), world_size=2),
            client=HTTPVLLMWeightSyncClient(srv.url),
            source=StateDictSource(load_file(new / "model.safetensors")),
        )
        trainer.send_weights(weight_version="http-1")
        after = httpx.post(srv.url + "/v1/completions", json=body, timeout=60).json()
        assert httpx.get(srv.url + "/weight_info").json() == {"weight_version": "http-1"}
        assert before["choices"][0]["text"] != after["choices"][0]["text"]
        trainer.shutdown()
        r = httpx.post(srv.url + "/shutdown_weight_transfer_engine")
        assert r.json() == {"message": "Weight transfer shut down"}
    finally:
        srv.stop()
