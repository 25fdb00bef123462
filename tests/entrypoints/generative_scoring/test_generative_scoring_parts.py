"""The parts of ``/generative_scoring`` with plain calls: the request's defaults, the two
normalisations, and how prompts are built (vLLM's unit tests' cases)."""

from __future__ import annotations

import math

import pytest

from actorllm.entrypoints.generative_scoring.probabilities import label_probabilities
from actorllm.entrypoints.generative_scoring.prompts import item_prompts
from actorllm.entrypoints.generative_scoring.protocol import GenerativeScoringRequest
from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.fields import decode_request
from tests.entrypoints.fake_engine import demo_tokenizer


def decode(raw: bytes) -> GenerativeScoringRequest:
    return decode_request(raw, GenerativeScoringRequest)


def test_defaults_are_vllms() -> None:
    req = decode(b'{"query": "q", "items": ["a", "b"], "label_token_ids": [1, 2]}')
    assert (req.apply_softmax, req.item_first, req.add_special_tokens) == (True, False, True)
    assert (req.model, req.cache_salt, req.priority, req.request_id) == (None, None, 0, None)
    ids = decode(b'{"query": [1, 2], "items": [[3], [4, 5]], "label_token_ids": [6]}')
    assert ids.query == [1, 2] and ids.items == [[3], [4, 5]]


@pytest.mark.parametrize(
    "logprobs", [{100: -1.0, 200: -2.0}, {100: -100.0, 200: -100.5}, {100: -800.0, 200: -801.0}]
)
def test_over_the_labels_sums_to_one_without_underflow(logprobs: dict[int, float]) -> None:
    probs = label_probabilities(logprobs, apply_softmax=True)
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-12)
    a, b = logprobs.values()
    assert probs[100] == pytest.approx(1 / (1 + math.exp(b - a)), rel=1e-12)


def test_over_the_vocabulary_is_the_models_probability() -> None:
    probs = label_probabilities({100: -1.0, 200: -2.0}, apply_softmax=False)
    assert probs == {100: pytest.approx(math.exp(-1.0)), 200: pytest.approx(math.exp(-2.0))}
    assert sum(probs.values()) < 1.0


@pytest.mark.parametrize(
    ("item_first", "expected"),
    [(False, [[100, 101, 200, 201], [100, 101, 300, 301]]),
     (True, [[200, 201, 100, 101], [300, 301, 100, 101]])],
)  # fmt: skip
def test_item_order(item_first: bool, expected: list[list[int]]) -> None:
    req = GenerativeScoringRequest(
        query=[100, 101], items=[[200, 201], [300, 301]], label_token_ids=[5],
        item_first=item_first,
    )  # fmt: skip
    assert item_prompts(req, None, vocab_size=4096, max_model_len=4096) == expected


def test_texts_items_get_no_special_tokens_and_prompts_are_cut() -> None:
    tok = demo_tokenizer()
    req = GenerativeScoringRequest(query="Hello there", items=["world"], label_token_ids=[5])
    (prompt,) = item_prompts(req, tok, vocab_size=4096, max_model_len=4)
    full = tok.encode("Hello there") + tok.encode("world", add_special_tokens=False)
    assert len(full) > 3 and prompt == full[:3]


def test_an_empty_prompt_is_refused() -> None:
    req = GenerativeScoringRequest(query=[], items=[[1], []], label_token_ids=[5])
    with pytest.raises(APIError, match="The decoder prompt cannot be empty"):
        item_prompts(req, None, vocab_size=4096, max_model_len=64)
