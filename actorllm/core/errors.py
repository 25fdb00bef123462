"""Typed errors of the engine core.

Errors a user can cause (an empty or too long prompt, a duplicate request id) derive from
:class:`InvalidRequestError`, a :class:`ValueError`, so the HTTP layer maps them to a 400
with an OpenAI-style body; ``param`` names the offending field. Errors that mean a bug in the
engine (an impossible status transition) are not ``ValueError``\\s.
"""

from __future__ import annotations


class InvalidRequestError(ValueError):
    """A request the engine refuses; ``param`` names the field at fault (OpenAI's ``param``)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class EmptyPromptError(InvalidRequestError):
    """The prompt has no tokens: there is nothing to compute logits from."""


class RequestTooLongError(InvalidRequestError):
    """The prompt (plus outputs so far, for a resumed request) does not fit max_model_len."""


class DuplicateRequestError(InvalidRequestError):
    """A request with this id is already open in the scheduler."""


class InvalidStatusTransitionError(RuntimeError):
    """A request was moved between statuses the transition table does not allow (a bug)."""
