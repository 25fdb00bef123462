"""Byte-level token tables: a streamed token's text without a tokenizer call.

Theory of operation
-------------------
A byte-level BPE tokenizer (GPT-2, Llama 3, Qwen, the demo tokenizer) decodes by mapping
every token to a fixed run of bytes and the concatenation to text (UTF-8, an invalid or
incomplete sequence as U+FFFD). So a token's bytes never depend on its neighbours, and
incremental detokenization is a table lookup: most tokens are whole characters, whose text
is known in advance; a token that holds part of a character waits in a few pending bytes
until the character is complete. ``DecodeStream.step`` (what the detokenizer uses
otherwise) decodes a window of ids through the tokenizer on every token, ~1.5 µs a token
at 1024 streams, the largest single cost of a streamed (DELTA) output on this path.

:func:`byte_level_table` builds the table once per tokenizer and ``skip_special_tokens``,
from the tokenizer's own description, and only where it can prove the table exact: the
decoder is ``ByteLevel`` alone (a ``Sequence`` of just that included), and every id
decoded alone, plus sequences that split characters across tokens, decode through the
tokenizer to the same text as through the table. Anything else (SentencePiece ``Metaspace``
decoders, a check that disagrees) gets None, and the caller keeps ``DecodeStream``.

The table has two columns per id: ``token_bytes[id]``, its bytes (``b""`` for a special
token when skipping), and ``token_text[id]``, its text when those bytes are whole valid
UTF-8 that does not end in U+FFFD (what ``DecodeStream`` emits at once), else None. Ids
past the tokenizer's vocabulary (a model's padded embedding rows) decode to nothing, as the
tokenizer decodes them.

No I/O, no locks; a table is immutable once built and shared by every request of the
tokenizer.
"""

from __future__ import annotations

import json
import random
from collections import OrderedDict
from typing import final

from tokenizers import Tokenizer

_REPLACEMENT = "\ufffd"
# Tokenizers whose tables are kept (a process rarely has more than one or two).
_CACHE_SIZE = 8
# Sequences of ids decoded both ways before a table is trusted.
_CHECK_SEQUENCES = 64
_CHECK_LENGTH = 12


def _unicode_of_bytes() -> dict[int, str]:
    """The byte-level alphabet: byte -> the printable character that stands for it (GPT-2's
    ``bytes_to_unicode``; the same map in every byte-level tokenizer)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\xa1"), ord("\xac") + 1),
        *range(ord("\xae"), ord("\xff") + 1),
    ]
    out = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + shift)
            shift += 1
    return out


_BYTE_CHARS = _unicode_of_bytes()
# str.translate table: an alphabet character -> the latin-1 character of its byte; a
# latin-1 character outside the alphabet -> a marker above U+00FF, so that one such
# character makes the token's text fail ``encode("latin-1")`` (the decoder then takes the
# token's own UTF-8 bytes, as the tokenizer does).
_TO_LATIN1: dict[int, str] = {ord(c): chr(b) for b, c in _BYTE_CHARS.items()}
_OUTSIDE = "\u0100"
for _b in range(256):
    _TO_LATIN1.setdefault(_b, _OUTSIDE)


@final
class ByteLevelTable:
    """Per token id its bytes and, when they are whole text, that text (module doc)."""

    __slots__ = ("token_bytes", "token_text")

    def __init__(self, token_bytes: list[bytes]) -> None:
        self.token_bytes = token_bytes
        self.token_text: list[str | None] = [_whole_text(b) for b in token_bytes]

    def bytes_of(self, ids: list[int]) -> bytes:
        """The bytes of ``ids`` (ids past the vocabulary: none, as the tokenizer decodes)."""
        token_bytes, n = self.token_bytes, len(self.token_bytes)
        return b"".join([token_bytes[i] for i in ids if 0 <= i < n])

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids`` (what ``tokenizer.decode`` gives)."""
        return self.bytes_of(ids).decode("utf-8", "replace")


def _whole_text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if text.endswith(_REPLACEMENT) else text


def token_bytes_of(token: str) -> bytes:
    """One token's bytes under the ``ByteLevel`` decoder: each character of the byte-level
    alphabet is its byte; a token with any other character is its own UTF-8."""
    mapped = token.translate(_TO_LATIN1)
    try:
        return mapped.encode("latin-1")
    except UnicodeEncodeError:
        return token.encode("utf-8")


_cache: OrderedDict[tuple[int, bool], tuple[Tokenizer, ByteLevelTable | None]] = OrderedDict()


def byte_level_table(tokenizer: Tokenizer, skip_special_tokens: bool) -> ByteLevelTable | None:
    """The table of ``tokenizer`` (cached), or None where it is not byte-level or the
    checks of the module doc fail."""
    key = (id(tokenizer), skip_special_tokens)
    hit = _cache.get(key)
    if hit is not None and hit[0] is tokenizer:
        _cache.move_to_end(key)
        return hit[1]
    table = _build(tokenizer, skip_special_tokens)
    _cache[key] = (tokenizer, table)  # holds the tokenizer: its id stays its own
    while len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return table


def _build(tokenizer: Tokenizer, skip: bool) -> ByteLevelTable | None:
    if not _byte_level_decoder(tokenizer):
        return None
    added = tokenizer.get_added_tokens_decoder()
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    size = max([size, *(i + 1 for i in added)])
    token_bytes: list[bytes] = []
    for i in range(size):
        special = added.get(i)
        if special is not None and special.special and skip:
            token_bytes.append(b"")
            continue
        token = tokenizer.id_to_token(i)
        token_bytes.append(b"" if token is None else token_bytes_of(token))
    table = ByteLevelTable(token_bytes)
    return table if _agrees(tokenizer, table, skip) else None


def _byte_level_decoder(tokenizer: Tokenizer) -> bool:
    # The decoder's own JSON (its pickle state), not the whole tokenizer's (megabytes).
    component = tokenizer.decoder
    if component is None:
        return False
    try:
        decoder = json.loads(component.__getstate__())
    except (ValueError, TypeError, AttributeError):
        return False
    while isinstance(decoder, dict) and decoder.get("type") == "Sequence":
        parts = decoder.get("decoders") or []
        if len(parts) != 1:
            return False
        decoder = parts[0]
    return isinstance(decoder, dict) and decoder.get("type") == "ByteLevel"


def _agrees(tokenizer: Tokenizer, table: ByteLevelTable, skip: bool) -> bool:
    """Every id alone, and sequences mixing partial-character tokens with whole ones, decode
    to the same text through the tokenizer and through the table. (``decode`` one at a
    time, not ``decode_batch``: the batch call starts the tokenizers thread pool, which a
    later fork of the process warns about and disables.)"""
    decode = tokenizer.decode
    for i in range(len(table.token_bytes)):
        if table.decode([i]) != decode([i], skip_special_tokens=skip):
            return False
    partial = [i for i, text in enumerate(table.token_text) if text is None]
    whole = [i for i, text in enumerate(table.token_text) if text]
    if not (partial or whole):
        return True
    rng = random.Random(len(table.token_bytes))  # the same checks for the same tokenizer
    for _ in range(_CHECK_SEQUENCES):
        ids = [
            rng.choice(partial if partial and rng.random() < 0.5 else whole or partial)
            for _ in range(_CHECK_LENGTH)
        ]
        if table.decode(ids) != decode(ids, skip_special_tokens=skip):
            return False
    return True
