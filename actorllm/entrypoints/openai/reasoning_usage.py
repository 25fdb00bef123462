"""``usage.completion_tokens_details.reasoning_tokens`` (vLLM's, on a server with a reasoning
parser): how many of the output tokens are the model's reasoning.

Counted as the tokens of each choice's reasoning text (what the reasoning parser split
off, markers excluded) under the model's own tokenizer: the count the Responses API's
``output_tokens_details`` reports too. vLLM counts the generated tokens its parser saw in
the reasoning state; both count the same tokens wherever the reasoning re-tokenizes as it
was generated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from actorllm.entrypoints.openai.protocol.usage import CompletionTokensDetails

ReasoningCounter = Callable[[str | None], int]


def reasoning_counter(tokenizer: Any) -> ReasoningCounter:
    """A counter of reasoning text's tokens (None or empty: 0)."""

    def count(reasoning: str | None) -> int:
        if not reasoning:
            return 0
        return len(tokenizer.encode(reasoning, add_special_tokens=False))

    return count


def completion_details(
    count: ReasoningCounter | None, reasonings: Iterable[str | None], completion_tokens: int
) -> CompletionTokensDetails | None:
    """The details of a response whose choices reasoned ``reasonings``; None where the
    server has no reasoning parser (vLLM leaves the field out then). Never more than the
    ``completion_tokens`` generated: text that does not re-tokenize as it was generated
    (a byte-level model's broken characters) counts more tokens than it took."""
    if count is None:
        return None
    total = sum(count(r) for r in reasonings)
    return CompletionTokensDetails(reasoning_tokens=min(total, completion_tokens))
