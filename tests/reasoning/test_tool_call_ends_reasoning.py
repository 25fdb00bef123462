"""Qwen3: a ``<tool_call>`` written while thinking (no ``</think>``) ends the reasoning, as
vLLM 0.32's qwen3 parser ends it: the structured-output gate, the split (whole and
streamed) and the reasoning token count all put the boundary before that token, which
is the answer's first."""

from __future__ import annotations

from types import SimpleNamespace

from actorllm.engine.scheduling.structured_outputs import reasoning_gate_for
from actorllm.entrypoints.openai.reasoning_usage import reasoning_counter
from actorllm.reasoning import ReasoningStreamer, get_reasoning_parser
from actorllm.structured_output.reasoning_gate import TokenMarkers

# A Qwen3-like vocabulary: the markers are single tokens.
VOCAB = ["<think>", "</think>", "<tool_call>", "</tool_call>", "Call", " it", ".", "\n",
         '{"name": "f"}', "Done", "4"]  # fmt: skip
THINK, END, TOOL, TOOL_END, CALL, IT, DOT, NL, BODY, DONE, FOUR = range(len(VOCAB))


class QwenLikeTokenizer:
    """Greedy longest-match over ``VOCAB``: what the gate and the counter need."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = []
        while text:
            best = max((t for t in range(len(VOCAB)) if text.startswith(VOCAB[t])),
                       key=lambda t: len(VOCAB[t]))  # fmt: skip
            ids.append(best)
            text = text[len(VOCAB[best]) :]
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(VOCAB[t] for t in ids)


TOK = QwenLikeTokenizer()
CONFIG = SimpleNamespace(reasoning_parser="qwen3", structured_outputs_enable_in_reasoning=False)


def _gate() -> TokenMarkers:
    gate = reasoning_gate_for(CONFIG, TOK)
    assert isinstance(gate, TokenMarkers)
    return gate


def _end_index(gate: TokenMarkers, tokens: list[int]) -> tuple[int, bool] | None:
    """(index of the token that ends the reasoning, whether it is the answer's), fed one
    token at a time as the structured-output manager feeds them."""
    tail: list[int] = []
    for i, tok in enumerate(tokens):
        tail.append(tok)
        if gate.ends(tail):
            return i, gate.end_is_answer(tail)
        del tail[: max(0, len(tail) - gate.window)]
    return None


def test_the_gate_ends_on_a_tool_call_and_feeds_it_to_the_grammar() -> None:
    gate = _gate()
    assert gate.implicit_end == TOOL
    assert _end_index(gate, [CALL, IT, DOT, NL, TOOL, NL, BODY]) == (4, True)
    assert _end_index(gate, [CALL, DOT, END, NL, TOOL]) == (2, False)  # </think> first
    assert _end_index(gate, [CALL, IT, DOT]) is None


def test_a_prompt_that_ended_on_a_tool_call_starts_with_the_answer() -> None:
    gate = _gate()
    assert gate.prompt_state([NL, THINK, CALL], True) == "open"
    assert gate.prompt_state([NL, THINK, CALL, TOOL, BODY], True) == "closed"
    # A tool call in an earlier turn does not close a block opened after it.
    assert gate.prompt_state([TOOL, BODY, TOOL_END, NL, NL, NL, THINK], True) == "open"


def test_a_multi_token_tool_call_opener_does_not_end_it_in_the_gate() -> None:
    """vLLM's gate ends the reasoning on the opener's token id only where it is one."""

    class Split(QwenLikeTokenizer):
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [CALL, IT] if text == "<tool_call>" else super().encode(text)

    gate = reasoning_gate_for(CONFIG, Split())
    assert isinstance(gate, TokenMarkers) and gate.implicit_end is None


def test_split_count_and_gate_agree_on_the_boundary() -> None:
    tokens = [CALL, IT, DOT, NL, TOOL, NL, BODY, NL, TOOL_END]
    end = _end_index(_gate(), tokens)
    assert end == (4, True)
    parser = get_reasoning_parser("qwen3")()
    reasoning, content = parser.extract(TOK.decode(tokens))
    assert reasoning == TOK.decode(tokens[:4])
    assert content == TOK.decode(tokens[4:])
    # usage.completion_tokens_details.reasoning_tokens: the tokens before <tool_call>.
    assert reasoning_counter(TOK)(reasoning) == 4


def test_streamed_token_by_token() -> None:
    """Each step's text decoded from the token ids so far, as the server streams: the
    reasoning deltas stop before <tool_call>, which opens the content."""
    tokens = [THINK, CALL, IT, DOT, NL, TOOL, NL, BODY, NL, TOOL_END]
    streamer = ReasoningStreamer(get_reasoning_parser("qwen3")())
    reasoning = content = ""
    first_content_at = None
    for i in range(1, len(tokens) + 1):
        d = streamer.update(TOK.decode(tokens[:i]), final=i == len(tokens))
        reasoning += d.reasoning_content or ""
        if d.content and first_content_at is None:
            first_content_at = i - 1
        content += d.content or ""
    assert reasoning == "Call it.\n"
    assert content == "<tool_call>\n" + VOCAB[BODY] + "\n</tool_call>"
    assert first_content_at == tokens.index(TOOL)
    assert _end_index(_gate(), tokens[1:]) == (tokens.index(TOOL) - 1, True)


def test_thinking_off_is_all_answer() -> None:
    parser = get_reasoning_parser("qwen3")(chat_template_kwargs={"enable_thinking": False})
    text = TOK.decode([TOOL, BODY, TOOL_END])
    assert parser.extract(text) == (None, text)
    assert _gate().prompt_state([NL, NL], False) == "closed"
