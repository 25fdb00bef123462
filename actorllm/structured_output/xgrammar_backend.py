"""xgrammar (vLLM's default backend): JSON schema, regex, choice, EBNF/Lark, structural tags.

Compiled grammars are cached by the compile pool; xgrammar's own compiler cache stays off
so there is one cache to reason about. Schemas compile in xgrammar's strict mode: an object
without ``additionalProperties`` allows only its listed properties (so
``disable_additional_properties`` always holds here). Schema features xgrammar accepts but does not
enforce are refused up front (:func:`unsupported_json_feature`), so ``auto`` sends those
schemas to llguidance instead of producing output that violates them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xgrammar as xgr

from actorllm.core.structured_outputs_params import GrammarKey, StructuredOutputsError
from actorllm.structured_output.backend import BackendName, UnsupportedFeatureError
from actorllm.structured_output.grammar_text import choice_as_ebnf, looks_like_lark

# String formats xgrammar's JSON-schema converter turns into grammar rules.
_FORMATS = frozenset(
    [
        "email",
        "date",
        "time",
        "date-time",
        "duration",
        "ipv4",
        "ipv6",
        "hostname",
        "uuid",
        "uri",
        "uri-reference",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
    ]
)


def unsupported_json_feature(schema: Any) -> str | None:
    """The first schema keyword xgrammar would silently not enforce, or None."""
    if isinstance(schema, list):
        return next((f for f in map(unsupported_json_feature, schema) if f), None)
    if not isinstance(schema, dict):
        return None
    types = schema.get("type")
    types = {types} if isinstance(types, str) else set(types or ())
    if types & {"integer", "number"} and "multipleOf" in schema:
        return "multipleOf"
    if "array" in types:
        for kw in ("uniqueItems", "contains", "minContains", "maxContains"):
            if kw in schema:
                return kw
    if "string" in types:
        if "format" in schema and schema["format"] not in _FORMATS:
            return f"format {schema['format']!r}"
        if ("pattern" in schema or "format" in schema) and (
            "minLength" in schema or "maxLength" in schema
        ):
            return "pattern/format together with minLength/maxLength"
    pattern_props = schema.get("patternProperties")
    if isinstance(pattern_props, dict) and ("properties" in schema or len(pattern_props) > 1):
        return "patternProperties beside other properties"
    return next((f for f in map(unsupported_json_feature, schema.values()) if f), None)


# One character of a JSON string written without escapes: no control character, quote or
# backslash (as a JSON-schema pattern, which applies to the decoded value).
_PLAIN_CHAR = '[^\\x00-\\x1f"\\\\]'


def bounded_strings_as_patterns(schema: Any) -> Any:
    """``schema`` with every length-bounded string (``minLength``/``maxLength`` without a
    pattern or format) rewritten as a ``pattern`` of plain characters.

    Why: xgrammar 0.2.8's rule for length-bounded strings admits raw control characters
    (``"a\\x08`` is accepted for ``maxLength: 5``), which is not JSON. The pattern admits a
    subset of the valid strings (no escapes), so every output still validates.

    >>> bounded_strings_as_patterns({"type": "string", "maxLength": 3})["pattern"]
    '^[^\\\\x00-\\\\x1f"\\\\\\\\]{0,3}$'
    """
    if isinstance(schema, list):
        return [bounded_strings_as_patterns(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded_strings_as_patterns(v) for k, v in schema.items()}
    types = out.get("type")
    is_string = types == "string" or (isinstance(types, list) and types == ["string"])
    bounded = "minLength" in out or "maxLength" in out
    if is_string and bounded and "pattern" not in out and "format" not in out:
        lo = int(out.pop("minLength", 0))
        hi = out.pop("maxLength", None)
        out["pattern"] = f"^{_PLAIN_CHAR}{{{lo},{'' if hi is None else int(hi)}}}$"
    return out


@dataclass(frozen=True)
class XgrammarCompiled:
    grammar: xgr.CompiledGrammar
    backend: BackendName = "xgrammar"


class XgrammarMatcher:
    def __init__(self, compiled: XgrammarCompiled) -> None:
        self._m = xgr.GrammarMatcher(compiled.grammar)

    def accept(self, token_id: int) -> bool:
        return bool(self._m.accept_token(token_id))

    def rollback(self, num_tokens: int) -> None:
        self._m.rollback(num_tokens)

    def fill_bitmask(self, bitmask: np.ndarray, row: int) -> None:
        self._m.fill_next_token_bitmask(bitmask, row)

    def is_terminated(self) -> bool:
        return bool(self._m.is_terminated())

    @staticmethod
    def fill_bitmasks(
        matchers: Sequence[XgrammarMatcher], bitmask: np.ndarray, rows: Sequence[int]
    ) -> None:
        """``fill_bitmask`` for each (matcher, row), in one native call: xgrammar's batch
        fill, one thread (the calling one), with the GIL released — 2x faster than a
        Python call per row at 64 rows, and the loop runs meanwhile."""
        batch = _batch_matcher()
        if batch is None:  # an xgrammar without the batch API
            for matcher, row in zip(matchers, rows, strict=True):
                matcher.fill_bitmask(bitmask, row)
            return
        batch.batch_fill_next_token_bitmask([m._m for m in matchers], bitmask, list(rows))


_local = threading.local()


def _batch_matcher() -> Any:
    """This thread's ``xgr.BatchGrammarMatcher`` (one worker thread: the caller's), or None
    where xgrammar has none. Per thread, as nothing says one may be shared."""
    batch = getattr(_local, "batch", False)
    if batch is False:
        cls = getattr(xgr, "BatchGrammarMatcher", None)
        batch = _local.batch = cls(max_threads=1) if cls is not None else None
    return batch


class XgrammarBackend:
    name: BackendName = "xgrammar"

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> None:
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids or None
        )
        # Threads: one per compile; the pool runs several compiles side by side.
        self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    def compile(self, key: GrammarKey) -> XgrammarCompiled:
        if key.whitespace_pattern is not None:
            raise UnsupportedFeatureError(
                "is not supported by xgrammar.", param="structured_outputs.whitespace_pattern"
            )
        try:
            return XgrammarCompiled(self._compile(key))
        except StructuredOutputsError:
            raise
        except (RuntimeError, ValueError, TypeError) as exc:  # xgrammar's parse errors
            raise StructuredOutputsError(
                f"cannot be compiled (xgrammar): {_first_line(exc)}", param=key.param
            ) from exc

    def _compile(self, key: GrammarKey) -> xgr.CompiledGrammar:
        c = self._compiler
        if key.kind in ("json", "json_object"):
            schema = json.loads(key.spec)
            feature = unsupported_json_feature(schema)
            if feature is not None:
                raise UnsupportedFeatureError(
                    f"uses {feature}, which xgrammar does not enforce.", param=key.param
                )
            spec = json.dumps(bounded_strings_as_patterns(schema))
            return c.compile_json_schema(spec, any_whitespace=key.any_whitespace)
        if key.kind == "regex":
            return c.compile_regex(key.spec)
        if key.kind == "choice":
            return c.compile_grammar(choice_as_ebnf(json.loads(key.spec)))
        if key.kind == "grammar":
            if looks_like_lark(key.spec):
                return c.compile_grammar(xgr.Grammar.from_lark(key.spec))
            return c.compile_grammar(key.spec)
        assert key.kind == "structural_tag"
        tag = json.loads(key.spec)
        if "structures" in tag:  # the older {structures, triggers} form
            items = [
                xgr.StructuralTagItem(
                    begin=s["begin"], schema=json.dumps(s["schema"]), end=s["end"]
                )
                for s in tag["structures"]
            ]
            return c.compile_structural_tag(items, tag["triggers"])
        return c.compile_structural_tag(key.spec)

    def matcher(self, compiled: Any) -> XgrammarMatcher:
        return XgrammarMatcher(compiled)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
