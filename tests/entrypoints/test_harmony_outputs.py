"""A gpt-oss choice streamed: one incremental parse per choice gives, delta for delta, what
parsing the whole text so far at every delta gives, and reads each delta once."""

from __future__ import annotations

import random
from collections.abc import Callable

import msgspec
import pytest

from actorllm.core.harmony import parse_output
from actorllm.entrypoints.openai.chat_outputs import Delta
from actorllm.entrypoints.openai.harmony_outputs import HarmonyChoiceParser
from actorllm.entrypoints.openai.tool_parsers import OpenAIToolParser, ToolCallStreamer
from actorllm.entrypoints.openai.tool_parsers.openai import visible_texts
from actorllm.reasoning.gptoss import reasoning_text
from tests.helpers.harmony import long_answer


def _whole_text_deltas(tools: bool, single_call: bool) -> Callable[[str, bool], Delta]:
    """The reference: each delta parses the whole text so far and sends what each part
    grew by since the last (quadratic in the answer's length)."""
    calls = ToolCallStreamer(OpenAIToolParser()) if tools else None
    sent = {"reasoning": 0, "content": 0}

    def grown(part: str, text: str) -> str | None:
        new, sent[part] = text[sent[part] :], max(sent[part], len(text))
        return new or None

    def delta(text: str, final: bool) -> Delta:
        msgs = parse_output(text, final=final).all()
        out = Delta(reasoning_content=grown("reasoning", reasoning_text(msgs) or ""))
        if calls is None:
            out.content = grown("content", "\n".join(visible_texts(msgs)[0]))
            return out
        t = calls.update(text, final)
        out.content = t.content
        out.tool_calls = [c for c in t.tool_calls if c.index == 0 or not single_call]
        return out

    return delta


def _cuts(text: str, how: str) -> list[int]:
    """Where the deltas end: after every character (inside every token and header), or
    after awkward sizes around a token's length."""
    if how == "chars":
        return list(range(1, len(text) + 1))
    rng, cuts = random.Random(11), [0]
    while cuts[-1] < len(text):
        cuts.append(min(len(text), cuts[-1] + rng.choice([1, 2, 3, 6, 9, 12, 50])))
    return cuts[1:]


def _same_ids(d: Delta) -> Delta:
    """Call ids are random: only whether a delta carries one is compared."""
    calls = [msgspec.structs.replace(c, id="id" if c.id else None) for c in d.tool_calls]
    return Delta(d.content, d.reasoning_content, calls)


@pytest.mark.parametrize("how", ["chars", "chunks"])
@pytest.mark.parametrize(("tools", "single_call"), [(False, False), (True, False), (True, True)])
def test_streamed_as_the_whole_text_parse_streams(how: str, tools: bool, single_call: bool) -> None:
    text = long_answer(2 if how == "chars" else 6)  # the reference is quadratic
    choice, reference = (
        HarmonyChoiceParser(tools, single_call),
        _whole_text_deltas(tools, single_call),
    )
    got, want = [], []
    cuts = _cuts(text, how)
    for cut in cuts:
        final = cut == len(text)
        got.append(_same_ids(choice.delta(text[:cut], final)))
        want.append(_same_ids(reference(text[:cut], final)))
    assert got == want
    assert choice.tools_called == tools
    # Every part arrives whole: the concatenated deltas are the parsed answer's parts.
    reasoning = "".join(d.reasoning_content or "" for d in got)
    assert reasoning == choice.message(text).reasoning_content
    if tools:
        names = [
            c.function.name for d in got for c in d.tool_calls if c.function and c.function.name
        ]
        assert names == [c.function.name for c in choice.message(text).tool_calls]
    else:
        assert "".join(d.content or "" for d in got) == choice.message(text).content


def test_a_delta_is_read_once_however_long_the_answer() -> None:
    """Bounded work, counted not timed: what the parser scans per delta is the delta and
    at most the start of a token held from the one before."""
    text = long_answer(25)  # 20 KB
    choice = HarmonyChoiceParser(tools=True)
    cuts = _cuts(text, "chunks")
    prev = 0
    for cut in cuts:
        before = choice.statistics().scanned
        choice.delta(text[:cut], final=cut == len(text))
        assert choice.statistics().scanned - before <= (cut - prev) + len("<|message|>") - 1
        prev = cut
    stats = choice.statistics()
    assert stats.fed == len(text) and stats.messages == 25 * 8 + 1
