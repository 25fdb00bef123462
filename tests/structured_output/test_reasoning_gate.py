"""Where the answer starts, from tokens alone: special-token markers (``<think>``) and
Granite's plain-text markers, however the tokenizer splits or merges them."""

from __future__ import annotations

import pytest

from actorllm.reasoning import GraniteReasoningParser
from actorllm.structured_output.reasoning_gate import TextMarkers, TokenMarkers
from tests.helpers.tokenizers import hf_demo_tokenizer


def _ids(text: str) -> list[int]:
    return list(hf_demo_tokenizer().encode(text, add_special_tokens=False))


def _granite() -> TextMarkers:
    p = GraniteReasoningParser
    return TextMarkers(hf_demo_tokenizer(), p.start_texts, p.end_texts)


def _end_index(gate: TextMarkers, tokens: list[int]) -> int | None:
    """The index of the token that ends the reasoning, fed one token at a time."""
    tail: list[int] = []
    for i, tok in enumerate(tokens):
        tail.append(tok)
        if gate.ends(tail):
            return i
        del tail[: max(0, len(tail) - gate.window)]
    return None


@pytest.mark.parametrize(
    "before",
    ["", " ", "\n", "\n\n", "so 4.", "so 4. ", "so 4.\n\n", "a: b\n"],
)
@pytest.mark.parametrize("marker", ["Here is my response:", "Here's my response:"])
def test_the_answer_starts_after_the_token_that_completes_the_marker(
    before: str, marker: str
) -> None:
    gate = _granite()
    thought = "Here is my thought process:\nFirst: think. Here is a plan: none.\n" + before
    head = _ids(thought + marker)
    tokens = _ids(thought + marker + '{"a": 1}')
    assert tokens[: len(head)] == head  # (the marker's ':' does not merge with '{')
    assert _end_index(gate, tokens) == len(head) - 1


def test_a_merged_last_token_still_ends_it() -> None:
    """'::' is one token of the demo vocabulary: the marker ends inside it."""
    gate = _granite()
    tokens = [*_ids("Here is my thought process: hm. Here is my response"), _ids("::")[0]]
    assert len(_ids("::")) == 1
    assert _end_index(gate, tokens) == len(tokens) - 1


def test_no_end_marker_no_end() -> None:
    gate = _granite()
    text = "Here is my thought process: Here is my thought. Here is my respon se: x"
    assert _end_index(gate, _ids(text)) is None


def test_prompt_state_follows_the_template() -> None:
    gate = _granite()
    asked = _ids(
        "System: Write your thoughts after 'Here is my thought process:' and your response "
        "after 'Here is my response:'.\nUser: hi\nAssistant:\n"
    )
    assert gate.prompt_state(asked, None) == "open"  # Granite's thinking: true
    assert gate.prompt_state(_ids("User: hi\nAssistant:\n"), None) == "closed"  # thinking off
    done = _ids("Here is my thought process: x\nHere is my response:\n")
    assert gate.prompt_state(done, None) == "closed"  # the prompt ended the reasoning itself
    assert gate.opener is None


def test_token_markers() -> None:
    start, end = _ids("<think>"), _ids("</think>")
    gate = TokenMarkers(start, end)
    assert gate.prompt_state([5, *start, 9], None) == "open"
    assert gate.prompt_state([*start, 9, *end, 7], None) == "closed"
    assert gate.prompt_state([5, 6], None) == ("may_open" if len(start) == 1 else "closed")
    assert gate.ends([9, *end]) and not gate.ends([*end, 9])


@pytest.mark.parametrize("thinking", [True, False, None])
def test_token_markers_follow_the_requests_thinking(thinking: bool | None) -> None:
    """vLLM's wait_for_reasoning: thinking on, the output starts inside the reasoning
    unless the prompt closed a block at its end; off, it is the answer at once."""
    start, end = [7], [8]  # single-token markers, as Qwen3's
    gate = TokenMarkers(start, end)
    plain, opened, closed = [5, 6], [5, *start, 9], [5, *start, *end, 3]
    expect = {
        True: ("open", "open", "closed"),
        False: ("closed", "closed", "closed"),
        None: ("may_open", "open", "closed"),
    }[thinking]
    got = tuple(gate.prompt_state(p, thinking) for p in (plain, opened, closed))
    assert got == expect


@pytest.mark.parametrize(
    ("name", "kind"),
    [("deepseek_r1", TokenMarkers), ("mistral", TokenMarkers), ("seed_oss", TokenMarkers),
     ("minimax_m2_append_think", TokenMarkers), ("granite", TextMarkers),
     ("olmo3", TextMarkers)],
)  # fmt: skip
def test_every_parser_gets_a_gate(name: str, kind: type) -> None:
    """The engine builds the gate from the parser's markers, so structured outputs start
    after the reasoning for every family (and cover it all with enable_in_reasoning)."""
    from types import SimpleNamespace

    from actorllm.engine.scheduling.structured_outputs import structured_outputs_for
    from actorllm.reasoning import get_reasoning_parser

    config = SimpleNamespace(
        reasoning_parser=name,
        structured_outputs_enable_in_reasoning=False,
        structured_outputs_backend="xgrammar",
        structured_outputs_disable_any_whitespace=False,
        structured_outputs_disable_additional_properties=False,
    )
    model = SimpleNamespace(vocab_size=4096, eos_token_ids=[0])
    so = structured_outputs_for(config, hf_demo_tokenizer(), model)
    try:
        so.compiler  # noqa: B018  (built on first use, with the gate)
        assert isinstance(so._reasoning, kind)
        # A request that does not say thinks as the parser does without kwargs.
        assert so._reasoning.thinking == get_reasoning_parser(name).thinking_of({})
        config.structured_outputs_enable_in_reasoning = True
        assert structured_outputs_for(config, hf_demo_tokenizer(), model).reasoning_markers is None
    finally:
        so.shutdown()


def test_olmo3_text_tags() -> None:
    """Olmo 3: reasoning unless the prompt closed a block after its last <think>; the end
    is '</think>' in the text, whatever tokens it took."""
    from actorllm.reasoning import get_reasoning_parser

    p = get_reasoning_parser("olmo3")
    gate = TextMarkers(hf_demo_tokenizer(), p.start_texts, p.end_texts, p.text_rule)
    assert gate.prompt_state(_ids("user: hi\nassistant: <think>"), None) == "open"
    assert gate.prompt_state(_ids("user: hi\nassistant:"), None) == "open"  # the model may
    assert gate.prompt_state(_ids("assistant: <think></think>\n"), None) == "closed"
    earlier = "assistant: <think>a</think>b\nuser: hi\nassistant: <think>"
    assert gate.prompt_state(_ids(earlier), None) == "open"
    for text in ("Done.</think>{", "Done. </think>\n{", "Done.\n</think>{"):
        head = _ids(text[: text.index("</think>") + len("</think>")])
        tokens = _ids(text)
        assert tokens[: len(head)] == head
        assert _end_index(gate, tokens) == len(head) - 1, text
