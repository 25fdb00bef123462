"""The two things a grammar backend provides: compile a spec, and match tokens against it.

A :class:`GrammarBackend` is built once per engine over the tokenizer; :meth:`compile` is
thread-safe and may be slow (it runs in the compile pool, never on the event loop);
:meth:`matcher` is cheap and gives each request its own :class:`Matcher`. Bitmasks are
numpy ``int32`` arrays ``[rows, ceil(vocab_size / 32)]``: bit ``t % 32`` of word ``t // 32``
set means token ``t`` is allowed (the layout both xgrammar and llguidance fill).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

import numpy as np

from actorllm.core.structured_outputs_params import (
    BACKEND_CHOICES,
    BackendChoice,
    GrammarKey,
    StructuredOutputsError,
)

__all__ = ["BACKEND_CHOICES", "BackendChoice", "BackendName", "Matcher"]

BackendName = Literal["xgrammar", "guidance"]


class UnsupportedFeatureError(StructuredOutputsError):
    """The spec is valid but uses a feature this backend cannot enforce (``auto`` then
    tries the other backend)."""


class Matcher(Protocol):
    """One request's position in its grammar. Not thread-safe; one owner."""

    def accept(self, token_id: int) -> bool:
        """Advance by one token; False (and no change) if the grammar forbids it."""
        ...

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""
        ...

    def fill_bitmask(self, bitmask: np.ndarray, row: int) -> None:
        """Write the allowed next tokens into ``bitmask[row]`` ([R, W] int32)."""
        ...

    def is_terminated(self) -> bool:
        """The grammar is complete and its stop token was accepted."""
        ...


class CompiledGrammar(Protocol):
    @property
    def backend(self) -> BackendName: ...


class GrammarBackend(Protocol):
    name: BackendName

    def compile(self, key: GrammarKey) -> CompiledGrammar:
        """Compile ``key`` for this tokenizer. Thread-safe, may take a while. Raises
        :class:`StructuredOutputsError` for a bad spec and
        :class:`UnsupportedFeatureError` for a spec this backend cannot enforce."""
        ...

    def matcher(self, compiled: Any) -> Matcher: ...


def fill_bitmasks(matchers: Sequence[Matcher], bitmask: np.ndarray, rows: Sequence[int]) -> None:
    """``matchers[i].fill_bitmask(bitmask, rows[i])`` for every ``i``; a backend whose
    matcher class has a ``fill_bitmasks`` static method fills all its rows in one call
    (xgrammar: one native call that releases the GIL, instead of a Python call per row)."""
    by_kind: dict[type, tuple[list[Matcher], list[int]]] = {}
    for matcher, row in zip(matchers, rows, strict=True):
        group = by_kind.setdefault(type(matcher), ([], []))
        group[0].append(matcher)
        group[1].append(row)
    for kind, (group_matchers, group_rows) in by_kind.items():
        batch = getattr(kind, "fill_bitmasks", None)
        if batch is not None:
            batch(group_matchers, bitmask, group_rows)
        else:
            for matcher, row in zip(group_matchers, group_rows, strict=True):
                matcher.fill_bitmask(bitmask, row)


def bitmask_width(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def allowed_tokens(bitmask_row: np.ndarray, vocab_size: int) -> list[int]:
    """The token ids a bitmask row allows (for tests and debugging)."""
    bits = np.unpackbits(bitmask_row.view(np.uint8), bitorder="little")[:vocab_size]
    return np.flatnonzero(bits).tolist()
