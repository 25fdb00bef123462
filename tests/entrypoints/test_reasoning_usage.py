"""usage.completion_tokens_details.reasoning_tokens: the reasoning text's tokens, never more
than the tokens generated (actorllm/entrypoints/openai/reasoning_usage.py)."""

from __future__ import annotations

from actorllm.entrypoints.openai.reasoning_usage import completion_details, reasoning_counter
from tests.entrypoints.fake_engine import demo_tokenizer


def test_counts_the_reasoning_texts_tokens() -> None:
    count = reasoning_counter(demo_tokenizer())
    details = completion_details(count, ["hello there", None, ""], completion_tokens=50)
    assert details is not None
    assert details.reasoning_tokens == count("hello there") > 0


def test_never_more_than_the_completion_tokens() -> None:
    """Broken characters re-tokenize into more tokens than were generated (a random
    byte-level model's reasoning): the count stops at what was generated."""
    count = reasoning_counter(demo_tokenizer())
    text = "\ufffd" * 40
    assert count(text) > 10
    details = completion_details(count, [text], completion_tokens=10)
    assert details is not None and details.reasoning_tokens == 10


def test_none_without_a_reasoning_parser() -> None:
    assert completion_details(None, ["x"], completion_tokens=3) is None
