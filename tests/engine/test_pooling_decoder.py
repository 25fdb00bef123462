"""Decoder models as pooling models (``--runner pooling --convert embed|classify``): a tiny
random Qwen3 as an embedder (last-token and mean pooling, prompts chunked by a small token
budget) and as a classifier (``Qwen3ForSequenceClassification``), against transformers'
own forward."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest
import torch

from actorllm.core.pooling_params import PoolingParams
from actorllm.demo import demo_tokenizer_path
from actorllm.engine import AsyncEngine
from tests.helpers.models import make_tiny_checkpoint, tiny_config

pytestmark = pytest.mark.anyio

PROMPTS = [[5 + (i * 7 + j) % 3000 for j in range(n)] for i, n in enumerate([3, 17, 40, 9, 33])]


def _with_tokenizer(path: Path) -> str:
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return str(path)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("qwen3-embed"), "qwen3", vocab_size=4096)
    return _with_tokenizer(path)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> str:
    import transformers

    path = tmp_path_factory.mktemp("qwen3-cls")
    cfg = tiny_config("qwen3", vocab_size=4096, num_labels=3, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.Qwen3ForSequenceClassification(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3 if p.dim() > 1 else 0.1)
    model.save_pretrained(path)
    return _with_tokenizer(path)


def _hf_hidden(path: str, ids: list[int]) -> torch.Tensor:
    import transformers

    model = transformers.AutoModel.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).last_hidden_state[0]  # [L, H]


async def _encode_all(engine: AsyncEngine, task: str) -> list[torch.Tensor]:
    out: dict[int, torch.Tensor] = {}

    async def one(i: int) -> None:
        prompt = {"prompt_token_ids": PROMPTS[i]}
        async for r in engine.encode(prompt, PoolingParams(task=task)):  # type: ignore[arg-type]
            out[i] = r.outputs.data

    async with anyio.create_task_group() as tg:
        for i in range(len(PROMPTS)):
            tg.start_soon(one, i)
    return [out[i] for i in range(len(PROMPTS))]


@pytest.mark.parametrize("pooling_type", ["LAST", "MEAN"])
async def test_qwen3_embedder_matches_transformers(embedder: str, pooling_type: str) -> None:
    async with AsyncEngine.open(
        embedder, runner="pooling", convert="embed", dtype="float32",
        max_num_batched_tokens=16, pooler_config={"pooling_type": pooling_type},
    ) as engine:  # fmt: skip
        got = await _encode_all(engine, "embed")
        assert engine.pooling_model is not None and engine.pooling_model.tasks[0] == "embed"
    for ids, vec in zip(PROMPTS, got, strict=True):
        h = _hf_hidden(embedder, ids)
        row = h[-1] if pooling_type == "LAST" else h.mean(0)
        want = torch.nn.functional.normalize(row, dim=0)
        assert torch.allclose(vec, want, atol=1e-4), (vec - want).abs().max()


async def test_qwen3_token_embeddings_keep_every_chunk(embedder: str) -> None:
    """token_embed returns a row per prompt token however the prompt was chunked: with
    last-token pooling (the decoder embedder's default) the earlier chunks' rows must be
    kept for it too."""
    async with AsyncEngine.open(
        embedder, runner="pooling", convert="embed", dtype="float32", max_num_batched_tokens=16
    ) as engine:  # fmt: skip
        got = await _encode_all(engine, "token_embed")
    for ids, rows in zip(PROMPTS, got, strict=True):
        want = torch.nn.functional.normalize(_hf_hidden(embedder, ids), dim=-1)  # [L, H]
        assert rows.shape == want.shape
        assert torch.allclose(rows, want, atol=1e-4), (rows - want).abs().max()


async def test_qwen3_classifier_matches_transformers(classifier: str) -> None:
    import transformers

    hf = transformers.AutoModelForSequenceClassification.from_pretrained(
        classifier, dtype=torch.float32
    ).eval()
    async with AsyncEngine.open(classifier, dtype="float32", max_num_batched_tokens=16) as engine:
        pm = engine.pooling_model
        assert pm is not None and pm.tasks == ("classify", "token_classify") and pm.num_labels == 3
        got = await _encode_all(engine, "classify")
    for ids, probs in zip(PROMPTS, got, strict=True):
        with torch.no_grad():
            want = hf(torch.tensor([ids])).logits[0].softmax(-1)
        assert torch.allclose(probs, want, atol=1e-4), (probs, want)


async def test_a_generative_model_refuses_pooling(embedder: str) -> None:
    from actorllm.engine import InvalidRequestError

    async with AsyncEngine.open(embedder, dtype="float32") as engine:
        assert engine.pooling_model is None
        with pytest.raises(InvalidRequestError) as info:
            async for _ in engine.encode("hi", PoolingParams()):
                pass
        assert info.value.param == "model"
