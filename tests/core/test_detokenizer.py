"""Incremental detokenization on the demo tokenizer (byte-level BPE)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models

from actorllm.core.detokenizer import IncrementalDetokenizer, TokenDecoder
from tests.helpers.tokenizers import IM_END_ID, IM_START_ID, VOCAB_SIZE, demo_tokenizer

REPLACEMENT = "\ufffd"


def stream(detok: IncrementalDetokenizer, ids: list[int]) -> list[str]:
    return [detok.decode_next(i) for i in ids]


def test_multibyte_characters_split_across_tokens_are_emitted_whole() -> None:
    tok = demo_tokenizer()
    text = "ok 龘 and 🦜 and 𝔘 done"
    ids = tok.encode(text, add_special_tokens=False).ids
    # The rare characters really are split: some single tokens decode to U+FFFD.
    assert any(REPLACEMENT in tok.decode([i]) for i in ids)
    detok = IncrementalDetokenizer(tok, [])
    deltas = stream(detok, ids)
    assert all(REPLACEMENT not in d for d in deltas)
    assert "" in deltas  # some tokens completed no character yet
    assert "龘" in deltas and any("🦜" in d for d in deltas)
    assert "".join(deltas) + detok.flush() == text


def test_cjk_emitted_when_its_last_byte_arrives() -> None:
    tok = demo_tokenizer()
    ids = tok.encode("龘", add_special_tokens=False).ids
    assert len(ids) >= 2
    detok = IncrementalDetokenizer(tok, tok.encode("Hello", add_special_tokens=False).ids)
    assert stream(detok, ids) == [""] * (len(ids) - 1) + ["龘"]


def test_flush_renders_an_incomplete_character_like_decode() -> None:
    tok = demo_tokenizer()
    ids = tok.encode("a龘", add_special_tokens=False).ids[:-1]  # cut inside the character
    detok = IncrementalDetokenizer(tok, [])
    streamed = "".join(stream(detok, ids))
    assert REPLACEMENT not in streamed
    tail = detok.flush()
    assert tail and tail.endswith(REPLACEMENT)
    assert streamed + tail == tok.decode(ids)
    assert detok.flush() == ""  # nothing is flushed twice


def test_skip_special_tokens() -> None:
    tok = demo_tokenizer()
    ids = [*tok.encode("hi", add_special_tokens=False).ids, IM_END_ID, IM_START_ID]
    kept = IncrementalDetokenizer(tok, [], skip_special_tokens=False)
    assert "".join(stream(kept, ids)) == "hi<|im_end|><|im_start|>"
    skipped = IncrementalDetokenizer(tok, [], skip_special_tokens=True)
    assert "".join(stream(skipped, ids)) == "hi"


def test_prompt_ending_inside_a_character_is_not_used_as_context() -> None:
    tok = demo_tokenizer()
    ids = tok.encode("龘", add_special_tokens=False).ids
    # The prompt ends with the first byte(s) of 龘; the output holds the rest.
    detok = IncrementalDetokenizer(tok, ids[:1])
    out = ids[1:]
    assert "".join(stream(detok, out)) + detok.flush() == tok.decode(out)


@settings(max_examples=150, deadline=None)
@given(
    prompt=st.lists(st.integers(0, VOCAB_SIZE - 1), max_size=8),
    ids=st.lists(
        # Mostly byte tokens (ids 3..258), so split characters are frequent.
        st.one_of(st.integers(0, VOCAB_SIZE - 1), st.integers(3, 258)),
        max_size=24,
    ),
    skip=st.booleans(),
    spaces=st.booleans(),
)
def test_stream_equals_full_decode(
    prompt: list[int], ids: list[int], skip: bool, spaces: bool
) -> None:
    tok = demo_tokenizer()
    detok = IncrementalDetokenizer(
        tok, prompt, skip_special_tokens=skip, spaces_between_special_tokens=spaces
    )
    text = "".join(stream(detok, ids)) + detok.flush()
    assert text == tok.decode(ids, skip_special_tokens=skip)


def _word_tokenizer() -> Tokenizer:
    # A decoder that joins tokens with spaces (like WordPiece / SentencePiece decoders).
    tok = Tokenizer(models.WordLevel({"a": 0, "b": 1, "<s>": 2, "</s>": 3}, unk_token="a"))
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(["<s>", "</s>"])
    return tok


def test_prompt_context_gives_the_first_token_its_space() -> None:
    tok = _word_tokenizer()
    with_context = IncrementalDetokenizer(tok, [0, 0, 0, 0])
    assert stream(with_context, [1, 0]) == [" b", " a"]
    without = IncrementalDetokenizer(tok, [])
    assert stream(without, [1, 0]) == ["b", " a"]


def test_spaces_between_special_tokens_false_drops_the_separator() -> None:
    tok = _word_tokenizer()
    ids = [1, 2, 3, 1]
    spaced = IncrementalDetokenizer(tok, [0] * 4, skip_special_tokens=False)
    assert "".join(stream(spaced, ids)) == " b <s> </s> b"
    tight = IncrementalDetokenizer(
        tok, [0] * 4, skip_special_tokens=False, spaces_between_special_tokens=False
    )
    assert "".join(stream(tight, ids)) == " b <s></s> b"


@settings(max_examples=150, deadline=None)
@given(
    prompt=st.lists(st.integers(0, VOCAB_SIZE - 1), max_size=8),
    ids=st.lists(st.one_of(st.integers(0, VOCAB_SIZE - 1), st.integers(3, 258)), max_size=24),
    skip=st.booleans(),
    spaces=st.booleans(),
    word=st.booleans(),
)
def test_deferred_gives_the_streamed_text(
    prompt: list[int], ids: list[int], skip: bool, spaces: bool, word: bool
) -> None:
    # Deferred (FINAL_ONLY): one decode at flush(), the same text as token by token.
    tok = _word_tokenizer() if word else demo_tokenizer()
    if word:
        prompt, ids = [i % 4 for i in prompt], [i % 4 for i in ids]
    kwargs = {"skip_special_tokens": skip, "spaces_between_special_tokens": spaces}
    streamed = IncrementalDetokenizer(tok, prompt, **kwargs)
    expected = "".join(stream(streamed, ids)) + streamed.flush()
    deferred = IncrementalDetokenizer(tok, prompt, deferred=True, **kwargs)
    # (Dropping separators between added tokens needs the stream: never deferred.)
    assert deferred.deferred == (skip or spaces)
    pieces = stream(deferred, ids)
    if deferred.deferred:
        assert pieces == [""] * len(ids)
    assert "".join(pieces) + deferred.flush() == expected
    assert deferred.flush() == ""


def test_token_decoder_keeps_special_tokens_and_caches() -> None:
    tok = demo_tokenizer()
    decode = TokenDecoder(tok)
    assert decode(IM_END_ID) == "<|im_end|>"
    the = tok.encode(" the", add_special_tokens=False).ids
    assert len(the) == 1 and decode(the[0]) == " the"
    byte_token = tok.encode("龘", add_special_tokens=False).ids[0]
    assert decode(byte_token) == REPLACEMENT
    assert decode(IM_END_ID) is decode(IM_END_ID)
