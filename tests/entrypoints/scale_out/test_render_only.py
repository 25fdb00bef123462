"""``actorllm launch render`` (vLLM's GPU-less render server): a model directory holding
only config.json and a tokenizer (no weights) is served for rendering and derendering, on
trio and asyncio; the routes that need an engine do not exist; what it cannot serve is
refused by name at launch."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from actorllm.demo import demo_tokenizer_path
from actorllm.engine.config import EngineConfig
from actorllm.engine.config.errors import EngineConfigError
from actorllm.entrypoints import cli
from actorllm.entrypoints.openai.app import build_app
from actorllm.entrypoints.openai.app.render_only_paths import RENDER_ONLY_PATHS
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.scale_out.render_only import RenderOnlyEngine, RenderOnlyError
from tests.entrypoints.server_thread import ServerThread
from tests.helpers.models import make_tiny_checkpoint

HI = [{"role": "user", "content": "hi there"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """config.json and the demo tokenizer (with its chat template): no weights."""
    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("render") / "m", "qwen2", vocab_size=4096,
        max_position_embeddings=128,
    )  # fmt: skip
    for weights in path.glob("*.safetensors*"):
        weights.unlink()
    for f in demo_tokenizer_path().iterdir():  # the demo's, with its chat template
        shutil.copy(f, path / f.name)
    return path


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def server(request: pytest.FixtureRequest, model_dir: Path) -> Iterator[ServerThread]:
    config = EngineConfig(model=str(model_dir), served_model_name="tiny")
    app = build_app(
        lambda: RenderOnlyEngine.open(config), AppSettings(render_only=True, log_interval_s=0)
    )
    srv = ServerThread(app, worker_class=request.param).start()
    yield srv
    srv.stop()
    assert srv.error is None


def test_render_and_derender_without_weights(server: ServerThread, model_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(model_dir)
    with server.client() as c:
        r = c.post("/v1/chat/completions/render", json={"model": "tiny", "messages": HI})
        assert r.status_code == 200, r.text
        ids = tok.apply_chat_template(HI, add_generation_prompt=True, tokenize=True)
        assert r.json()["token_ids"] == list(ids.get("input_ids", ids))
        r = c.post("/v1/completions/render", json={"model": "tiny", "prompt": "hello world"})
        assert r.json()[0]["token_ids"] == tok("hello world")["input_ids"]
        out = tok("fine, thanks", add_special_tokens=False)["input_ids"]
        body = {"model": "tiny", "request_id": "r1", "prompt_token_ids": [[1, 2]],
                "generate_responses": [{"request_id": "r1", "choices": [
                    {"index": 0, "token_ids": out, "finish_reason": "length"}]}]}  # fmt: skip
        r = c.post("/v1/completions/derender", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == tok.decode(out)
        assert c.post("/tokenize", json={"prompt": "hello world"}).json()["count"] == len(
            tok("hello world")["input_ids"]
        )
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["tiny"]
        assert c.get("/v1/models").json()["data"][0]["max_model_len"] == 128
        assert c.get("/health").status_code == 200
        assert c.get("/metrics").status_code == 200


def test_routes_that_need_an_engine_do_not_exist(server: ServerThread) -> None:
    with server.client() as c:
        for path in ("/v1/chat/completions", "/v1/completions", "/inference/v1/generate",
                     "/v1/embeddings", "/sleep"):  # fmt: skip
            assert c.post(path, json={}).status_code == 404, path
        assert set(c.get("/openapi.json").json()["paths"]) <= RENDER_ONLY_PATHS


@pytest.mark.anyio
async def test_refuses_what_it_cannot_serve(model_dir: Path) -> None:
    with pytest.raises(EngineConfigError, match="runner"):
        async with RenderOnlyEngine.open(EngineConfig(model=str(model_dir), runner="pooling")):
            pass
    async with RenderOnlyEngine.open(EngineConfig(model=str(model_dir))) as engine:
        with pytest.raises(RenderOnlyError, match="generate: this is a render-only server"):
            engine.generate  # noqa: B018 - the attribute itself is refused


@pytest.mark.parametrize(
    "flags, named",
    [(["--dev-mode"], "--dev-mode"), (["--lora-modules", "a=/x"], "--lora-modules")],
)
def test_launch_refuses_engine_only_flags(
    flags: list[str], named: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert cli.main(["launch", "render", *flags]) == 2
    assert named in caplog.text
