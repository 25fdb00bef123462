"""Every request field is honoured or refused: the one table of fields we know but cannot
honour yet, and the warning for fields nobody knows.

:func:`decode_request` turns a request body into its protocol struct:

1. the JSON is parsed, and integral floats (``1.0``) become ints, as JSON Schema's
   ``integer`` (and vLLM's pydantic) accept them;
2. vLLM's checks of the raw body (``request_rules.py``: stream_options without stream,
   an empty prompt, chat's empty tools, logit_bias keys; the pooling fields vLLM removed:
   ``removed_pooling_fields.py``), with vLLM's messages;
3. a field of :data:`UNSUPPORTED` set to anything but its "off" value is a 400 naming it
   (``param``);
4. fields no struct and no table knows are ignored with one warning naming them (vLLM's
   behaviour: clients send extras);
5. the rest is validated against the struct (types, ranges; a 400 naming the field).

    >>> from actorllm.entrypoints.openai.protocol import CompletionRequest
    >>> decode_request(b'{"prompt": "hi", "max_tokens": 2.0}', CompletionRequest).max_tokens
    2
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.request_rules import check_raw_body

logger = logging.getLogger("actorllm.server")
S = TypeVar("S", bound=msgspec.Struct)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A field we know but cannot honour yet: only its "off" values are accepted."""

    why: str
    off: tuple[Any, ...] = (None,)
    same_as: str | None = None  # also accepted: equal to this field (best_of == n)

    def accepts(self, value: Any, body: dict[str, Any]) -> bool:
        if any(type(value) is type(v) and value == v for v in self.off):
            return True
        return self.same_as is not None and value == body.get(self.same_as, 1)

    def schema(self) -> dict[str, Any]:
        """The values accepted, as JSON Schema (the OpenAPI document states them)."""
        if self.same_as is None:
            return {"enum": list(self.off), "description": f"Not supported yet: {self.why}."}
        # JSON Schema cannot say "equal to n" in a form the fuzzers take: the document
        # states the off values, and the description the rule.
        return {
            "enum": list(self.off),
            "description": f"Not supported yet: {self.why}; accepted when equal to "
            f"`{self.same_as}` (1 by default), which the schema cannot state.",
        }


_FALSY: tuple[Any, ...] = (None, False, [], {}, "")
_FUNCTIONS = "the deprecated functions / function_call fields (use tools / tool_choice)"
_TEXT_ONLY = "this server serves text models"

# {field: why it is refused unless off}
UNSUPPORTED: dict[str, Refusal] = {
    # OpenAI's deprecated function-calling fields (use tools / tool_choice)
    "functions": Refusal(_FUNCTIONS, _FALSY),
    "function_call": Refusal(_FUNCTIONS, (None, "none")),
    # sampling this engine does not do
    "best_of": Refusal("ranking candidates (best_of other than n)", same_as="n"),
    "logits_processors": Refusal(
        "per-request logits processors (as in vLLM V1: the server's --logits-processors "
        "classes read vllm_xargs)",
        _FALSY,
    ),
    "suffix": Refusal("suffix (fill-in-the-middle)", (None, "")),
    # inputs and plumbing this server does not have
    # completions declare it (--enable-prompt-embeds); chat has no such field in vLLM
    "prompt_embeds": Refusal("prompt embeddings (a completions field)", (None, [])),
    "mm_processor_kwargs": Refusal(_TEXT_ONLY, _FALSY),
    "media_io_kwargs": Refusal(_TEXT_ONLY, _FALSY),
    "audio": Refusal(_TEXT_ONLY),
    "modalities": Refusal(_TEXT_ONLY, (None, ["text"])),
    "prediction": Refusal("predicted outputs"),
    "web_search_options": Refusal("web search"),
    "kv_transfer_params": Refusal("per-request KV transfer"),
    "ec_transfer_params": Refusal("per-request encoder-cache transfer"),
    "store": Refusal("stored completions", _FALSY),
    "metadata": Refusal("stored completions"),
    "service_tier": Refusal("service tiers", (None, "auto", "default")),
    "verbosity": Refusal("verbosity"),
}


def refuse_unsupported(body: dict[str, Any], served: frozenset[str] = frozenset()) -> None:
    """400 naming the first field of :data:`UNSUPPORTED` that asks for something;
    ``served``: fields the request kind declares, so serves itself (not refused)."""
    for name, value in body.items():
        rule = None if name in served else UNSUPPORTED.get(name)
        if rule is not None and not rule.accepts(value, body):
            raise bad_request(f"`{name}` is not supported by this server yet: {rule.why}.", name)


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
    known = set(kind.__struct_fields__)
    check_raw_body(raw, kind)
    # A field the struct declares is served by it (the Responses API's store, metadata).
    refuse_unsupported(raw, frozenset(known))
    unknown = sorted(k for k in raw if k not in known and k not in UNSUPPORTED)
    if unknown:
        logger.warning("ignoring unknown request fields: %s", ", ".join(unknown))
    return msgspec.convert({k: v for k, v in raw.items() if k in known}, kind)
