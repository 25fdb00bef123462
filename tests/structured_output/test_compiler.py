"""Both backends: random walks through the allowed tokens always spell valid output; bad
specs are typed errors; the cache; auto's fallback."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import numpy as np
import pytest

from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP
from actorllm.structured_output import GrammarCompiler, StructuredOutputsError
from actorllm.structured_output.backend import allowed_tokens
from tests.helpers.tokenizers import ENDOFTEXT_ID, VOCAB_SIZE, hf_demo_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _walk(compiler: GrammarCompiler, so: SOP, seed: int, limit: int = 80) -> tuple[str, bool]:
    """Pick allowed tokens at random until the grammar ends; (text, terminated)."""
    m = compiler.matcher(compiler.submit(so.key, None).result())
    rng = random.Random(seed)
    out: list[int] = []
    mask = np.zeros((1, (VOCAB_SIZE + 31) // 32), dtype=np.int32)
    for _ in range(limit):
        m.fill_bitmask(mask, 0)
        allowed = allowed_tokens(mask[0], VOCAB_SIZE)
        # Prefer ending: random walks otherwise wander in long strings and numbers.
        tok = ENDOFTEXT_ID if ENDOFTEXT_ID in allowed else rng.choice(allowed)
        assert m.accept(tok)
        out.append(tok)
        if m.is_terminated():  # xgrammar: after the stop token; guidance: after the last
            break
    text = hf_demo_tokenizer().decode([t for t in out if t != ENDOFTEXT_ID])
    return text, m.is_terminated()


@pytest.mark.parametrize("seed", range(3))
def test_json_schema_walks_validate(compiler: GrammarCompiler, seed: int) -> None:
    so = SOP(json=SCHEMA, disable_any_whitespace=True)
    text, done = _walk(compiler, so, seed, limit=200)
    if done:
        jsonschema.validate(json.loads(text), SCHEMA)


def test_regex_choice_and_grammar_walks(compiler: GrammarCompiler) -> None:
    text, done = _walk(compiler, SOP(regex=r"[a-c]{2}-[0-9]"), 0)
    assert done and re.fullmatch(r"[a-c]{2}-[0-9]", text), text
    text, done = _walk(compiler, SOP(choice=["red", "green", "blue"]), 1)
    assert done and text in ("red", "green", "blue")
    text, done = _walk(compiler, SOP(grammar='root ::= "(" ("x" | "y")+ ")"'), 2)
    assert done and re.fullmatch(r"\([xy]+\)", text), text


def test_rollback_returns_to_an_earlier_state(compiler: GrammarCompiler) -> None:
    so = SOP(choice=["ab", "cd"])
    m = compiler.matcher(compiler.submit(so.key, None).result())
    tok = hf_demo_tokenizer()
    a = tok.encode("a", add_special_tokens=False)[0]
    c = tok.encode("c", add_special_tokens=False)[0]
    assert m.accept(a)
    m.rollback(1)
    assert m.accept(c)
    assert not m.accept(a)  # "ca" is no prefix of a choice


@pytest.mark.parametrize(
    "so",
    [SOP(regex="(a"), SOP(grammar="root ::= ("), SOP(json={"type": "nonsense"})],
    ids=["regex", "grammar", "schema"],
)
def test_bad_specs_are_typed_errors(compiler: GrammarCompiler, so: SOP) -> None:
    with pytest.raises(StructuredOutputsError) as info:
        compiler.submit(so.key, None).result()
    assert info.value.param == so.key.param  # structured_outputs.regex, ...json, ...
    # Cached: the same spec fails again at once, from the same future.
    assert compiler.submit(so.key, None).done()


def test_cache_hits_share_the_compiled_grammar(compiler: GrammarCompiler) -> None:
    so = SOP(regex="z+")
    before = compiler.statistics()["hits"]
    first = compiler.submit(so.key, None)
    assert compiler.submit(SOP(regex="z+").key, None) is first
    assert compiler.statistics()["hits"] == before + 1


def test_auto_falls_back_to_guidance_for_unenforced_features() -> None:
    c = GrammarCompiler(hf_demo_tokenizer(), vocab_size=VOCAB_SIZE, backend="auto")
    try:
        schema = {"type": "integer", "multipleOf": 5}
        assert c.submit(SOP(json=schema).key, None).result().backend == "guidance"
        assert c.submit(SOP(json={"type": "integer"}).key, None).result().backend == "xgrammar"
        ws = SOP(json={"type": "object"}, whitespace_pattern=" ?")
        assert c.submit(ws.key, None).result().backend == "guidance"
        with pytest.raises(StructuredOutputsError, match="whitespace_pattern"):
            c.submit(ws.key, "xgrammar").result()
        with pytest.raises(StructuredOutputsError, match="xgrammar"):
            c.submit(SOP(regex="(a").key, None).result()  # both fail: xgrammar's error
        # disable_fallback (vLLM's): auto is xgrammar alone, its refusal is the answer.
        with pytest.raises(StructuredOutputsError, match="multipleOf"):
            c.submit_for(SOP(json=schema, disable_fallback=True)).result()
    finally:
        c.shutdown()


def test_structural_tag_constrains_inside_the_tag() -> None:
    c = GrammarCompiler(hf_demo_tokenizer(), vocab_size=VOCAB_SIZE, backend="xgrammar")
    try:
        tag = {
            "structures": [
                {
                    "begin": "<f>",
                    "schema": {
                        "type": "object",
                        "properties": {"a": {"enum": [1]}},
                        "required": ["a"],
                    },
                    "end": "</f>",
                }
            ],
            "triggers": ["<f>"],
        }
        so = SOP(structural_tag=json.dumps(tag))
        m = c.matcher(c.submit(so.key, None).result())
        tok = hf_demo_tokenizer()
        free = tok.encode("hello <f>", add_special_tokens=False)
        assert all(m.accept(t) for t in free)  # free text, then the trigger opens the tag
        mask = np.zeros((1, (VOCAB_SIZE + 31) // 32), dtype=np.int32)
        m.fill_bitmask(mask, 0)
        inside = {tok.decode([t]) for t in allowed_tokens(mask[0], VOCAB_SIZE)}
        assert inside and all(s.strip() in ("", "{") or s.startswith("{") for s in inside)
    finally:
        c.shutdown()


def test_a_length_bounded_string_admits_no_raw_control_character(
    compiler: GrammarCompiler,
) -> None:
    # xgrammar 0.2.8 alone lets raw control characters into a maxLength string (not JSON);
    # the backend rewrites such strings as a pattern of plain characters.
    so = SOP(json={"type": "string", "maxLength": 5})
    m = compiler.matcher(compiler.submit(so.key, None).result())
    tok = hf_demo_tokenizer()
    assert m.accept(tok.encode('"', add_special_tokens=False)[0])
    mask = np.zeros((1, (VOCAB_SIZE + 31) // 32), dtype=np.int32)
    m.fill_bitmask(mask, 0)
    texts = [tok.decode([t]) for t in allowed_tokens(mask[0], VOCAB_SIZE) if t != ENDOFTEXT_ID]
    assert texts, "the string may go on"
    assert not [t for t in texts if any(ord(ch) < 0x20 for ch in t)]
