"""Logprobs as callers see them: the worker's ``TokenLogprobs`` turned into vLLM's
``list[dict[int, Logprob]]``.

One position's dict holds the chosen token first (its own rank in the full distribution),
then the top-k tokens with ranks 1..k; the chosen token, when it is also in the top-k,
keeps its entry. ``decoded_token`` is the token decoded on its own (special tokens kept),
or None when the request does not detokenize.

Prompt logprobs: position 0 has no logprob (None); later positions arrive in chunks (one
per prefill chunk) and are appended in order.

With ``flat_logprobs`` both are kept as a :class:`FlatLogprobs` (vLLM's), which reads as
the list does (prompt position 0 then reads ``{}``, as in vLLM).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

from actorllm.core.logprob_types import (
    FlatLogprobs,
    Logprob,
    PromptLogprobs,
    SampleLogprobs,
    create_sample_logprobs,
)
from actorllm.core.model_runner_output import TokenLogprobs

DecodeFn = Callable[[int], str]


def logprob_dict(entry: TokenLogprobs, decode: DecodeFn | None) -> dict[int, Logprob]:
    """One position: ``{token_id: Logprob}``, chosen token first, then the top-k.

    >>> entry = TokenLogprobs(token_ids=[7, 3, 7], logprobs=[-1.5, -0.2, -1.5], rank=2)
    >>> d = logprob_dict(entry, None)
    >>> [(t, lp.rank) for t, lp in d.items()]
    [(7, 2), (3, 1)]
    """
    chosen = entry.token_ids[0]
    out = {
        chosen: Logprob(
            logprob=entry.logprobs[0], rank=entry.rank, decoded_token=_dec(decode, chosen)
        )
    }
    for rank, (token_id, logprob) in enumerate(
        zip(entry.token_ids[1:], entry.logprobs[1:], strict=True), 1
    ):
        if token_id not in out:
            out[token_id] = Logprob(
                logprob=logprob, rank=rank, decoded_token=_dec(decode, token_id)
            )
    return out


def _dec(decode: DecodeFn | None, token_id: int) -> str | None:
    return None if decode is None else decode(token_id)


@final
class SampleLogprobsState:
    """The sampled tokens' logprobs of one request, and their running sum.

    ``logprobs`` and ``cumulative_logprob`` are None when the request did not ask for
    logprobs (vLLM's convention). Entries stay aligned with the output token ids.
    """

    def __init__(
        self, num_logprobs: int | None, decode: DecodeFn | None, flat: bool = False
    ) -> None:
        self._decode = decode
        self.logprobs: SampleLogprobs | None = (
            None if num_logprobs is None else create_sample_logprobs(flat)
        )
        self.cumulative_logprob: float | None = None if num_logprobs is None else 0.0

    def append(self, entries: Sequence[TokenLogprobs] | None) -> None:
        if self.logprobs is None or not entries:
            return
        assert self.cumulative_logprob is not None
        for entry in entries:
            self.logprobs.append(logprob_dict(entry, self._decode))
            self.cumulative_logprob += entry.logprobs[0]


@final
class PromptLogprobsState:
    """A request's prompt logprobs, accumulated across prefill chunks.

    ``pop_new()`` serves DELTA outputs: the positions not yet handed out.
    """

    def __init__(
        self, num_prompt_logprobs: int | None, decode: DecodeFn | None, flat: bool = False
    ) -> None:
        self._decode = decode
        # Position 0 is None; it is added with the first chunk so an unfinished prefill with
        # no chunk yet reports [] rather than a lone None.
        self.logprobs: PromptLogprobs | None = (
            None if num_prompt_logprobs is None else FlatLogprobs() if flat else []
        )
        self._sent = 0  # positions handed out by pop_new()

    def append(self, entries: Sequence[TokenLogprobs] | None) -> None:
        if self.logprobs is None or entries is None:
            return
        if not self.logprobs:
            self.logprobs.append(None)
        self.logprobs.extend(logprob_dict(e, self._decode) for e in entries)

    def snapshot(self) -> PromptLogprobs | None:
        """Every position so far (a copy), or None when not requested."""
        return None if self.logprobs is None else self.logprobs[:]

    def pop_new(self) -> PromptLogprobs | None:
        """Positions added since the previous ``pop_new()``; None when not requested."""
        if self.logprobs is None:
            return None
        new = self.logprobs[self._sent :]
        self._sent = len(self.logprobs)
        return new
