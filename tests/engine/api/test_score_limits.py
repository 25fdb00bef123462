"""Per-side token limits and the context check of scored pairs (vLLM's rules and words)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from actorllm.core.errors import InvalidRequestError, RequestTooLongError
from actorllm.demo import demo_tokenizer_path
from actorllm.engine.api.score_limits import check_length, check_token_limit, truncate_text


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return AutoTokenizer.from_pretrained(demo_tokenizer_path())


def test_a_text_keeps_its_first_n_tokens_and_its_spelling(tok) -> None:  # type: ignore[no-untyped-def]
    text = "The capital of France is Paris. " * 10
    cut = truncate_text(text, tok, 10)
    assert text.startswith(cut)
    assert len(tok(cut, add_special_tokens=False)["input_ids"]) == 10
    assert truncate_text(text, tok, 0) == text  # 0: no cut
    assert truncate_text("short", tok, 50) == "short"


@pytest.mark.parametrize(
    ("value", "words"),
    [(-5, "max_tokens_per_doc must be a non-negative integer"),
     (100, "max_tokens_per_doc (100) must be less than max_model_len (100).")],
)  # fmt: skip
def test_limits_are_refused_by_name_in_vllms_words(value: int, words: str) -> None:
    with pytest.raises(InvalidRequestError) as e:
        check_token_limit(value, "max_tokens_per_doc", 100)
    assert str(e.value) == words and e.value.param == "max_tokens_per_doc"


def test_a_pair_over_the_context_is_vllms_renderer_refusal() -> None:
    check_length(100, 100, "text_1")
    with pytest.raises(RequestTooLongError, match="Please reduce the length of the input prompt"):
        check_length(101, 100, "text_1")
