"""Every request field is honoured or refused: the one table of fields we know but cannot
honour yet, and the warning for fields nobody knows.

:func:`decode_request` turns a request body into its protocol struct:

1. the JSON is parsed, and integral floats (``1.0``) become ints, as JSON Schema's
   ``integer`` (and vLLM's pydantic) accept them;
2. a field of :data:`UNSUPPORTED` set to anything but its "off" value is a 400 naming it
   (``param``) — the features issue 15 builds (structured outputs, tool calling, reasoning)
   remove their lines here when they land;
3. fields no struct and no table knows are ignored with one warning naming them (vLLM's
   behaviour: clients send extras);
4. the rest is validated against the struct (types, ranges; a 400 naming the field).

    >>>     >>> decode_request(b'{"prompt": "hi", "max_tokens": 2.0}', CompletionRequest).max_tokens
    2
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from actorllm.entrypoints.openai.errors import bad_request

logger = logging.getLogger("actorllm.server")
S = TypeVar("S", bound=msgspec.Struct)

# accept(value, whole body) -> True when the value asks for nothing we cannot do.
Accept = Callable[[Any, dict[str, Any]], bool]


def _null(value: Any, _body: dict[str, Any]) -> bool:
    return value is None


def _falsy(value: Any, _body: dict[str, Any]) -> bool:
    return not value


def _one_of(*allowed: Any) -> Accept:
    return lambda value, _body: value in allowed


_TOOLS = "tool calling is not supported yet"
_STRUCTURED = "structured outputs are not supported yet"

# {field: (accepts, why it is refused otherwise)}
UNSUPPORTED: dict[str, tuple[Accept, str]] = {
    # tool calling (issue 15)
    "tools": (_falsy, _TOOLS),
    "tool_choice": (_one_of(None, "none"), _TOOLS),
    "parallel_tool_calls": (_null, _TOOLS),
    "functions": (_falsy, _TOOLS),
    "function_call": (_one_of(None, "none"), _TOOLS),
    # structured outputs (issue 15)
    "response_format": (_one_of(None, {"type": "text"}), _STRUCTURED),
    "structured_outputs": (_null, _STRUCTURED),
    "guided_json": (_null, _STRUCTURED),
    "guided_regex": (_null, _STRUCTURED),
    "guided_choice": (_null, _STRUCTURED),
    "guided_grammar": (_null, _STRUCTURED),
    "guided_decoding_backend": (_null, _STRUCTURED),
    "guided_whitespace_pattern": (_null, _STRUCTURED),
    # reasoning output (issue 15)
    "reasoning_effort": (_null, "reasoning output is not supported yet"),
    "include_reasoning": (_null, "reasoning output is not supported yet"),
    # sampling this engine does not do
    "best_of": (
        lambda value, body: value is None or value == body.get("n", 1),
        "best_of other than n is not supported (no candidate ranking)",
    ),
    "use_beam_search": (_falsy, "beam search is not supported"),
    "length_penalty": (_one_of(None, 1, 1.0), "length_penalty applies to beam search only"),
    "logits_processors": (_falsy, "custom logits processors are not supported"),
    "vllm_xargs": (_null, "custom logits processors are not supported"),
    "suffix": (_one_of(None, ""), "suffix (fill-in-the-middle) is not supported"),
    # inputs and plumbing this server does not have
    "prompt_embeds": (_null, "prompt embeddings are not supported"),
    "mm_processor_kwargs": (_falsy, "this server serves text models"),
    "audio": (_null, "this server serves text models"),
    "modalities": (_one_of(None, ["text"]), "this server serves text models"),
    "prediction": (_null, "predicted outputs are not supported"),
    "web_search_options": (_null, "web search is not supported"),
    "chat_template": (_null, "a per-request chat template is not accepted (use --chat-template)"),
    "cache_salt": (_null, "prefix-cache salting is not supported"),
    "kv_transfer_params": (_null, "per-request KV transfer is not supported"),
    "return_token_ids": (_falsy, "return_token_ids is not supported yet"),
    "store": (_falsy, "stored completions are not supported"),
    "metadata": (_null, "stored completions are not supported"),
    "service_tier": (_one_of(None, "auto", "default"), "service tiers are not supported"),
    "verbosity": (_null, "verbosity is not supported"),
}


def refuse_unsupported(body: dict[str, Any]) -> None:
    """400 naming the first field of :data:`UNSUPPORTED` that asks for something."""
    for name, value in body.items():
        rule = UNSUPPORTED.get(name)
        if rule is not None and not rule[0](value, body):
            raise bad_request(f"`{name}` is not supported by this server: {rule[1]}.", name)


def _ints(value: Any) -> Any:
    """Integral floats -> ints, recursively (JSON Schema's ``integer`` includes ``1.0``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def decode_request(body: bytes, kind: type[S]) -> S:
    """Parse, refuse, warn, validate (module docstring). Raises APIError / msgspec errors
    (both 400 via ``errors.to_api_error``)."""
    raw = msgspec.json.decode(body)
    if not isinstance(raw, dict):
        raise bad_request("The request body must be a JSON object.")
    raw = _ints(raw)
    refuse_unsupported(raw)
    known = set(kind.__struct_fields__)
    unknown = sorted(k for k in raw if k not in known and k not in UNSUPPORTED)
    if unknown:
        logger.warning("ignoring unknown request fields: %s", ", ".join(unknown))
    return msgspec.convert({k: v for k, v in raw.items() if k in known}, kind)
