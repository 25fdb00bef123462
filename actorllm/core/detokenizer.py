"""Incremental detokenization: token ids in, text deltas out.

Theory of operation: each request owns an :class:`IncrementalDetokenizer` wrapping a
``tokenizers.decoders.DecodeStream``, the incremental decoder maintained with the HF
``tokenizers`` library. The stream keeps a small window of recent ids and returns text only
once it decodes to valid text (no trailing U+FFFD), so a character whose UTF-8 bytes are
split across byte-level tokens is emitted whole, when its last byte arrives. Work per token
is proportional to that window, not to the output length. A byte-level tokenizer whose
table checks out (``core/byte_level.py``: every token a fixed run of bytes) skips the
stream: a token's text is a table lookup, and bytes that end inside a character wait until
it completes, which gives the same deltas at the same tokens (a test checks it step by
step) without a tokenizer call.

Contract (what :meth:`IncrementalDetokenizer.flush` guarantees): the concatenation of every
:meth:`~IncrementalDetokenizer.decode_next` result plus the final ``flush()`` equals
``tokenizer.decode(ids, skip_special_tokens=...)`` of the ids fed, decoded after the prompt
suffix used as context. For byte-level BPE tokenizers (the demo tokenizer, GPT-2, Llama 3,
Qwen) the context changes nothing, so the text equals the plain decode of the output ids.
For SentencePiece-style (Metaspace) tokenizers the context gives the first output token its
leading space, as the text reads after the prompt.

Special tokens: ``skip_special_tokens`` drops tokens the tokenizer marks special.
``spaces_between_special_tokens=False`` renders an added token that directly follows another
added token as its raw content, dropping any separator the tokenizer's decoder puts before
it (vLLM's behaviour); ``True`` (the default) keeps the decoder's output. Byte-level decoders
insert no separators, so for them both settings give the same text.

Deferred (``deferred=True``, for outputs nobody reads before the end): ``decode_next`` only
holds the ids, and ``flush`` feeds them to the stream in one ``DecodeStream.step`` call,
which gives the same text as feeding them one at a time (a test checks it).

The detokenizer does no I/O and holds no locks; one instance serves one request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from actorllm.core.byte_level import byte_level_table

_REPLACEMENT = "\ufffd"
# How many prompt tokens may prime the stream (vLLM's choice): enough context for spacing,
# short enough that priming is cheap.
_MIN_PREFILL = 4
_MAX_PREFILL = 24
# DecodeStream's error when a tokenizer decodes non-monotonically (vLLM issue 17448).
_INVALID_PREFIX = "Invalid prefix encountered"


def _prompt_context(tokenizer: Tokenizer, prompt_ids: Sequence[int], skip: bool) -> list[int]:
    """The shortest prompt suffix of 4..23 tokens that decodes without U+FFFD.

    A suffix that starts or ends inside a multi-byte character would leak bytes into the
    output text, so none is used when no clean suffix exists.
    """
    n = len(prompt_ids)
    for length in range(min(_MIN_PREFILL, n), min(_MAX_PREFILL, n) + 1):
        suffix = list(prompt_ids[n - length :])
        if suffix and _REPLACEMENT not in tokenizer.decode(suffix, skip_special_tokens=skip):
            return suffix
    return []


@final
class IncrementalDetokenizer:
    """Turns one request's output token ids into text, one token at a time.

    ``prompt_token_ids`` primes the stream with a clean suffix of the prompt (see
    ``_prompt_context``) so spacing depends on the real context.

        >>> from tokenizers import Tokenizer, models
        >>> tok = Tokenizer(models.WordLevel({"a": 0, "b": 1}, unk_token="a"))
        >>> d = IncrementalDetokenizer(tok, [])
        >>> d.decode_next(1) + d.flush()
        'b'
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        *,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        deferred: bool = False,
    ) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        # {token_id: content} of added tokens, only when their separators must be dropped.
        self._added: dict[int, str] = {}
        if not (skip_special_tokens or spaces_between_special_tokens):
            self._added = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}
        self._last_added = False
        # A byte-level tokenizer's table (core/byte_level.py): a token's text is a lookup,
        # its bytes wait in _pend while they end inside a character; no DecodeStream call
        # and no prompt context (byte-level text does not depend on it).
        table = None if self._added else byte_level_table(tokenizer, skip_special_tokens)
        self._table = table
        self._texts = None if table is None else table.token_text
        self._pend = b""  # bytes fed since the last text returned (table only)
        self._context: list[int] = []
        if table is None:
            self._context = _prompt_context(tokenizer, prompt_token_ids, skip_special_tokens)
        self._stream = DecodeStream(self._context or None, skip_special_tokens=skip_special_tokens)
        self._ids: list[int] = []  # every id fed, in order (DecodeStream only)
        self._text_len = 0  # characters returned so far (DecodeStream only)
        self._pending = 0  # ids fed since the stream last returned text (DecodeStream only)
        # Deferred: ids are only held, and decoded in one call at flush() (same text).
        self.deferred = deferred and not self._added
        self._held: list[int] = []
        # Deferred: hold one id for the decode at flush() (decode_next without its checks).
        self.hold = self._held.append

    def decode_next(self, token_id: int) -> str:
        """Feed one id; return the text it completes ('' while a character is incomplete,
        and always when deferred)."""
        if self.deferred:
            self._held.append(token_id)
            return ""
        texts = self._texts
        if texts is not None:  # the table: a whole token after whole text is a lookup
            if not self._pend:
                try:
                    text = texts[token_id]
                except IndexError:  # past the vocabulary: no text, as in a full decode
                    text = ""
                if text is not None:
                    return text
            return self._next_bytes(token_id)
        self._ids.append(token_id)
        try:  # DecodeStream.step inline: this runs once per token of every request
            text = self._stream.step(self._tokenizer, token_id)
        except Exception as exc:
            text = self._restart(token_id, exc)
        if self._added:
            content = self._added.get(token_id)
            if content is not None and self._last_added:
                text = content
            self._last_added = content is not None
        if text is None:
            self._pending += 1
            return ""
        self._pending = 0
        self._text_len += len(text)
        return text

    def flush(self) -> str:
        """Text still held by the stream (an incomplete character at the end), rendered as a
        full decode renders it (U+FFFD); when deferred, all the text. Call once, when the
        request finishes."""
        if self._table is not None:  # the table: what is pending, and every held id
            data, self._pend = self._pend + self._table.bytes_of(self._held), b""
            self._held.clear()
            return data.decode("utf-8", "replace")
        text = self._catch_up() if self._held else ""
        if not self._pending:
            return text
        self._pending = 0
        context = self._tokenizer.decode(self._context, skip_special_tokens=self._skip)
        full = self._tokenizer.decode(self._context + self._ids, skip_special_tokens=self._skip)
        if not full.startswith(context):
            return ""
        rest = full[len(context) + self._text_len :]
        self._text_len += len(rest)
        return text + rest

    def _next_bytes(self, token_id: int) -> str:
        """The table's slow case: bytes pending, or a token that ends inside a character.
        Text once the pending bytes decode to text that does not end in U+FFFD (when
        ``DecodeStream`` returns text), else '' and the bytes wait."""
        assert self._table is not None
        token_bytes = self._table.token_bytes  # (bytes_of for one id, without its list)
        data = self._pend + (token_bytes[token_id] if token_id < len(token_bytes) else b"")
        text = data.decode("utf-8", "replace")
        if not text or text[-1] == _REPLACEMENT:
            self._pend = data
            return ""
        self._pend = b""
        return text

    def _catch_up(self) -> str:
        """Decode the held ids in one ``DecodeStream.step`` (as many steps of one id each
        would); on the stream's invalid-prefix error, replay them one at a time."""
        held = self._held[:]
        self._held.clear()  # (the same list: ``hold`` appends to it)
        try:
            text = self._stream.step(self._tokenizer, held)
        except Exception as exc:
            if _INVALID_PREFIX not in str(exc):
                raise
            self._stream = DecodeStream(self._context or None, skip_special_tokens=self._skip)
            self.deferred = False  # (nothing was fed before: _ids is empty)
            return "".join([self.decode_next(token_id) for token_id in held])
        self._ids += held
        if text is None:
            self._pending += len(held)
            return ""
        self._pending = 0
        self._text_len += len(text)
        return text

    def _restart(self, token_id: int, exc: Exception) -> str | None:
        if _INVALID_PREFIX not in str(exc):
            raise exc
        # The stream's state is broken: start a fresh one at this token, as vLLM does.
        self._stream = DecodeStream(skip_special_tokens=self._skip)
        return self._stream.step(self._tokenizer, token_id)


@final
class TokenDecoder:
    """Decodes single token ids for logprobs' ``decoded_token`` (cached per id).

    Like vLLM, a token is decoded on its own with special tokens kept, so a byte-level
    token holding part of a character decodes to U+FFFD.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}  # {token_id: decoded text}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self._tokenizer.decode([token_id], skip_special_tokens=False)
            self._cache[token_id] = text
        return text
