"""Byte-level token tables (core/byte_level.py): the streamed text of a byte-level tokenizer
without a tokenizer call per token, exactly ``DecodeStream``'s."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from tokenizers.decoders import DecodeStream

import actorllm.core.byte_level as byte_level
import actorllm.core.detokenizer as detokenizer
from actorllm.core.byte_level import byte_level_table, token_bytes_of
from actorllm.core.detokenizer import IncrementalDetokenizer
from tests.helpers.tokenizers import IM_END_ID, VOCAB_SIZE, demo_tokenizer


def reference(tok: Tokenizer, ids: list[int], skip: bool) -> list[str]:
    """What ``DecodeStream`` gives token by token ('' where it gives None)."""
    stream = DecodeStream(skip_special_tokens=skip)
    return [stream.step(tok, i) or "" for i in ids]


def _added_tokens_tokenizer() -> Tokenizer:
    """Byte-level, with added tokens outside the byte alphabet (a space, a non-ASCII
    character): the decoder takes those tokens' own UTF-8 bytes."""
    vocab = {"a": 0, "Ġb": 1, "Ã": 2, "©": 3, "c": 4}
    tok = Tokenizer(models.BPE(vocab, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken("hello world"), AddedToken("é x")])
    tok.add_special_tokens(["<s>"])
    return tok


def test_demo_tokenizer_has_a_table_and_other_decoders_do_not() -> None:
    tok = demo_tokenizer()
    table = byte_level_table(tok, True)
    assert table is not None and len(table.token_bytes) == VOCAB_SIZE
    assert table.token_bytes[IM_END_ID] == b""  # special, skipped
    kept = byte_level_table(tok, False)
    assert kept is not None and kept.token_bytes[IM_END_ID] == b"<|im_end|>"
    assert byte_level_table(tok, True) is table  # built once per tokenizer and flag
    word = Tokenizer(models.WordLevel({"a": 0, "b": 1}, unk_token="a"))
    word.decoder = decoders.WordPiece()
    assert byte_level_table(word, True) is None
    meta = Tokenizer(models.WordLevel({"▁a": 0, "b": 1}, unk_token="b"))
    meta.decoder = decoders.Metaspace()
    assert byte_level_table(meta, True) is None


def test_token_bytes_follow_the_byte_alphabet_or_the_tokens_own_utf8() -> None:
    assert token_bytes_of("Ġb") == b" b"
    assert token_bytes_of("Ã©") == "é".encode()
    assert token_bytes_of("hello world") == b"hello world"  # ' ' is outside the alphabet
    assert token_bytes_of("é x") == "é x".encode()


def test_a_table_that_disagrees_with_the_tokenizer_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tok = _added_tokens_tokenizer()
    monkeypatch.setattr(byte_level, "token_bytes_of", lambda token: token.encode("utf-8"))
    assert byte_level_table(tok, True) is None  # "Ġb" would read "Ġb", not " b"
    detok = IncrementalDetokenizer(tok, [])
    assert "".join(detok.decode_next(i) for i in [0, 1]) + detok.flush() == "a b"


def test_the_table_path_makes_no_decode_stream_step(monkeypatch: pytest.MonkeyPatch) -> None:
    tok = demo_tokenizer()
    text = "plain words, then 龘 and 🦜 split over byte tokens"
    ids = tok.encode(text, add_special_tokens=False).ids
    expected = reference(tok, ids, True)

    class NoStep:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def step(self, *args: object) -> str:
            raise AssertionError("DecodeStream.step called on the table path")

    monkeypatch.setattr(detokenizer, "DecodeStream", NoStep)
    detok = IncrementalDetokenizer(tok, tok.encode("Hello", add_special_tokens=False).ids)
    assert [detok.decode_next(i) for i in ids] == expected
    assert "".join(expected) + detok.flush() == text


@settings(max_examples=300, deadline=None)
@given(
    prompt=st.lists(st.integers(0, VOCAB_SIZE - 1), max_size=8),
    ids=st.lists(
        # Byte tokens (3..258) often, so characters split; ids past the vocabulary too.
        st.one_of(
            st.integers(0, VOCAB_SIZE - 1), st.integers(3, 258), st.integers(VOCAB_SIZE, 5000)
        ),
        max_size=32,
    ),
    skip=st.booleans(),
)
def test_each_step_gives_what_decode_stream_gives(
    prompt: list[int], ids: list[int], skip: bool
) -> None:
    tok = demo_tokenizer()
    detok = IncrementalDetokenizer(tok, prompt, skip_special_tokens=skip)
    assert detok._texts is not None  # (the table path is the one under test)
    deltas = [detok.decode_next(i) for i in ids]
    assert deltas == reference(tok, ids, skip)
    assert "".join(deltas) + detok.flush() == tok.decode(ids, skip_special_tokens=skip)


@settings(max_examples=100, deadline=None)
@given(ids=st.lists(st.integers(0, 8), max_size=16), skip=st.booleans())
def test_added_tokens_outside_the_alphabet(ids: list[int], skip: bool) -> None:
    tok = _added_tokens_tokenizer()
    assert byte_level_table(tok, skip) is not None
    detok = IncrementalDetokenizer(tok, [], skip_special_tokens=skip)
    deltas = [detok.decode_next(i) for i in ids]
    assert deltas == reference(tok, ids, skip)
    assert "".join(deltas) + detok.flush() == tok.decode(ids, skip_special_tokens=skip)
