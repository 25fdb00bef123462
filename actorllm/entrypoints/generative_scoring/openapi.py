"""``/generative_scoring``'s part of the OpenAPI document: the bounds of its request that
the struct leaves to the serving layer (which words them as vLLM does), stated so that
every body the schema allows is served."""

from __future__ import annotations

from typing import Any

from actorllm.core.sampling_params import MAX_LOGPROB_TOKEN_IDS
from actorllm.entrypoints.openai.openapi.served import Served

RULES = (
    " Each item makes one prompt with the query (after it, or before it with `item_first`),"
    " which must not be empty; a prompt longer than the context length less one token keeps"
    " its first tokens. The score is the probability of the first label next: over the"
    " labels alone (`apply_softmax`) or over the whole vocabulary."
)


def generative_scoring_rule(components: dict[str, Any], served: Served) -> None:
    """Items all texts or all token-id lists, at least one; labels in the vocabulary, at
    least one and at most ``--max-logprobs`` (vLLM asks for that many logprobs)."""
    props = components["GenerativeScoringRequest"]["properties"]
    token = {"type": "integer", "minimum": 0, "maximum": served.vocab_size - 1}
    props["items"] = {
        "anyOf": [
            {"type": "array", "minItems": 1, "items": {"type": "string"}},
            {"type": "array", "minItems": 1, "items": {"type": "array", "items": token}},
        ]
    }
    limit = served.vocab_size if served.max_logprobs == -1 else served.max_logprobs
    props["label_token_ids"] = {
        "type": "array",
        "items": token,
        "minItems": 1,
        "maxItems": min(limit, MAX_LOGPROB_TOKEN_IDS),
    }
