"""Logprob types, as vLLM's ``vllm/logprobs.py``: ``Logprob``, the list forms, and
``FlatLogprobs``.

``FlatLogprobs``: a request's logprobs in a few flat lists instead of one dict per
position (``SamplingParams(flat_logprobs=True)``), for a constant number of objects
whatever the output length.

It reads as the list form does (``list[dict[int, Logprob]]``): ``len``, indexing (a
``{token_id: Logprob}`` dict), slicing (another ``FlatLogprobs``), iteration, ``==`` with
a list of the same dicts. It only grows (``append``, ``extend``, ``+``); positions cannot
be set or deleted (vLLM's rule).

    >>> flat = FlatLogprobs()
    >>> flat.append({7: Logprob(logprob=-0.5, rank=1)})
    >>> flat.append(None)  # a position with no logprobs (prompt position 0): {}
    >>> len(flat), flat[0][7].logprob, flat[1], len(flat[:1])
    (2, -0.5, {}, 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSequence
from typing import Any, overload

import msgspec


class Logprob(msgspec.Struct, kw_only=True):
    logprob: float
    rank: int | None = None  # 1-based rank in the vocabulary distribution
    decoded_token: str | None = None


LogprobsOnePosition = dict[int, Logprob]


class FlatLogprobs(msgspec.Struct, kw_only=True):
    """Position ``i`` holds entries ``start_indices[i]:end_indices[i]`` of the flat lists."""

    start_indices: list[int] = msgspec.field(default_factory=list)
    end_indices: list[int] = msgspec.field(default_factory=list)
    token_ids: list[int] = msgspec.field(default_factory=list)
    logprobs: list[float] = msgspec.field(default_factory=list)
    ranks: list[int | None] = msgspec.field(default_factory=list)
    decoded_tokens: list[str | None] = msgspec.field(default_factory=list)

    @classmethod
    def of(cls, positions: Iterable[LogprobsOnePosition | None]) -> FlatLogprobs:
        flat = cls()
        flat.extend(positions)
        return flat

    def append(self, position: LogprobsOnePosition | None) -> None:
        """The next position's logprobs (None or {}: a position without any)."""
        self.start_indices.append(len(self.logprobs))
        for token_id, lp in (position or {}).items():
            self.token_ids.append(token_id)
            self.logprobs.append(lp.logprob)
            self.ranks.append(lp.rank)
            self.decoded_tokens.append(lp.decoded_token)
        self.end_indices.append(len(self.logprobs))

    def extend(self, positions: Iterable[LogprobsOnePosition | None]) -> None:
        for position in positions:
            self.append(position)

    def __len__(self) -> int:
        return len(self.start_indices)

    @overload
    def __getitem__(self, index: int) -> LogprobsOnePosition: ...

    @overload
    def __getitem__(self, index: slice) -> FlatLogprobs: ...

    def __getitem__(self, index: int | slice) -> LogprobsOnePosition | FlatLogprobs:
        if isinstance(index, slice):
            starts, ends = self.start_indices[index], self.end_indices[index]
            if index.step not in (None, 1):
                return FlatLogprobs.of(self[i] for i in range(len(self))[index])
            if not starts:
                return FlatLogprobs()
            lo, hi = starts[0], ends[-1]
            return FlatLogprobs(
                start_indices=[i - lo for i in starts],
                end_indices=[i - lo for i in ends],
                token_ids=self.token_ids[lo:hi],
                logprobs=self.logprobs[lo:hi],
                ranks=self.ranks[lo:hi],
                decoded_tokens=self.decoded_tokens[lo:hi],
            )
        if not isinstance(index, int):
            raise TypeError(f"Invalid index type: {type(index)}")
        return {
            self.token_ids[i]: Logprob(
                logprob=self.logprobs[i], rank=self.ranks[i], decoded_token=self.decoded_tokens[i]
            )
            for i in range(self.start_indices[index], self.end_indices[index])
        }

    def __iter__(self) -> Iterator[LogprobsOnePosition]:
        for i in range(len(self)):
            yield self[i]

    def __add__(self, other: Iterable[LogprobsOnePosition | None]) -> FlatLogprobs:
        out = self[:]
        out.extend(other)
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FlatLogprobs | list):
            return len(self) == len(other) and all(
                a == (b or {}) for a, b in zip(self, other, strict=True)
            )
        return NotImplemented

    def __setitem__(self, index: Any, value: Any) -> None:
        raise TypeError("Cannot set logprobs in FlatLogprobs")

    def __delitem__(self, index: Any) -> None:
        raise TypeError("Cannot delete logprobs from FlatLogprobs")

    def insert(self, index: int, value: Any) -> None:
        raise TypeError("Cannot insert logprobs to FlatLogprobs")


MutableSequence.register(FlatLogprobs)  # isinstance(flat, Sequence) as vLLM's subclass

# One dict per position: {token_id: Logprob}; the chosen token is always present.
SampleLogprobs = FlatLogprobs | list[LogprobsOnePosition]
# Prompt logprobs: position 0 has no logprob (None in the list form, {} in the flat one).
PromptLogprobs = FlatLogprobs | list[LogprobsOnePosition | None]


def concat_logprobs(a: Any, b: Any) -> Any:
    """``a`` then ``b`` (two pieces of one request's sample or prompt logprobs, so both
    lists or both :class:`FlatLogprobs`; ``b`` may be None)."""
    if isinstance(a, FlatLogprobs):
        return a + (b or [])
    return a + list(b or [])


def create_prompt_logprobs(flat_logprobs: bool) -> FlatLogprobs | list[LogprobsOnePosition | None]:
    """vLLM's: an empty prompt-logprobs container holding position 0 (no logprob)."""
    logprobs: FlatLogprobs | list[LogprobsOnePosition | None] = (
        FlatLogprobs() if flat_logprobs else []
    )
    logprobs.append(None)
    return logprobs


def create_sample_logprobs(flat_logprobs: bool) -> FlatLogprobs | list[LogprobsOnePosition]:
    """vLLM's: an empty container for the sampled tokens' logprobs."""
    return FlatLogprobs() if flat_logprobs else []
