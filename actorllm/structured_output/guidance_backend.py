"""llguidance (``guidance``): JSON schema, regex, choice, Lark/GBNF grammars.

llguidance has no separate compile step: the grammar text is checked against the
tokenizer once here (``validate_grammar``, in the compile pool) and every request's
:class:`GuidanceMatcher` builds its own parser from it lazily.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import llguidance
import llguidance.hf
import llguidance.numpy
import numpy as np

from actorllm.core.structured_outputs_params import GrammarKey, StructuredOutputsError
from actorllm.structured_output.backend import BackendName, UnsupportedFeatureError


@dataclass(frozen=True)
class GuidanceCompiled:
    grammar: str  # llguidance's serialized grammar
    backend: BackendName = "guidance"


class GuidanceMatcher:
    def __init__(self, tokenizer: Any, compiled: GuidanceCompiled) -> None:
        self._m = llguidance.LLMatcher(tokenizer, compiled.grammar, log_level=0)
        self._stopped = False

    def accept(self, token_id: int) -> bool:
        if self._m.is_stopped():
            return False
        ok = bool(self._m.consume_token(token_id)) and not self._m.is_error()
        return ok

    def rollback(self, num_tokens: int) -> None:
        if num_tokens:
            self._m.rollback(num_tokens)

    def fill_bitmask(self, bitmask: np.ndarray, row: int) -> None:
        llguidance.numpy.fill_next_token_bitmask(self._m, bitmask, row)

    def is_terminated(self) -> bool:
        return bool(self._m.is_stopped())


class GuidanceBackend:
    name: BackendName = "guidance"

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> None:
        del stop_token_ids  # llguidance stops on the tokenizer's EOS
        self._tokenizer = llguidance.hf.from_tokenizer(tokenizer, vocab_size)

    def compile(self, key: GrammarKey) -> GuidanceCompiled:
        try:
            grammar = self._serialize(key)
        except (ValueError, KeyError, TypeError) as exc:
            raise StructuredOutputsError(
                f"cannot be compiled (guidance): {exc}", param=key.param
            ) from exc
        error = llguidance.LLMatcher.validate_grammar(grammar, self._tokenizer)
        if error:
            if "unsupported" in error.lower() or "not supported" in error.lower():
                raise UnsupportedFeatureError(
                    f"is not supported by guidance: {error}", param=key.param
                )
            raise StructuredOutputsError(f"cannot be compiled (guidance): {error}", param=key.param)
        return GuidanceCompiled(grammar)

    def _serialize(self, key: GrammarKey) -> str:
        if key.kind in ("json", "json_object"):
            schema = json.loads(key.spec)
            if key.disable_additional_properties:
                _close_objects(schema)
            options: Any = {"whitespace_flexible": key.any_whitespace}
            if key.whitespace_pattern is not None:
                options["whitespace_pattern"] = key.whitespace_pattern
            return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=options)
        if key.kind == "regex":
            return llguidance.grammar_from("regex", key.spec)
        if key.kind == "choice":
            return llguidance.grammar_from("choice", key.spec)
        if key.kind == "grammar":
            return llguidance.grammar_from("grammar", key.spec)
        raise UnsupportedFeatureError("is not supported by guidance.", param=key.param)

    def matcher(self, compiled: Any) -> GuidanceMatcher:
        return GuidanceMatcher(self._tokenizer, compiled)


def _close_objects(schema: Any) -> None:
    """Set ``additionalProperties: false`` on every object schema that lists properties."""
    if isinstance(schema, list):
        for item in schema:
            _close_objects(item)
    elif isinstance(schema, dict):
        for value in schema.values():
            _close_objects(value)
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
