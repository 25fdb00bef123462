"""LoRA over HTTP on a tiny real Llama, with the ``openai`` client: ``--lora-modules``
adapters in ``/v1/models`` (``parent`` the base model) and in the ``model`` field (tokens
equal peft's); an unknown model is a 404 with OpenAI's body; adapters loaded and unloaded
at run time (``ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING``), under ``--api-key``; a bad adapter
is a 500 naming it (vLLM's status) and the server keeps serving; without the switch the
routes are 404."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from actorllm.entrypoints.openai.lora_models import parse_lora_modules
from tests.engine.conftest import _tiny_llama
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.lora import ATTN_PROJ, make_adapter, peft_greedy

KEY = "sk-lora"
PROMPT = [11, 42, 97, 300, 5]
MAX_TOKENS = 5


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Llama with the demo tokenizer (tests/engine's tiny_model)."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=0)


@pytest.fixture(scope="module")
def adapters(base_model: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("http-lora")
    return {
        "sql": make_adapter(base_model, d / "sql", r=8, seed=11),
        "chat": make_adapter(base_model, d / "chat", targets=ATTN_PROJ, r=4, seed=12),
    }


@pytest.fixture(scope="module")
def want(base_model: str, adapters: dict[str, Path]) -> dict[str, list[int]]:
    rows = {n: (p, PROMPT) for n, p in adapters.items()}
    return peft_greedy(base_model, {"base": (None, PROMPT), **rows}, MAX_TOKENS)


@pytest.fixture(scope="module")
def server(base_model: str, adapters: dict[str, Path]) -> Iterator[ServerThread]:
    os.environ["ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "true"  # read as the app is built
    try:
        app = build_app(
            lambda: AsyncEngine.open(
                base_model, served_model_name="base", max_model_len=128,
                kv_cache_memory_bytes=2 * 2**20, enable_lora=True, max_loras=2, dtype="float32",
            ),
            AppSettings(log_interval_s=0, api_key=KEY, lora_modules=[
                f"sql={adapters['sql']}",
            ]),
        )  # fmt: skip
    finally:
        del os.environ["ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING"]
    srv = ServerThread(app).start(timeout_s=240)
    yield srv
    srv.stop()
    assert srv.error is None


def _tokens(client: openai.OpenAI, model: str) -> list[int]:
    r = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0, logprobs=0,
        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
    )  # fmt: skip
    assert r.model == model
    lp = r.choices[0].logprobs
    assert lp is not None and lp.tokens is not None
    return [int(t.removeprefix("token_id:")) for t in lp.tokens]


def test_served_adapters_listed_and_used(server: ServerThread, want: dict[str, list[int]]) -> None:
    with openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0) as client:
        cards = {m.id: m for m in client.models.list().data}
        assert set(cards) == {"base", "sql"}
        assert cards["sql"].model_extra is not None and cards["sql"].model_extra["parent"] == "base"
        assert _tokens(client, "sql") == want["sql"]
        assert _tokens(client, "base") == want["base"]
        with pytest.raises(openai.NotFoundError) as info:
            client.completions.create(model="nope", prompt="hi", max_tokens=1)
        assert info.value.status_code == 404
        body = info.value.body
        assert isinstance(body, dict)
        assert body["message"] == "The model `nope` does not exist." and body["param"] == "model"
        assert body["type"] == "NotFoundError"


def test_model_cards_as_vllms(server: ServerThread, base_model: str) -> None:
    """vLLM's ModelCard: root is the base model as given (not its served name), created is
    the listing's time, and every card has one permission entry."""
    before = int(time.time())
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    cards = {c["id"]: c for c in r.json()["data"]}
    assert cards["base"]["root"] == base_model and cards["base"]["parent"] is None
    assert cards["sql"]["parent"] == "base"
    for card in cards.values():
        assert before <= card["created"] <= int(time.time())
        (perm,) = card["permission"]
        assert perm["object"] == "model_permission" and perm["id"].startswith("modelperm-")
        assert (perm["allow_sampling"], perm["allow_logprobs"], perm["organization"]) == (
            True, True, "*",
        )  # fmt: skip


def test_load_and_unload_at_run_time(
    server: ServerThread, adapters: dict[str, Path], want: dict[str, list[int]], tmp_path: Path
) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    load = server.url + "/v1/load_lora_adapter"
    unload = server.url + "/v1/unload_lora_adapter"
    body = {"lora_name": "chat", "lora_path": str(adapters["chat"])}
    assert httpx.post(load, json=body).status_code == 401  # covered by --api-key
    r = httpx.post(load, json=body, headers=auth)
    assert r.status_code == 200 and r.text == "Success: LoRA adapter 'chat' added successfully."
    again = httpx.post(load, json=body, headers=auth)
    assert again.status_code == 400 and "already been loaded" in again.json()["error"]["message"]
    (tmp_path / "adapter_config.json").write_text("{}")  # there, but no weights: vLLM's 500
    bad = httpx.post(load, json={"lora_name": "bad", "lora_path": str(tmp_path)}, headers=auth)
    assert bad.status_code == 500 and bad.json()["error"]["type"] == "InternalServerError"
    assert "'bad'" in bad.json()["error"]["message"]
    assert "not a PEFT adapter directory" in bad.json()["error"]["message"]
    with openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0) as client:
        assert {m.id for m in client.models.list().data} == {"base", "sql", "chat"}
        assert _tokens(client, "chat") == want["chat"]  # the server kept serving
        r = httpx.post(unload, json={"lora_name": "chat"}, headers=auth)
        assert r.status_code == 200 and r.text.endswith("removed successfully.")
        assert httpx.post(unload, json={"lora_name": "chat"}, headers=auth).status_code == 404
        with pytest.raises(openai.NotFoundError):
            _tokens(client, "chat")
        assert _tokens(client, "sql") == want["sql"]


def test_no_adapter_at_the_path_is_vllms_404(server: ServerThread, tmp_path: Path) -> None:
    """vLLM's LoRAAdapterNotFoundError: no directory, or one without adapter_config.json."""
    auth = {"Authorization": f"Bearer {KEY}"}
    for path in (str(tmp_path / "missing"), str(tmp_path)):
        body = {"lora_name": "ghost", "lora_path": path}
        r = httpx.post(server.url + "/v1/load_lora_adapter", json=body, headers=auth)
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert err["message"] == f"Loading lora ghost failed: No adapter found for {path}"
        assert (err["type"], err["code"]) == ("NotFoundError", 404)
    r = httpx.get(server.url + "/v1/models", headers=auth)
    assert "ghost" not in {m["id"] for m in r.json()["data"]}


def test_runtime_routes_are_404_without_the_switch() -> None:
    assert "ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING" not in os.environ
    srv = start_server(FakeEngine())
    try:
        r = httpx.post(srv.url + "/v1/load_lora_adapter", json={"lora_name": "a"})
        assert r.status_code == 404
    finally:
        srv.stop()


def test_lora_modules_spellings() -> None:
    (a, b) = parse_lora_modules(
        ["sql=/a/sql", '{"name": "chat", "path": "/a/chat", "base_model_name": "m"}']
    )
    assert (a.name, a.path, a.base_model_name) == ("sql", "/a/sql", None)
    assert (b.name, b.path, b.base_model_name) == ("chat", "/a/chat", "m")
    with pytest.raises(ValueError, match="--lora-modules: invalid entry 'sql'"):
        parse_lora_modules(["sql"])
    # vLLM's LoRAModulePath fields, is_3d_lora_weight included; an unknown key is refused.
    (c,) = parse_lora_modules(['{"name": "c", "path": "/a/c", "is_3d_lora_weight": false}'])
    assert (c.name, c.is_3d_lora_weight) == ("c", False)
    with pytest.raises(ValueError, match="base_model"):
        parse_lora_modules(['{"name": "c", "path": "/a/c", "base_model": "m"}'])


def test_is_3d_lora_weight_in_the_load_body(
    server: ServerThread, adapters: dict[str, Path]
) -> None:
    """vLLM's load body field: false loads as usual, true is refused naming it."""
    auth = {"Authorization": f"Bearer {KEY}"}
    load = server.url + "/v1/load_lora_adapter"
    body = {"lora_name": "sql3d", "lora_path": str(adapters["sql"]), "is_3d_lora_weight": True}
    r = httpx.post(load, json=body, headers=auth)
    assert r.status_code == 400 and r.json()["error"]["param"] == "is_3d_lora_weight"
    r = httpx.post(load, json={**body, "is_3d_lora_weight": False}, headers=auth)
    assert r.status_code == 200, r.text
    r = httpx.post(
        server.url + "/v1/unload_lora_adapter", json={"lora_name": "sql3d"}, headers=auth
    )
    assert r.status_code == 200


def test_sagemaker_adapter_routes(
    server: ServerThread, adapters: dict[str, Path], want: dict[str, list[int]]
) -> None:
    """SageMaker's spelling (vLLM mounts it beside /v1/load_lora_adapter): POST /adapters
    {name, src}, DELETE /adapters/{name}, and /invocations on the adapter its header names."""
    auth = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(server.url + "/adapters", json={"name": "sm", "src": str(adapters["chat"])})
    assert r.status_code == 200 and r.text == "Adapter sm registered"
    body = {
        "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0, "logprobs": 0,
        "ignore_eos": True, "return_tokens_as_token_ids": True,
    }  # fmt: skip
    headers = {**auth, "X-Amzn-SageMaker-Adapter-Identifier": "sm"}
    r = httpx.post(server.url + "/invocations", json=body, headers=headers, timeout=60)
    assert r.status_code == 200 and r.json()["model"] == "sm"
    tokens = r.json()["choices"][0]["logprobs"]["tokens"]
    assert [int(t.removeprefix("token_id:")) for t in tokens] == want["chat"]
    missing = httpx.post(server.url + "/adapters", json={"name": "x", "src": "/not/there"})
    assert missing.status_code == 404
    assert httpx.post(server.url + "/adapters", json={"name": "x", "src": ""}).status_code == 400
    r = httpx.delete(server.url + "/adapters/sm")
    assert r.status_code == 200 and r.text == "Adapter sm unregistered"
    assert httpx.delete(server.url + "/adapters/sm").status_code == 404
