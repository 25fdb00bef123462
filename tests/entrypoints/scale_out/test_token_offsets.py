"""``token_offsets``: each rendered id's span in the text it came from, kept in step with
truncation, and None where the ids are not the text's (plain calls, demo tokenizer)."""

from __future__ import annotations

from typing import Any

import pytest

from actorllm.entrypoints.scale_out.token_offsets import token_offsets
from tests.entrypoints.fake_engine import demo_tokenizer

TEXT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def tok() -> Any:
    return demo_tokenizer()


def _spans(tok: Any, ids: list[int], side: str | None = None) -> Any:
    return token_offsets(tok, TEXT, ids, add_special_tokens=False, truncation_side=side)


def test_each_id_gets_its_span(tok: Any) -> None:
    ids = tok.encode(TEXT, add_special_tokens=False)
    spans = _spans(tok, ids)
    assert len(spans) == len(ids)
    assert "".join(TEXT[s:e] for s, e in spans).replace(" ", "") == TEXT.replace(" ", "")
    assert spans[-1][1] == len(TEXT)


@pytest.mark.parametrize("side", [None, "left", "right"])
def test_truncation_keeps_the_kept_ids_spans(tok: Any, side: str | None) -> None:
    ids = tok.encode(TEXT, add_special_tokens=False)
    whole = _spans(tok, ids)
    kept = ids[:4] if side == "right" else ids[-4:]
    assert _spans(tok, kept, side) == (whole[:4] if side == "right" else whole[-4:])


def test_none_where_the_ids_are_not_the_texts(tok: Any) -> None:
    ids = tok.encode(TEXT, add_special_tokens=False)
    assert _spans(tok, [*ids[:-1], ids[-1] + 1]) is None  # e.g. a reused prompt
    assert _spans(tok, ids + ids) is None  # more ids than the text has
    assert token_offsets(tok, None, ids, add_special_tokens=False, truncation_side=None) is None


def test_none_for_a_tokenizer_without_offsets() -> None:
    class Slow:
        def __call__(self, text: str, **kw: Any) -> Any:
            raise NotImplementedError("return_offset_mapping is not available")

    assert token_offsets(Slow(), TEXT, [1], add_special_tokens=False, truncation_side=None) is None
